"""Small helpers shared by the framework middleware."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

__all__ = [
    "RefusingToolMiddleware",
    "error_tool_message",
    "loaded_plugins",
    "state_value",
    "tool_index",
    "turn_bindings",
]


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


class RefusingToolMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """A middleware that answers some tool calls itself instead of running them.

    Subclasses implement ``_refusal``: the error ``ToolMessage`` for a call that must not
    run, or ``None`` to hand the call on.
    """

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        raise NotImplementedError

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the call unless ``_refusal`` answers it."""
        refusal = self._refusal(request)
        return refusal if refusal is not None else handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of ``wrap_tool_call``."""
        refusal = self._refusal(request)
        return refusal if refusal is not None else await handler(request)
