"""Embedded mode: one SQLite database per user (SRV-55, SRV-58).

``<SQLITE_DATABASE_PATH>/user_dbs/<user>/<storageKey>.db`` holds the user's session rows
and LangGraph checkpoints, so one file is everything a user's conversations need: the
unit the Matrix layer backs up and restores. Handles are opened on first use (restoring
the file first when a restorer is set and the file is missing), shared while in use,
closed least recently used beyond ``max_open``, and closed when idle.

Only a write creates a user's file: reads open it with :meth:`UserDatabases.use_existing`,
which answers ``None`` for a user with no data and leaves no file or folder behind, so a
stranger's ``GET /sessions`` costs no storage.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hashlib
import logging
import shutil
import sqlite3
import time
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from oracle_core import user_database_name
from oracle_server._persistence.connections import ThreadConnections
from oracle_server._persistence.engine import SQLITE_BUSY_TIMEOUT_MS, create_tables_sync
from oracle_server._persistence.sessions import SessionRecord, SessionStore
from oracle_server._persistence.tables import oracle_sessions

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from sqlalchemy import Connection

__all__ = [
    "StorageUnavailableError",
    "UserDatabase",
    "UserDatabases",
    "UserRestorer",
    "UserSessions",
    "checkpoint_storage_key",
]

logger = logging.getLogger("oracle.server.userdb")

STORAGE_KEY_PREFIX = "py-checkpoint_"
DEFAULT_MAX_OPEN = 256
DEFAULT_IDLE_SECONDS = 3600.0


def checkpoint_storage_key(user_did: str, oracle_did: str) -> str:
    """The user's storage key (SRV-60): 17 hex chars of SHA-256 over the prefixed ids.

    The ``py-`` prefix keeps this runtime's backups apart from the TypeScript runtime's,
    whose files are not compatible.
    """
    digest = hashlib.sha256(f"{STORAGE_KEY_PREFIX}{user_did}_{oracle_did}".encode()).hexdigest()
    return digest[:17]


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


class StorageUnavailableError(RuntimeError):
    """The user's database cannot be opened now (its backup cannot be read); retry later.

    The server answers 503 ``Conversation storage temporarily unavailable`` with
    ``code`` in the body and ``Retry-After``.

    Args:
        message: What failed (for the log, never the response).
        code: Stable reason: ``storage.unavailable`` (the restorer is not ready) or
            ``storage.restore_failed`` (the user's backup exists but could not be read).
        retry_after: Seconds before a retry is worth it.
    """

    def __init__(
        self, message: str, *, code: str = "storage.unavailable", retry_after: float = 5.0
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


class UserRestorer(Protocol):
    """Brings a user's database back before first use on this node (Matrix backup)."""

    async def restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        """Write the user's backed-up database at ``dest``.

        Returns ``False`` when there is no backup (a new user). Must never leave a
        partial file at ``dest``; raises :class:`StorageUnavailableError` when a backup
        exists but cannot be read, so that no empty database is created in its place.
        """
        ...


@dataclass(eq=False)
class UserDatabase:
    """An open user database: the checkpoint saver and the session table."""

    user_did: str
    path: Path
    saver: AsyncSqliteSaver
    sessions: SessionStore
    refs: int = 0
    last_used: float = 0.0

    async def close(self) -> None:
        """Close the saver's connection (the session table's too)."""
        await self.saver.conn.close()


class UserDatabases:
    """Opens, shares and closes the per-user databases of embedded mode.

    Usable as ``hooks.checkpointer_for_user`` (it is a :class:`CheckpointerFactory`);
    :attr:`sessions` is the session store over every user's file.

    Args:
        base_path: ``SQLITE_DATABASE_PATH``; files go under its ``user_dbs`` directory.
        oracle_did: ``ORACLE_DID``, part of each storage key.
        max_open: Open handles kept at most; the least recently used idle one closes.
        restorer: Restores a missing file before its first use (the Matrix backup).
        clock: Monotonic seconds, for idleness.
        session_clock: Unix seconds, for session timestamps.
    """

    def __init__(
        self,
        base_path: str | Path,
        *,
        oracle_did: str,
        max_open: int = DEFAULT_MAX_OPEN,
        restorer: UserRestorer | None = None,
        clock: Callable[[], float] = time.monotonic,
        session_clock: Callable[[], float] = time.time,
    ) -> None:
        if max_open < 1:
            raise ValueError("persistence.bad_max_open: MAX_OPEN_USER_DBS must be >= 1")
        self.base_path = Path(base_path) / "user_dbs"
        self.oracle_did = oracle_did
        self.max_open = max_open
        self.restorer = restorer
        self._clock = clock
        self._session_clock = session_clock
        self._open: OrderedDict[str, UserDatabase] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._opening: set[asyncio.Future[UserDatabase | None]] = set()
        self._closed = False
        self.sessions = UserSessions(self)

    # --- layout ----------------------------------------------------------------------

    def storage_key(self, user_did: str) -> str:
        """The user's storage key (SRV-60)."""
        return checkpoint_storage_key(user_did, self.oracle_did)

    def folder_for(self, user_did: str) -> Path:
        """The user's folder: a readable, collision-free form of the DID."""
        return self.base_path / user_database_name(user_did).removesuffix(".sqlite")

    def path_for(self, user_did: str) -> Path:
        """Where the user's database lives."""
        return self.folder_for(user_did) / f"{self.storage_key(user_did)}.db"

    def open_users(self) -> list[str]:
        """DIDs of the users whose database is open, least recently used first."""
        return list(self._open)

    def is_in_use(self, user_did: str) -> bool:
        """Whether a request or turn holds the user's database right now."""
        handle = self._open.get(user_did)
        return handle is not None and handle.refs > 0

    def idle_for(self, user_did: str) -> float | None:
        """Seconds since the user's database was last released; ``None`` when closed."""
        handle = self._open.get(user_did)
        if handle is None:
            return None
        return self._clock() - handle.last_used

    # --- opening and sharing ---------------------------------------------------------

    def _lock(self, user_did: str) -> asyncio.Lock:
        return self._locks.setdefault(user_did, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def use(self, user_did: str) -> AsyncIterator[UserDatabase]:
        """Hold the user's database open for the block (reference counted), creating it
        when the user has none: for writes."""
        handle = await self._acquire(user_did, create=True)
        assert handle is not None  # created when absent
        try:
            yield handle
        finally:
            self._release(handle)

    @contextlib.asynccontextmanager
    async def use_existing(self, user_did: str) -> AsyncIterator[UserDatabase | None]:
        """Hold the user's database open for the block, or ``None`` when they have none.

        For reads: a user with neither a file nor a backup gets ``None`` and nothing is
        created, not even their folder. A backup is restored as :meth:`use` would.
        """
        handle = await self._acquire(user_did, create=False)
        try:
            yield handle
        finally:
            if handle is not None:
                self._release(handle)

    def _release(self, handle: UserDatabase) -> None:
        handle.refs -= 1
        handle.last_used = self._clock()

    async def _acquire(self, user_did: str, *, create: bool) -> UserDatabase | None:
        if self._closed:
            raise RuntimeError("persistence.closed: the user databases are closed")
        if not user_did:
            raise ValueError("a user database needs the user's DID")
        handle = self._open.get(user_did)
        if handle is None:
            async with self._lock(user_did):
                handle = self._open.get(user_did)
                if handle is None:
                    # Shielded: a caller cancelled mid-open (an aborted turn) must not
                    # leave a half-opened connection behind; the open completes and the
                    # handle is adopted, to be reused or closed with the rest.
                    opening = asyncio.ensure_future(self._open_handle(user_did, create=create))
                    self._opening.add(opening)
                    opening.add_done_callback(functools.partial(self._adopt, user_did))
                    handle = await asyncio.shield(opening)
                    if handle is None:
                        return None
                    self._open.setdefault(user_did, handle)
        self._open.move_to_end(user_did)
        handle.refs += 1
        handle.last_used = self._clock()
        await self._shrink()
        return handle

    def _adopt(self, user_did: str, opening: asyncio.Future[UserDatabase | None]) -> None:
        self._opening.discard(opening)
        if opening.cancelled() or opening.exception() is not None:
            return
        handle = opening.result()
        if handle is not None:
            self._open.setdefault(user_did, handle)

    async def _open_handle(self, user_did: str, *, create: bool) -> UserDatabase | None:
        path = self.path_for(user_did)
        if not path.exists() and self.restorer is not None:
            made = _missing_folders(path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                restored = await self.restorer.restore(user_did, self.storage_key(user_did), path)
            except BaseException:
                _remove_empty(made)
                raise
            if not restored and not create:
                _remove_empty(made)
        if not create and not path.exists():
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        saver, marked = await _open_saver(path)
        # The session table shares the saver's connection and its strand: one trip a call.
        connections = ThreadConnections(saver.conn)
        if not marked:
            marker = _schema_marker()
            try:
                await connections.write(lambda conn: _create_session_tables(conn, marker))
            except BaseException:
                await saver.conn.close()
                raise
        return UserDatabase(
            user_did=user_did,
            path=path,
            saver=saver,
            sessions=SessionStore(connections, clock=self._session_clock),
        )

    async def _shrink(self) -> None:
        # Least recently used first; a handle in use is never closed under its holder.
        while len(self._open) > self.max_open:
            victim = next((did for did, h in self._open.items() if h.refs == 0), None)
            if victim is None:
                return
            await self.close_user(victim)

    async def close_user(
        self, user_did: str, *, before_close: Callable[[Path], Awaitable[None]] | None = None
    ) -> bool:
        """Close the user's database if nobody holds it; ``False`` when it is in use.

        Args:
            user_did: Whose database.
            before_close: Awaited with the file's path after the handle is closed and
                before anyone can reopen it (an upload of the final state).
        """
        async with self._lock(user_did):
            handle = self._open.get(user_did)
            if handle is not None:
                if handle.refs > 0:
                    return False
                del self._open[user_did]
                await handle.close()
            if before_close is not None:
                await before_close(self.path_for(user_did))
        return True

    async def remove_user(
        self, user_did: str, *, before_remove: Callable[[Path], Awaitable[None]] | None = None
    ) -> bool:
        """Close the user's database and delete their folder (SRV-62 idle cleanup).

        ``before_remove`` (an upload) runs first; if it raises, nothing is deleted.
        Returns ``False`` when the database is in use.
        """
        folder = self.folder_for(user_did)

        async def _remove(path: Path) -> None:
            if before_remove is not None and await asyncio.to_thread(path.exists):
                await before_remove(path)
            await asyncio.to_thread(shutil.rmtree, folder, True)

        return await self.close_user(user_did, before_close=_remove)

    # --- CheckpointerFactory ---------------------------------------------------------

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        """The user's checkpoint saver, opening (or restoring) their file on first use."""
        async with self.use(user_did) as handle:
            return handle.saver

    async def delete_threads(self, user_did: str, thread_ids: Sequence[str]) -> None:
        """Delete these threads from the user's file; a user without a file has none."""
        if not thread_ids:
            return
        async with self.use_existing(user_did) as handle:
            if handle is None:
                return
            for thread_id in thread_ids:
                await handle.saver.adelete_thread(thread_id)

    async def delete_session_threads(self, user_did: str, session_id: str) -> list[str]:
        """Delete the session's thread and its sub-agent threads ``"{session_id}_…"``."""
        query = (
            "SELECT thread_id FROM checkpoints WHERE thread_id = ?"
            " OR thread_id LIKE ? ESCAPE '\\'"
            " UNION SELECT thread_id FROM writes WHERE thread_id = ?"
            " OR thread_id LIKE ? ESCAPE '\\'"
        )
        pattern = _like_prefix(f"{session_id}_")
        async with self.use_existing(user_did) as handle:
            if handle is None:
                return []
            saver = handle.saver
            async with (
                saver.lock,
                saver.conn.execute(query, (session_id, pattern, session_id, pattern)) as cursor,
            ):
                thread_ids = sorted(str(row[0]) for row in await cursor.fetchall())
            for thread_id in thread_ids:
                await saver.adelete_thread(thread_id)
        return thread_ids

    async def aclose(self) -> None:
        """Close every open database."""
        self._closed = True
        if self._opening:
            await asyncio.gather(*self._opening, return_exceptions=True)
        handles = list(self._open.values())
        self._open.clear()
        for handle in handles:
            try:
                await handle.close()
            except Exception:
                logger.exception("closing a user database failed")


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing: list[Path] = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove these folders, deepest first, where nothing was written into them."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (another user's folder, a partial restore) or gone
            return


@functools.cache
def _schema_marker() -> int:
    """What ``PRAGMA user_version`` holds in a file whose tables are current.

    A hash of everything a user file's tables depend on (the checkpoint saver's key and
    the session table's DDL), as a positive 32-bit integer; a new file holds 0. Opening
    a file with this marker skips the table checks, about 3 ms of CPU a file (a dozen
    statements, one of them a failing ``ALTER TABLE``); any change of schema or of
    LangGraph's saver changes the marker, and the file is checked and marked again.
    """
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateTable

    from oracle_core import MessageStoreSqliteSaver

    sessions = str(CreateTable(oracle_sessions).compile(dialect=sqlite.dialect()))
    indexes = sorted(str(index.name) for index in oracle_sessions.indexes)
    key = f"{MessageStoreSqliteSaver.schema_key()}\n{sessions}\n{indexes}"
    return zlib.crc32(key.encode()) & 0x7FFFFFFF or 1


def _prepare_connection(db: sqlite3.Connection) -> int:
    """Set the connection's pragmas; the file's ``user_version`` (in one trip)."""
    db.execute("PRAGMA journal_mode=WAL")  # kept by the file; a no-op once set
    db.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA synchronous=NORMAL")
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def _create_session_tables(conn: Connection, marker: int) -> None:
    create_tables_sync(conn, [oracle_sessions])
    conn.exec_driver_sql(f"PRAGMA user_version = {int(marker)}")


async def _open_saver(path: Path) -> tuple[AsyncSqliteSaver, bool]:
    """The file's saver, and whether its tables are known to be current (its marker)."""
    from oracle_core import CheckpointSerializer, MessageStoreSqliteSaver, connect_sqlite

    conn = await connect_sqlite(path)
    try:
        # aiosqlite has no public call that runs a function on its connection (0.22).
        marked = await conn._execute(_prepare_connection, conn._conn) == _schema_marker()
        saver = MessageStoreSqliteSaver(conn, serde=CheckpointSerializer())
        if marked:
            saver.assume_set_up()
        else:
            await saver.setup()
    except BaseException:
        await conn.close()
        raise
    return saver, marked


class UserSessions:
    """The session store of embedded mode: each call goes to the owner's own file.

    Same methods as :class:`SessionStore`. Session ids are unique per user here (the
    server generates UUIDs, so they are unique in practice across users too). Only
    :meth:`create` makes a user's file; the others answer as for an empty file when the
    user has none.
    """

    def __init__(self, databases: UserDatabases) -> None:
        self._dbs = databases

    async def create(self, record: SessionRecord) -> SessionRecord:
        """Store a new session in the owner's file."""
        async with self._dbs.use(record.user_did) as db:
            return await db.sessions.create(record)

    async def get(self, user_did: str, session_id: str) -> SessionRecord | None:
        """The user's session, or ``None``."""
        async with self._dbs.use_existing(user_did) as db:
            return None if db is None else await db.sessions.get(user_did, session_id)

    async def list(
        self, user_did: str, *, limit: int = 20, offset: int = 0, room_id: str | None = None
    ) -> tuple[builtins.list[SessionRecord], int]:
        """One page of the user's sessions, newest first, and their total."""
        async with self._dbs.use_existing(user_did) as db:
            if db is None:
                return [], 0
            return await db.sessions.list(user_did, limit=limit, offset=offset, room_id=room_id)

    async def touch(
        self, user_did: str, session_id: str, when: datetime | None = None
    ) -> SessionRecord | None:
        """Move the session to the front of the list; the session as stored, or ``None``."""
        async with self._dbs.use_existing(user_did) as db:
            return None if db is None else await db.sessions.touch(user_did, session_id, when)

    async def set_title(self, user_did: str, session_id: str, title: str) -> None:
        """Store a new title (a user with no database has no session to title)."""
        async with self._dbs.use_existing(user_did) as db:
            if db is not None:
                await db.sessions.set_title(user_did, session_id, title)

    async def set_matrix_thread(
        self, user_did: str, session_id: str, *, room_id: str, thread_id: str
    ) -> None:
        """Remember where the session's chat log goes."""
        async with self._dbs.use_existing(user_did) as db:
            if db is not None:
                await db.sessions.set_matrix_thread(
                    user_did, session_id, room_id=room_id, thread_id=thread_id
                )

    async def set_multitask_strategy(
        self, user_did: str, session_id: str, strategy: str | None
    ) -> None:
        """Store the session's double-texting policy."""
        async with self._dbs.use_existing(user_did) as db:
            if db is not None:
                await db.sessions.set_multitask_strategy(user_did, session_id, strategy)

    async def delete(self, user_did: str, session_id: str) -> bool:
        """Delete the user's session."""
        async with self._dbs.use_existing(user_did) as db:
            return False if db is None else await db.sessions.delete(user_did, session_id)
