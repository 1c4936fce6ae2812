"""Chat sessions: one row per session (SRV-17 … 21), in the server database or the user's own."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, RowMapping, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_server._persistence.connections import Connections, connections_of
from oracle_server._persistence.tables import oracle_sessions

__all__ = ["DuplicateSessionError", "SessionRecord", "SessionStore", "Sessions", "to_js_iso"]


def to_js_iso(value: datetime) -> str:
    """Format ``value`` like JavaScript's ``Date.prototype.toISOString`` (SRV-3).

    UTC, milliseconds (truncated, as a JS ``Date`` holds no finer unit) and ``Z``:
    ``2026-01-01T09:00:00.000Z``.

    Raises:
        ValueError: when ``value`` is naive.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("persistence.naive_datetime: pass a timezone-aware datetime")
    utc = value.astimezone(UTC)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


class DuplicateSessionError(ValueError):
    """A session with this id already exists."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"persistence.session_exists: session {session_id!r} already exists; "
            "session ids must be unique (a UUIDv4 or the Matrix event id)"
        )
        self.session_id = session_id


@dataclass(frozen=True)
class SessionRecord:
    """A stored chat session.

    Attributes:
        session_id: Thread id of the conversation (UUIDv4, or the Matrix event id).
        user_did: The owner; every read and write is scoped to it.
        title: Display title; ``None`` until one is set.
        created_at: When the session was created (aware, UTC).
        last_updated_at: Last activity (aware, UTC); lists sort on it.
        oracle_name: ``ORACLE_NAME`` of the oracle that owns the session.
        oracle_did: ``ORACLE_DID``.
        oracle_entity_did: ``ORACLE_ENTITY_DID``.
        last_processed_count: Messages already processed by post-turn work.
        user_context: Free-form JSON object supplied by the client.
        room_id: Matrix room of the session, when Matrix is on.
        slack_thread_ts: Slack thread, for sessions started from Slack.
        client: The transport that created the session (``portal``, ``matrix``, …).
        matrix_thread_id: Root event of the session's thread in the user's Matrix room,
            where the chat log goes; never sent to clients.
        multitask_strategy: What a message does while the session runs a turn
            (``enqueue``, ``reject``, ``interrupt``, ``rollback``); ``None``: the
            deployment's ``SESSION_CONCURRENCY_POLICY``.
    """

    session_id: str
    user_did: str
    title: str | None
    created_at: datetime
    last_updated_at: datetime
    oracle_name: str
    oracle_did: str | None
    oracle_entity_did: str | None
    last_processed_count: int | None = None
    user_context: dict[str, Any] | None = None
    room_id: str | None = None
    slack_thread_ts: str | None = None
    client: str = "portal"
    matrix_thread_id: str | None = None
    multitask_strategy: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The ``ChatSession`` JSON of SRV-17.

        ``oracleDid`` and ``oracleEntityDid`` are always present (the client reads
        them); ``title``, ``lastProcessedCount``, ``userContext``, ``roomId`` and
        ``slackThreadTs`` are omitted when absent.
        """
        wire: dict[str, Any] = {"sessionId": self.session_id}
        if self.title is not None:
            wire["title"] = self.title
        wire["lastUpdatedAt"] = to_js_iso(self.last_updated_at)
        wire["createdAt"] = to_js_iso(self.created_at)
        wire["oracleName"] = self.oracle_name
        wire["oracleDid"] = self.oracle_did
        wire["oracleEntityDid"] = self.oracle_entity_did
        if self.last_processed_count is not None:
            wire["lastProcessedCount"] = self.last_processed_count
        if self.user_context is not None:
            wire["userContext"] = self.user_context
        if self.room_id is not None:
            wire["roomId"] = self.room_id
        if self.slack_thread_ts is not None:
            wire["slackThreadTs"] = self.slack_thread_ts
        if self.multitask_strategy is not None:
            wire["multitaskStrategy"] = self.multitask_strategy
        return wire


def _record(row: RowMapping) -> SessionRecord:
    return SessionRecord(
        session_id=row["session_id"],
        user_did=row["user_did"],
        title=row["title"],
        created_at=row["created_at"],
        last_updated_at=row["last_updated_at"],
        oracle_name=row["oracle_name"],
        oracle_did=row["oracle_did"],
        oracle_entity_did=row["oracle_entity_did"],
        last_processed_count=row["last_processed_count"],
        user_context=row["user_context"],
        room_id=row["room_id"],
        slack_thread_ts=row["slack_thread_ts"],
        client=row["client"],
        matrix_thread_id=row["matrix_thread_id"],
        multitask_strategy=row["multitask_strategy"],
    )


class Sessions(Protocol):
    """What the server needs of a session store (server database or per-user files)."""

    async def create(self, record: SessionRecord) -> SessionRecord: ...

    async def get(self, user_did: str, session_id: str) -> SessionRecord | None: ...

    async def list(
        self, user_did: str, *, limit: int = 20, offset: int = 0, room_id: str | None = None
    ) -> tuple[builtins.list[SessionRecord], int]: ...

    async def touch(
        self, user_did: str, session_id: str, when: datetime | None = None
    ) -> SessionRecord | None: ...

    async def set_title(self, user_did: str, session_id: str, title: str) -> None: ...

    async def set_matrix_thread(
        self, user_did: str, session_id: str, *, room_id: str, thread_id: str
    ) -> None: ...

    async def set_multitask_strategy(
        self, user_did: str, session_id: str, strategy: str | None
    ) -> None: ...

    async def delete(self, user_did: str, session_id: str) -> bool: ...


