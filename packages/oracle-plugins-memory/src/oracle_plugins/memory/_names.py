"""Tool names: the engine's wire names and the prefixed names the agent sees."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "DEFAULT_SELECTED_TOOLS",
    "MAIN_AGENT_ONLY",
    "READ_ONLY_TOOLS",
    "TOOL_PREFIX",
    "WIRE_TOOLS",
    "prefixed",
    "wire_name",
    "wire_names",
]

TOOL_PREFIX = "memory-engine__"
WIRE_TOOLS: tuple[str, ...] = (
    "search_memory_engine",
    "add_memory",
    "delete_episode",
    "clear",
    "add_oracle_knowledge",
    "delete_edge",
)
DEFAULT_SELECTED_TOOLS: tuple[str, ...] = (
    "search_memory_engine",
    "add_memory",
    "delete_episode",
    "clear",
)
MAIN_AGENT_ONLY: frozenset[str] = frozenset({"clear"})
"""Destructive tools never handed to sub-agents."""
READ_ONLY_TOOLS: frozenset[str] = frozenset({"search_memory_engine"})


def prefixed(wire: str) -> str:
    """``memory-engine__<wire>``."""
    return TOOL_PREFIX + wire


def wire_name(name: str) -> str:
    """The wire name of a tool given with or without the prefix."""
    return name.removeprefix(TOOL_PREFIX)


def wire_names(names: Iterable[str]) -> tuple[str, ...]:
    """Wire names, deduplicated, order kept.

    Raises:
        ValueError: a name is not one of the six engine tools.
    """
    out = tuple(dict.fromkeys(wire_name(n) for n in names))
    unknown = [n for n in out if n not in WIRE_TOOLS]
    if unknown:
        raise ValueError(
            f"unknown memory tools {unknown}; choose from {', '.join(WIRE_TOOLS)} "
            f"(with or without the '{TOOL_PREFIX}' prefix)"
        )
    return out
