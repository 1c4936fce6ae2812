"""What follows each turn: the session's last activity, its title, the Matrix chat log.

:class:`TurnBookkeeping` is the turn runner's ``on_finished``. It stamps the session,
titles it after its first finished turn (from the ``session-title`` model in the
background when one is configured, else at once from the first words) and hands a
finished turn to the Matrix layer for the chat log and the backup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol

from oracle_core import EventSink, LLMAccessor, OracleEvent, SessionEvent
from oracle_server._persistence import SessionRecord, Sessions
from oracle_server._turns.runner import ActiveTurn
from oracle_server._turns.titles import UNTITLED, fallback_title, generate_title

__all__ = ["FinishedTurnLog", "TurnBookkeeping"]


class FinishedTurnLog(Protocol):
    """Where a finished turn is logged and its user's file scheduled for backup (the
    Matrix layer)."""

    def after_turn(
        self,
        *,
        user_did: str,
        session_id: str,
        message: str,
        reply: str | None,
        home_server: str | None,
        client: str = "portal",
    ) -> None:
        """Take note of a finished turn; never raises into the turn."""
        ...


class TurnBookkeeping:
    """Session bookkeeping after each turn.

    Args:
        sessions: The session store.
        events: Where the title's cache invalidation is emitted.
        llm: The runtime's models; ``session-title`` is asked for titles.
        title_model: Whether a ``session-title`` model is configured (else the first
            words make the title, with no model call).
        matrix: Where finished turns are logged (the Matrix layer), ``None`` when off.
    """

    def __init__(
        self,
        sessions: Sessions,
        events: EventSink,
        llm: LLMAccessor,
        *,
        title_model: bool,
        matrix: FinishedTurnLog | None = None,
        announce: Callable[[SessionEvent], Awaitable[None]] | None = None,
    ) -> None:
        self._announce = announce
        self._sessions = sessions
        self._events = events
        self._llm = llm
        self._title_model = title_model
        self._matrix = matrix
        self._background: set[asyncio.Task[None]] = set()

    async def __call__(self, turn: ActiveTurn) -> None:
        """Stamp the session; title it and log the turn to Matrix if it finished."""
        # The touch returns the row, so the title check costs no second query.
        record = await self._sessions.touch(turn.user_did, turn.session_id, datetime.now(UTC))
        if turn.status != "finished":
            return
        await self._title(turn, record)
        if self._matrix is not None:
            self._matrix.after_turn(
                user_did=turn.user_did,
                session_id=turn.session_id,
                message=turn.message,
                reply=turn.reply.text if turn.reply is not None else None,
                home_server=turn.home_server,
                client=turn.client,
            )

    async def finish(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - a grace period
        """Let titles being made finish, up to ``timeout`` seconds, then cancel the rest."""
        if not self._background:
            return
        _, pending = await asyncio.wait(list(self._background), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _title(self, turn: ActiveTurn, record: SessionRecord | None) -> None:
        if record is None or record.title not in (None, UNTITLED):
            return
        if not self._title_model:
            title = fallback_title(turn.message)
            await self._sessions.set_title(turn.user_did, turn.session_id, title)
            await self._titled(turn, title)
            return
        task = asyncio.get_running_loop().create_task(self._ask_the_model(turn))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _titled(self, turn: ActiveTurn, title: str) -> None:
        if self._announce is not None:
            await self._announce(
                SessionEvent("session.title", turn.session_id, turn.user_did, title=title)
            )

    async def _ask_the_model(self, turn: ActiveTurn) -> None:
        made = await generate_title(self._llm.get("session-title"), turn.message)
        await self._sessions.set_title(turn.user_did, turn.session_id, made)
        await self._titled(turn, made)
        self._events.emit(
            OracleEvent(
                "message_cache_invalidation",
                {"reason": "session_title"},
                session_id=turn.session_id,
                request_id=turn.request_id,
                user_did=turn.user_did,
            )
        )