class SessionStore:
    """Sessions of every user, each visible only to its owner.

    Args:
        database: The server database's engine, or where a user's own file runs its
            statements (:class:`ThreadConnections`).
        clock: Unix time in seconds; ``touch`` without a time uses it.
    """

    def __init__(
        self, database: AsyncEngine | Connections, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = connections_of(database)
        self._clock = clock

    async def create(self, record: SessionRecord) -> SessionRecord:
        """Store a new session and return it as stored (timestamps in UTC).

        Raises:
            DuplicateSessionError: when ``record.session_id`` is taken (by any user).
        """
        values = {
            "session_id": record.session_id,
            "user_did": record.user_did,
            "title": record.title,
            "created_at": record.created_at,
            "last_updated_at": record.last_updated_at,
            "oracle_name": record.oracle_name,
            "oracle_did": record.oracle_did,
            "oracle_entity_did": record.oracle_entity_did,
            "last_processed_count": record.last_processed_count,
            "user_context": record.user_context,
            "room_id": record.room_id,
            "slack_thread_ts": record.slack_thread_ts,
            "client": record.client,
            "matrix_thread_id": record.matrix_thread_id,
            "multitask_strategy": record.multitask_strategy,
        }
        statement = insert(oracle_sessions).values(values).returning(oracle_sessions)
        try:
            row = await self._db.write(lambda conn: conn.execute(statement).mappings().one())
        except IntegrityError as exc:
            raise DuplicateSessionError(record.session_id) from exc
        return _record(row)

    async def get(self, user_did: str, session_id: str) -> SessionRecord | None:
        """The session if ``user_did`` owns it, else ``None``."""
        query = select(oracle_sessions).where(
            oracle_sessions.c.session_id == session_id, oracle_sessions.c.user_did == user_did
        )
        row = await self._db.read(lambda conn: conn.execute(query).mappings().one_or_none())
        return None if row is None else _record(row)

    async def list(
        self,
        user_did: str,
        *,
        limit: int = 20,
        offset: int = 0,
        room_id: str | None = None,
    ) -> tuple[builtins.list[SessionRecord], int]:
        """One page of the user's sessions, most recently updated first, and their total.

        Args:
            user_did: Owner whose sessions are listed.
            limit: Page size (the route clamps it, SRV-19).
            offset: Rows to skip.
            room_id: When given, only sessions in that room (the user's main room when
                Matrix is on); ``total`` then counts that set.

        Raises:
            ValueError: for a negative ``limit`` or ``offset``.
        """
        if limit < 0 or offset < 0:
            raise ValueError("persistence.bad_page: limit and offset must be >= 0")
        conditions = [oracle_sessions.c.user_did == user_did]
        if room_id is not None:
            conditions.append(oracle_sessions.c.room_id == room_id)
        page = (
            select(oracle_sessions)
            .where(*conditions)
            # session_id breaks ties so pages never overlap or skip rows.
            .order_by(oracle_sessions.c.last_updated_at.desc(), oracle_sessions.c.session_id.desc())
            .limit(limit)
            .offset(offset)
        )
        count = select(func.count()).select_from(oracle_sessions).where(*conditions)

        def read(conn: Connection) -> tuple[Sequence[RowMapping], Any]:
            return conn.execute(page).mappings().all(), conn.execute(count).scalar_one()

        rows, total = await self._db.read(read)
        return [_record(row) for row in rows], int(total)

    async def touch(
        self, user_did: str, session_id: str, when: datetime | None = None
    ) -> SessionRecord | None:
        """Set ``last_updated_at`` to ``when`` (default: now); no-op for others' sessions.

        Returns:
            The session as stored after the update (one statement: the post-turn
            bookkeeping reads the title from it), or ``None`` when ``user_did`` has no
            such session.
        """
        moment = when if when is not None else datetime.fromtimestamp(self._clock(), UTC)
        statement = (
            update(oracle_sessions)
            .where(
                oracle_sessions.c.session_id == session_id,
                oracle_sessions.c.user_did == user_did,
            )
            .values(last_updated_at=moment)
            .returning(oracle_sessions)
        )
        row = await self._db.write(lambda conn: conn.execute(statement).mappings().one_or_none())
        return None if row is None else _record(row)

    async def set_title(self, user_did: str, session_id: str, title: str) -> None:
        """Store a new title; no-op for another user's or an unknown session."""
        await self._update(user_did, session_id, title=title)

    async def set_matrix_thread(
        self, user_did: str, session_id: str, *, room_id: str, thread_id: str
    ) -> None:
        """Remember the room and thread root the session's chat log goes to."""
        await self._update(user_did, session_id, room_id=room_id, matrix_thread_id=thread_id)

    async def set_multitask_strategy(
        self, user_did: str, session_id: str, strategy: str | None
    ) -> None:
        """Store the session's double-texting policy (``None``: the deployment's)."""
        await self._update(user_did, session_id, multitask_strategy=strategy)

    async def delete(self, user_did: str, session_id: str) -> bool:
        """Delete the user's session; ``False`` when the user has no such session."""
        statement = delete(oracle_sessions).where(
            oracle_sessions.c.session_id == session_id, oracle_sessions.c.user_did == user_did
        )
        deleted: int = await self._db.write(lambda conn: conn.execute(statement).rowcount)
        return deleted > 0

    async def _update(self, user_did: str, session_id: str, **values: Any) -> None:
        statement = (
            update(oracle_sessions)
            .where(
                oracle_sessions.c.session_id == session_id,
                oracle_sessions.c.user_did == user_did,
            )
            .values(**values)
        )
        await self._db.write(lambda conn: conn.execute(statement))
