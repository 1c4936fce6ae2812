"""Tool names: the engine's wire names and the prefixed names the agent sees."""

from __future__ import annotations

from collections.abc import Iterable

from oracle_core import Effect

__all__ = [
    "DEFAULT_SELECTED_TOOLS",
    "DESTRUCTIVE_TOOLS",
    "MAIN_AGENT_ONLY",
    "READ_ONLY_TOOLS",
    "TOOL_PREFIX",
    "WIRE_TOOLS",
    "prefixed",
    "tool_effect",
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
DESTRUCTIVE_TOOLS: frozenset[str] = frozenset({"delete_episode", "clear", "delete_edge"})
"""Tools that delete memories: ``effect="destructive"``, for hosts that ask for approval."""


def tool_effect(wire: str, read_only: bool | None = None) -> Effect:
    """The ``effect`` of an engine tool: ``read``, ``destructive`` or ``write``.

    Args:
        wire: The engine's tool name.
        read_only: The engine's own read-only hint, when it gives one.
    """
    if read_only is None:
        read_only = wire in READ_ONLY_TOOLS
    if read_only:
        return "read"
    return "destructive" if wire in DESTRUCTIVE_TOOLS else "write"


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
