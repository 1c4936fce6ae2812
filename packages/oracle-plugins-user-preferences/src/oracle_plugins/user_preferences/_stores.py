"""Where a user's preferences live: their room with the oracle, or a local SQLite table.

With Matrix on, the record is the ``ixo.room.state`` / ``user_prefs`` state event of the
user↔oracle room, read through ``rt_ctx.matrix`` and cached per room for a minute. With
``ORACLE_BACKEND=local`` (Matrix not configured) the same ``data`` string is kept in a
key-value table under ``SQLITE_DATABASE_PATH``, keyed by the user's DID: preferences are
the user's, as the room is, not one conversation's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from oracle_core import MatrixAccessor, NotConfiguredError
from oracle_plugins.user_preferences._codec import (
    STATE_EVENT_TYPE,
    STATE_KEY,
    PreferencesFormatError,
    decode_content,
    decode_data,
    encode_content,
    encode_data,
)
from oracle_plugins.user_preferences._record import normalise_record

__all__ = [
    "CACHE_SECONDS",
    "DATABASE_FILE",
    "MatrixRoomPreferences",
    "PreferencesStore",
    "RoomCache",
    "SqlitePreferences",
    "open_store",
]

CACHE_SECONDS = 60.0
"""How long a room's preferences are read from the cache instead of the homeserver."""

DATABASE_FILE = "user_preferences.sqlite"
"""File name of the embedded store inside ``SQLITE_DATABASE_PATH``."""

DEFAULT_SQLITE_PATH = "./data/sqlite"
RATE_LIMIT_RETRIES = 2
MAX_RATE_LIMIT_WAIT = 5.0

T = TypeVar("T")


class PreferencesStore(Protocol):
    """One user's preferences record, wherever it lives."""

    @property
    def key(self) -> str:
        """Identifies the record (for per-record write locks)."""
        ...

    async def read(self, *, fresh: bool = False) -> dict[str, Any] | None:
        """The record; ``None`` when there is none or it cannot be decoded.

        ``fresh`` skips any cache. Raises when the backend cannot be reached.
        """
        ...

    async def write(self, record: Mapping[str, Any]) -> None:
        """Replace the record."""
        ...


def _decoded(decode: Callable[[], Any], logger: logging.Logger) -> dict[str, Any] | None:
    try:
        record = normalise_record(decode())
    except PreferencesFormatError as exc:
        # The content may be anything a client wrote; log why, never what.
        logger.warning("stored user preferences are unreadable, treated as none: %s", exc)
        return None
    if record is None:
        logger.warning("stored user preferences are not an object, treated as none")
    return record


