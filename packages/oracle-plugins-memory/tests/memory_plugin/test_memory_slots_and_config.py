"""Slot formatting, the batch response mapping, and the plugin's environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oracle_plugins.memory import MemoryConfig, format_slot, select_backend, wants_memory
from oracle_plugins.memory._slots import MAX_FACTS_PER_SLOT, slots_from_results


def slot(facts: list[str], entities: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "facts": [{"fact": f} for f in facts],
        "entities": [{"name": e} for e in entities],
        "episodes": [],
        "communities": [],
    }


def test_a_slot_reads_as_nested_bullets_under_its_label() -> None:
    assert format_slot(["Lives in Lisbon", "Speaks Portuguese"], ["Lisbon", "Lisbon"]) == (
        "Lives in Lisbon\n  - Speaks Portuguese\n  - **Related:** Lisbon"
    )
    assert format_slot([], ["Acme"]) == "**Related:** Acme"
    assert format_slot([], []) is None
    many = format_slot([f"fact {i}" for i in range(20)])
    assert many is not None
    assert many.count("fact ") == MAX_FACTS_PER_SLOT


def test_results_map_to_slots_by_position() -> None:
    error = {"error": {"status_code": 500, "detail": "x"}, "query": "q", "strategy_used": "b"}
    context = slots_from_results(
        [
            slot(["Is called Ada"], ("Ada",)),
            error,
            slot(["Is called Ada", "Wants to learn\nItalian"]),  # repeats are dropped
            "garbage",
        ]
    )
    assert context == {
        "identity": "Is called Ada\n  - **Related:** Ada",
        "work": None,
        "goals": "Wants to learn Italian",
        "interests": None,
        "relationships": None,
        "recent": None,
    }


def test_backend_selection_and_auto_detect() -> None:
    assert select_backend(None, "https://engine.test/mcp") == "remote"
    assert select_backend(None, None) == "embedded"
    assert select_backend("embedded", "https://engine.test/mcp") == "embedded"
    assert wants_memory({"MEMORY_MCP_URL": "https://engine.test/mcp"})
    # The embedded backend is the runtime's choice (manifest ``backends``), not a gate.
    assert not wants_memory({"MEMORY_BACKEND": "embedded"})
    assert not wants_memory({"MEMORY_MCP_URL": "  ", "MEMORY_BACKEND": "remote"})
    assert not wants_memory({})


def test_the_config_checks_urls_per_backend() -> None:
    remote = MemoryConfig.model_validate(
        {"MEMORY_MCP_URL": "https://engine.test/mcp/", "MEMORY_ENGINE_URL": "https://engine.test/"}
    )
    assert remote.backend == "remote"
    assert remote.MEMORY_ENGINE_URL == "https://engine.test"
    embedded = MemoryConfig.model_validate(
        {"MEMORY_BACKEND": "embedded", "MEMORY_ORACLE_OWNER_DIDS": " did:a , ,did:b"}
    )
    assert embedded.backend == "embedded"
    assert embedded.oracle_owner_dids == frozenset({"did:a", "did:b"})
    with pytest.raises(ValidationError, match="required with MEMORY_BACKEND=remote"):
        MemoryConfig.model_validate({"MEMORY_BACKEND": "remote"})
    with pytest.raises(ValidationError, match="must be an http"):
        MemoryConfig.model_validate(
            {"MEMORY_MCP_URL": "https://e.test", "MEMORY_ENGINE_URL": "e.test"}
        )
