"""Small helpers shared by the framework middleware."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage

__all__ = ["error_tool_message", "loaded_plugins", "state_value", "tool_index", "turn_bindings"]


def state_value(state: Any, key: str, default: Any = None) -> Any:
    """Read ``key`` from a graph state that is a mapping or, rarely, an object."""
    if isinstance(state, Mapping):
        return state.get(key, default)
    return getattr(state, key, default)


def loaded_plugins(state: Any, context: Any) -> frozenset[str]:
    """``state.loaded_plugins`` ∪ the turn's ``preloaded_plugins`` (CORE-57).

    ``context`` is the LangGraph run context; outside the oracle runtime it may be
    ``None`` or another type, which counts as no preloads.
    """
    loaded = frozenset(state_value(state, "loaded_plugins") or ())
    preloaded = getattr(context, "preloaded_plugins", None) or ()
    return loaded | frozenset(preloaded)


def error_tool_message(request: ToolCallRequest, content: str) -> ToolMessage:
    """An error ``ToolMessage`` answering the call in ``request``."""
    call = request.tool_call
    return ToolMessage(
        content=content,
        tool_call_id=call["id"] or "",
        name=call["name"],
        status="error",
    )


def turn_bindings(runtime: Any) -> Any:
    """The ``TurnBindings`` of the run, or ``None`` outside the oracle runtime."""
    return getattr(getattr(runtime, "context", None), "turn", None)


def tool_index(fixed: Mapping[str, Any] | None, runtime: Any) -> Mapping[str, Any]:
    """The tool index given at construction, else the turn's (shared compiled agents)."""
    if fixed is not None:
        return fixed
    bindings = turn_bindings(runtime)
    return bindings.tool_infos if bindings is not None else {}
