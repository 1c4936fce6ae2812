"""Calls that the client of a session answers: browser tools and AG-UI actions (SRV-51, 53).

The gateway sends ``browser_tool_call`` or ``action_call`` to one socket of the session and
waits here for the matching ``tool_result`` or ``action_call_result``. Each call has an id
issued here, which travels as ``toolCallId`` (the field the client echoes). A result
settles a call only when it comes from the socket the call went to and names a call that
is still waiting; anything else is dropped.
"""

from __future__ import annotations

import asyncio
import json
import uuid
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
    socket_id: str | None
    future: asyncio.Future[Any]


class PendingCalls:
    """Calls waiting for their client's answer, by the id this server issued for each.

    The model's tool-call id is never the key: it is only unique within one model
    reply, so two sessions (or two turns) whose model says ``call_0`` would meet on it.
    """

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._pending

    def open(
        self, session_id: str, kind: CallKind, socket_id: str | None
    ) -> tuple[str, asyncio.Future[Any]]:
        """Start waiting for a new call; its id and the future of the client's value.

        Args:
            session_id: The session the call belongs to.
            kind: Which result event settles it.
            socket_id: The one socket that may answer; ``None`` when the call went to
                the session's room on other replicas, where any of its sockets may.
        """
        call_id = uuid.uuid4().hex
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = _Pending(session_id, kind, socket_id, future)
        return call_id, future

    def close(self, call_id: str) -> None:
        """Stop waiting for ``call_id`` (settled, timed out or cancelled)."""
        pending = self._pending.pop(call_id, None)
        if pending is not None and not pending.future.done():
            pending.future.cancel()

    def settle(
        self,
        call_id: str,
        *,
        session_id: str,
        kind: CallKind,
        socket_id: str | None,
        outcome: Outcome,
    ) -> bool:
        """Settle a waiting call; ``False`` (and nothing happens) when the answer is dropped.

        Args:
            call_id: The id the answer echoes.
            session_id: The session of the answering socket.
            kind: The result event's kind.
            socket_id: The answering socket; ``None`` for an answer forwarded by another
                replica, which settles only calls sent to the whole room.
            outcome: What the answer settles the call with.

        Dropped: unknown or already settled ids, another session's call, the other kind,
        and answers from any socket but the one the call went to.
        """
        pending = self._pending.get(call_id)
        if (
            pending is None
            or pending.session_id != session_id
            or pending.kind != kind
            or (pending.socket_id is not None and pending.socket_id != socket_id)
            or pending.future.done()
        ):
            return False
        if outcome.error is not None:
            pending.future.set_exception(FrontendToolError(outcome.error))
        else:
            pending.future.set_result(outcome.value)
        return True

    def fail_socket(self, socket_id: str, reason: str) -> None:
        """Fail the calls waiting for ``socket_id`` with ``reason`` (it disconnected)."""
        for pending in self._pending.values():
            if pending.socket_id == socket_id and not pending.future.done():
                pending.future.set_exception(FrontendToolError(reason))

    def fail_all(self, reason: str) -> None:
        """Fail every waiting call with ``reason`` (shutdown)."""
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(FrontendToolError(reason))