class RoomCache:
    """Decoded preferences per room, each kept ``ttl`` seconds (``None`` included).

    Args:
        ttl: Seconds an entry is served.
        clock: Monotonic clock (tests pass their own).
        max_entries: Expired entries are swept when the cache grows past this.
    """

    def __init__(
        self,
        ttl: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def get(self, room_id: str) -> tuple[bool, dict[str, Any] | None]:
        """``(True, record)`` while an entry is fresh, else ``(False, None)``."""
        entry = self._entries.get(room_id)
        if entry is None or entry[0] <= self._clock():
            self._entries.pop(room_id, None)
            return False, None
        record = entry[1]
        return True, None if record is None else dict(record)

    def put(self, room_id: str, record: Mapping[str, Any] | None) -> None:
        """Cache ``record`` (or its absence) for the room."""
        now = self._clock()
        if len(self._entries) >= self._max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        self._entries[room_id] = (now + self.ttl, None if record is None else dict(record))

    def invalidate(self, room_id: str) -> None:
        """Forget the room (after a write)."""
        self._entries.pop(room_id, None)


async def _rate_limited(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, waiting and retrying when the homeserver answers ``M_LIMIT_EXCEEDED``."""
    for attempt in range(RATE_LIMIT_RETRIES + 1):
        try:
            return await call()
        except Exception as exc:
            if getattr(exc, "code", None) != "M_LIMIT_EXCEEDED" or attempt == RATE_LIMIT_RETRIES:
                raise
            wait_ms = getattr(exc, "retry_after_ms", None)
            wait = wait_ms / 1000 if isinstance(wait_ms, int | float) else 1.0
            await asyncio.sleep(min(max(wait, 0.0), MAX_RATE_LIMIT_WAIT))
    raise AssertionError("unreachable")  # pragma: no cover


class MatrixRoomPreferences:
    """The ``user_prefs`` state event of one user↔oracle room.

    Args:
        matrix: The user's Matrix accessor.
        room_id: Their room with the oracle.
        cache: Shared read cache.
        logger: The plugin's logger.
    """

    def __init__(
        self, matrix: MatrixAccessor, room_id: str, cache: RoomCache, logger: logging.Logger
    ) -> None:
        self._matrix = matrix
        self.room_id = room_id
        self._cache = cache
        self._logger = logger

    @property
    def key(self) -> str:
        return f"matrix:{self.room_id}"

    async def read(self, *, fresh: bool = False) -> dict[str, Any] | None:
        if not fresh:
            hit, cached = self._cache.get(self.room_id)
            if hit:
                return cached

        async def get() -> dict[str, Any] | None:
            try:
                return await self._matrix.get_state_event(self.room_id, STATE_EVENT_TYPE, STATE_KEY)
            except Exception as exc:
                if getattr(exc, "code", None) == "M_NOT_FOUND":
                    return None
                raise

        content = await _rate_limited(get)
        record = (
            None if content is None else _decoded(lambda: decode_content(content), self._logger)
        )
        self._cache.put(self.room_id, record)
        return record

    async def write(self, record: Mapping[str, Any]) -> None:
        content = encode_content(record)
        try:
            await _rate_limited(
                lambda: self._matrix.set_state_event(
                    self.room_id, STATE_EVENT_TYPE, content, STATE_KEY
                )
            )
        finally:
            # Even a failed write may have landed; the next read goes to the homeserver.
            self._cache.invalidate(self.room_id)


class SqlitePreferences:
    """The embedded store: one row per user in ``user_preferences`` of a SQLite file.

    Each operation opens its own short connection in a worker thread, so the store holds
    no resource between requests and needs no shutdown.

    Args:
        path: The SQLite file.
        user_did: The user whose row this is.
        logger: The plugin's logger.
    """

    def __init__(self, path: Path, user_did: str, logger: logging.Logger) -> None:
        if not user_did:
            raise ValueError("the embedded preferences store needs the user's DID")
        self.path = path
        self.user_did = user_did
        self._logger = logger

    @property
    def key(self) -> str:
        return f"sqlite:{self.path}:{self.user_did}"

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=10)
        connection.execute(
            "CREATE TABLE IF NOT EXISTS user_preferences ("
            "key TEXT PRIMARY KEY, data TEXT NOT NULL, updated_at TEXT NOT NULL)"
        )
        return connection

    def _select(self) -> str | None:
        if not self.path.exists():  # reading never creates the database
            return None
        with contextlib.closing(self._connect()) as connection:
            row = connection.execute(
                "SELECT data FROM user_preferences WHERE key = ?", (self.user_did,)
            ).fetchone()
        return None if row is None else str(row[0])

    def _upsert(self, data: str, updated_at: str) -> None:
        with contextlib.closing(self._connect()) as connection, connection:
            connection.execute(
                "INSERT INTO user_preferences (key, data, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET data = excluded.data, "
                "updated_at = excluded.updated_at",
                (self.user_did, data, updated_at),
            )

    async def read(self, *, fresh: bool = False) -> dict[str, Any] | None:
        data = await asyncio.to_thread(self._select)
        if data is None:
            return None
        return _decoded(lambda: decode_data(data), self._logger)

    async def write(self, record: Mapping[str, Any]) -> None:
        data = encode_data(record)
        await asyncio.to_thread(self._upsert, data, str(record.get("updatedAt", "")))


def embedded_store(
    config: Mapping[str, Any], user_did: str, logger: logging.Logger
) -> SqlitePreferences:
    """The SQLite store of ``user_did`` under ``SQLITE_DATABASE_PATH``."""
    base = Path(str(config.get("SQLITE_DATABASE_PATH") or DEFAULT_SQLITE_PATH))
    return SqlitePreferences(base / DATABASE_FILE, user_did, logger)


async def open_store(
    *,
    config: Mapping[str, Any],
    matrix: MatrixAccessor | None,
    user_did: str,
    cache: RoomCache,
    logger: logging.Logger,
) -> PreferencesStore | None:
    """The store of the user's preferences for this request.

    Args:
        config: The runtime's merged configuration.
        matrix: The user's Matrix accessor (``rt_ctx.matrix``).
        user_did: The authenticated user.
        cache: The plugin's room cache.
        logger: The plugin's logger.

    Returns:
        Their room's state event when Matrix is on; the embedded store when this
        deployment has no Matrix (the accessor raises ``NotConfiguredError``, or there
        is none); ``None`` when Matrix is on but the user has no room with the oracle
        yet.

    Raises:
        ServiceUnavailableError: Matrix is configured but cannot be reached right now
            (never a silent switch to SQLite, so no record ends up in two places).
        Exception: whatever the homeserver lookup of the room raised.
    """
    if matrix is None:
        return embedded_store(config, user_did, logger)
    try:
        room_id = await matrix.user_room_id()
    except NotConfiguredError:
        return embedded_store(config, user_did, logger)
    return None if room_id is None else MatrixRoomPreferences(matrix, room_id, cache, logger)
