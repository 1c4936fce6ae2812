"""``tool-retry``: one more attempt for a tool that raised, then an error message.

LangChain ships a ``ToolRetryMiddleware`` of its own
(``langchain.agents.middleware.ToolRetryMiddleware``). Its retry count, constant backoff,
``retry_on`` filter and ``GraphBubbleUp`` pass-through could be configured to match, but
it lacks what CORE-79 and the shared compiled agents need:

- It picks the tools to retry from a fixed ``tools=`` list; we decide per call from the
  tool's ``effect`` in the turn's tool index, read from ``TurnBindings`` at run time.
- A tool outside that list is passed straight through, so a ``write`` tool that raises
  fails the whole turn; we turn that single failure into an error ``ToolMessage`` too.
- Its final message ends "Please try again.", inviting a repeat of a call that may have
  had effects; an ``on_failure`` callable is not told the tool. Ours names the tool.
- It logs nothing; we log the final failure with its traceback.

Hence ``EffectAwareToolRetryMiddleware``, named apart from LangChain's; the old name stays
as a deprecated alias of the same class.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command
from pydantic import ValidationError

from oracle_core._frontend import FrontendCallError
from oracle_core._middleware._common import error_tool_message, tool_index
from oracle_core._tools import ToolInfo

__all__ = ["EffectAwareToolRetryMiddleware", "ToolRetryMiddleware"]

_logger = logging.getLogger("oracle.middleware.tool_retry")

# Never retried nor converted: argument errors belong to `tool-validation`, and
# `GraphBubbleUp` (interrupts, parent commands) is LangGraph control flow.
# `asyncio.CancelledError` is a BaseException and never reaches `except Exception`.
_PASS_THROUGH: tuple[type[BaseException], ...] = (
    ToolInvocationError,
    ValidationError,
    GraphBubbleUp,
)
_MAX_BACKOFF_SECONDS = 1.0


class EffectAwareToolRetryMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Runs a failed tool once more, except ``write`` and ``destructive`` tools (CORE-79).

    A tool that raises is re-run once after ``backoff_seconds``; ``write`` and
    ``destructive`` tools are never re-run, since the first attempt may have changed
    something. The final failure, a write's first one included, becomes an error
    ``ToolMessage`` with the exception type and message. Argument-validation errors,
    ``GraphBubbleUp`` and cancellation propagate untouched. It is registered as
    ``tool-retry``.

    Args:
        tool_index: What the runtime knows about each bound tool, by name; ``None`` reads
            it from the turn bindings of the run context.
        backoff_seconds: Pause before the second attempt, at most 1 s.
    """

    def __init__(
        self, tool_index: Mapping[str, ToolInfo] | None = None, backoff_seconds: float = 0.2
    ) -> None:
        super().__init__()
        if not 0 <= backoff_seconds <= _MAX_BACKOFF_SECONDS:
            raise ValueError(f"backoff_seconds must be within 0 and {_MAX_BACKOFF_SECONDS}")
        self._tool_index = None if tool_index is None else dict(tool_index)
        self._backoff = backoff_seconds

    @property
    def name(self) -> str:
        """The reserved name ``tool-retry``."""
        return "tool-retry"

    def _may_retry(self, request: ToolCallRequest) -> bool:
        info = tool_index(self._tool_index, request.runtime).get(request.tool_call["name"])
        # A destructive call is a write too: running it twice may do the damage twice.
        return info is None or info.effect not in ("write", "destructive")

    def _failure(self, request: ToolCallRequest, exc: Exception, attempts: int) -> ToolMessage:
        tool_name = request.tool_call["name"]
        _logger.warning(
            "tool %r failed after %d attempt(s): %s",
            tool_name,
            attempts,
            type(exc).__name__,
            exc_info=exc,
        )
        if isinstance(exc, FrontendCallError):
            # Its text is written for the model (the client's error, or a timeout
            # that says the outcome is unknown).
            return error_tool_message(request, str(exc))
        return error_tool_message(
            request, f"Tool '{tool_name}' failed: {type(exc).__name__}: {exc}"
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; on an exception, once more (not ``write``/``destructive`` tools)."""
        try:
            return handler(request)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            if not self._may_retry(request):
                return self._failure(request, exc, attempts=1)
        time.sleep(self._backoff)
        try:
            return handler(request)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            return self._failure(request, exc, attempts=2)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async form of ``wrap_tool_call``."""
        try:
            return await handler(request)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            if not self._may_retry(request):
                return self._failure(request, exc, attempts=1)
        await asyncio.sleep(self._backoff)
        try:
            return await handler(request)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            return self._failure(request, exc, attempts=2)


ToolRetryMiddleware = EffectAwareToolRetryMiddleware
"""Deprecated alias of ``EffectAwareToolRetryMiddleware``, kept for existing imports.

It is the same class, so ``isinstance`` checks and subclasses keep working; new code
should use the new name, which does not clash with LangChain's ``ToolRetryMiddleware``.
"""
