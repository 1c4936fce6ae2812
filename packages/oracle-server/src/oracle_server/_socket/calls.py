"""Calls that the client of a session answers: browser tools and AG-UI actions (SRV-51, 53).

The gateway emits ``browser_tool_call`` or ``action_call`` to the session's room and waits
here for the matching ``tool_result`` or ``action_call_result``. A result settles a call
only when it comes from a socket bound to the call's session and names a call that is
still waiting; anything else is dropped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CallKind",
    "FrontendToolError",
    "Outcome",
    "PendingCalls",
    "action_outcome",
    "browser_tool_outcome",
]

CallKind = Literal["browser_tool", "action"]
"""``browser_tool`` calls settle on ``tool_result``; ``action`` calls on ``action_call_result``."""

ACTION_FAILED = "Action failed"


class FrontendToolError(RuntimeError):
    """A browser tool or AG-UI action failed in the client, or no answer came in time.

    The message is the client's error text (or the SRV-51 timeout text); the agent's
    tool node turns it into the tool message the model reads.
    """


@dataclass(frozen=True)
class Outcome:
    """What a client answer settles a call with: a value, or an error text."""

    value: Any = None
    error: str | None = None


def _error_text(error: Any) -> str | None:
    """The text of a client ``error`` field; ``None`` when the field carries no error."""
    if error is None or error is False or error == "":
        return None
    if isinstance(error, str):
        return error
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(error, ensure_ascii=False, default=str)


def browser_tool_outcome(data: Mapping[str, Any]) -> Outcome:
    """The outcome of a ``tool_result {toolCallId, result?, error?}``: ``error`` wins."""
    error = _error_text(data.get("error"))
    if error is not None:
        return Outcome(error=error)
    return Outcome(value=data.get("result"))


def action_outcome(data: Mapping[str, Any]) -> Outcome:
    """The outcome of an ``action_call_result {sessionId, toolCallId, result, error?}``.

    ``error``, or a ``result`` with ``success: false``, fails the call with
    ``result.error``, else the ``error`` text, else ``Action failed`` (SRV-51).
    """
    result = data.get("result")
    error = _error_text(data.get("error"))
    declined = isinstance(result, Mapping) and result.get("success") is False
    if error is None and not declined:
        return Outcome(value=result)
    detail = _error_text(result.get("error")) if isinstance(result, Mapping) else None
    return Outcome(error=detail or error or ACTION_FAILED)


@dataclass
class _Pending:
    session_id: str
    kind: CallKind
    future: asyncio.Future[Any]


class PendingCalls:
    """Calls waiting for their client's answer, by ``toolCallId``."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._pending

    def open(self, call_id: str, session_id: str, kind: CallKind) -> asyncio.Future[Any]:
        """Start waiting for ``call_id``; the future resolves with the client's value.

        Raises:
            FrontendToolError: a call with the same id is already waiting.
        """
        if call_id in self._pending:
            raise FrontendToolError(
                f"ws.duplicate_call: tool call {call_id!r} is already waiting for its result"
            )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = _Pending(session_id, kind, future)
        return future

    def close(self, call_id: str) -> None:
        """Stop waiting for ``call_id`` (settled, timed out or cancelled)."""
        pending = self._pending.pop(call_id, None)
        if pending is not None and not pending.future.done():
            pending.future.cancel()

    def settle(self, call_id: str, *, session_id: str, kind: CallKind, outcome: Outcome) -> bool:
        """Settle a waiting call; ``False`` (and nothing happens) when the answer is dropped.

        Dropped: unknown or already settled ids, another session's call, the other kind.
        """
        pending = self._pending.get(call_id)
        if (
            pending is None
            or pending.session_id != session_id
            or pending.kind != kind
            or pending.future.done()
        ):
            return False
        if outcome.error is not None:
            pending.future.set_exception(FrontendToolError(outcome.error))
        else:
            pending.future.set_result(outcome.value)
        return True

    def fail_all(self, reason: str) -> None:
        """Fail every waiting call with ``reason`` (shutdown)."""
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(FrontendToolError(reason))
