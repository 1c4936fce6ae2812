"""Calls that the client of a session answers: browser tools and AG-UI actions (SRV-51, 53).

The gateway sends ``browser_tool_call`` or ``action_call`` to one socket of the session and
waits here for the matching ``tool_result`` or ``action_call_result``. Each call has an id
issued here, which travels as ``toolCallId`` (the field the client echoes). A result
settles a call only when it comes from the socket the call went to and names a call that
is still waiting; anything else is dropped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from oracle_core import (
    FrontendCallError,
    FrontendCallKind,
    FrontendOutcome,
    new_frontend_call_id,
)

__all__ = ["CallKind", "PendingCalls"]

CallKind = FrontendCallKind
"""``browser_tool`` calls settle on ``tool_result``; ``action`` calls on ``action_call_result``."""


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
        self,
        session_id: str,
        kind: CallKind,
        socket_id: str | None,
        request_id: str | None = None,
    ) -> tuple[str, asyncio.Future[Any]]:
        """Start waiting for a new call; its id and the future of the client's value.

        Args:
            session_id: The session the call belongs to.
            kind: Which result event settles it.
            socket_id: The one socket that may answer; ``None`` when the call went to
                the session's room on other replicas, where any of its sockets may.
            request_id: The turn's request id, part of the call id
                (``new_frontend_call_id``).
        """
        call_id = new_frontend_call_id(kind, request_id)
        while call_id in self._pending:
            call_id = new_frontend_call_id(kind, request_id)
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
        outcome: FrontendOutcome,
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
            pending.future.set_exception(FrontendCallError(outcome.error))
        else:
            pending.future.set_result(outcome.value)
        return True

    def fail_socket(self, socket_id: str, reason: str) -> None:
        """Fail the calls waiting for ``socket_id`` with ``reason`` (it disconnected)."""
        for pending in self._pending.values():
            if pending.socket_id == socket_id and not pending.future.done():
                pending.future.set_exception(FrontendCallError(reason, code="ws.client_gone"))

    def fail_all(self, reason: str) -> None:
        """Fail every waiting call with ``reason`` (shutdown)."""
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(
                    FrontendCallError(reason, code="frontend.shutting_down")
                )
