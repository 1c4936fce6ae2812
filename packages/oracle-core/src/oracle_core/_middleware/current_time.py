"""``current-time``: the precise time, after the prefix that providers cache."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage

from oracle_core._middleware._common import turn_bindings
from oracle_core._prompt import time_note

__all__ = ["CurrentTimeMiddleware"]


def _with_note(messages: Sequence[AnyMessage], note: str) -> list[AnyMessage] | None:
    """``messages`` with ``note`` just before the latest user message (``None``: none)."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return [*messages[:index], SystemMessage(note), *messages[index:]]
    return None


class CurrentTimeMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Tells the model the precise time without changing its system prompt.

    Providers cache a request's longest previously seen prefix. The system prompt shows
    only the date (section 8), so it stays byte-identical through a day; this middleware
    puts ``[Current time: …]`` (``time_note``) in a system message just before the latest
    user message of every model call instead. The note is part of the request only, never
    stored, and within a turn it is the same on every call (the time is stamped when the
    turn is built), so each call's request extends the previous one and the cached
    prefix reaches the previous turn's last user message.

    Args:
        time_line: The ``time_line`` to show; ``None`` reads the turn's from the run
            context's ``TurnBindings`` (the main agent, whose compiled graph is shared).
    """

    def __init__(self, time_line: str | None = None) -> None:
        super().__init__()
        self._time_line = time_line

    @property
    def name(self) -> str:
        """The reserved name ``current-time``."""
        return "current-time"

    def _noted(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        line = self._time_line
        if line is None:
            line = getattr(turn_bindings(request.runtime), "current_time", None)
        if not line:
            return request
        messages = _with_note(request.messages, time_note(line))
        return request if messages is None else request.override(messages=messages)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the time noted before the latest user message."""
        return handler(self._noted(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async form of ``wrap_model_call``."""
        return await handler(self._noted(request))
