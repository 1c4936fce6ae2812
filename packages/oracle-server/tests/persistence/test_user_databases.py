"""Per-user SQLite databases of embedded mode (SRV-55, 56, 58, 60; ``persistence/userdb.py``).

Everything here runs on real SQLite files in a temporary directory: the layout of the
files, sessions kept in their owner's file, reference counting and LRU closing, removal
of idle users, restoring a missing file through a :class:`UserRestorer`, and the additive
migration of databases written by an older schema.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlalchemy import Column, Integer, MetaData, String, Table, inspect
from sqlalchemy.ext.asyncio import create_async_engine

from oracle_core import PooledConnection
from oracle_core._sqlite_connection import POOL_THREADS
from oracle_server._persistence import (
    DuplicateSessionError,
    SessionRecord,
    Storage,
    StorageUnavailableError,
    UserDatabase,
    UserDatabases,
    checkpoint_storage_key,
    database_url,
)
from oracle_server._persistence.engine import create_tables

ORACLE = "did:ixo:ixo1oracleundertest"
ALICE = "did:ixo:ixo1alice"
BOB = "did:ixo:ixo1bob"
CAROL = "did:ixo:ixo1carol"
NOON = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def session(user_did: str, session_id: str, title: str | None = None) -> SessionRecord:
    """A new session row of ``user_did``."""
    return SessionRecord(
        session_id=session_id,
        user_did=user_did,
        title=title,
        created_at=NOON,
        last_updated_at=NOON,
        oracle_name="Test Oracle",
        oracle_did=ORACLE,
        oracle_entity_did=None,
    )


def raw_rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` read straight from the file with the standard library."""
    with sqlite3.connect(path) as conn:
        return list(conn.execute(query).fetchall())


def column_names(path: Path, table: str) -> list[str]:
    """Column names of ``table`` in the file, in declaration order."""
    return [str(row[1]) for row in raw_rows(path, f"PRAGMA table_info({table})")]


@pytest.fixture
async def open_dbs(tmp_path: Path) -> AsyncIterator[Callable[..., UserDatabases]]:
    """Build ``UserDatabases`` under ``tmp_path / "data"``; each is closed afterwards."""
    made: list[UserDatabases] = []

    def make(**options: Any) -> UserDatabases:
        dbs = UserDatabases(tmp_path / "data", oracle_did=ORACLE, **options)
        made.append(dbs)
        return dbs

    yield make
    for dbs in made:
        await dbs.aclose()


async def handle_is_open(handle: UserDatabase) -> bool:
    """Whether both connections of a handle still answer a query."""
    try:
        async with handle.saver.conn.execute("SELECT 1") as cursor:
            await cursor.fetchall()
    except ValueError:  # aiosqlite: "no active connection"
        return False
    return True


# --- layout ---------------------------------------------------------------------------


def test_storage_key_is_17_hex_of_the_prefixed_sha256() -> None:
    expected = hashlib.sha256(f"py-checkpoint_{ALICE}_{ORACLE}".encode()).hexdigest()[:17]
    assert checkpoint_storage_key(ALICE, ORACLE) == expected
    assert len(expected) == 17
    # Not the TypeScript runtime's key, so the two never share a backup (SRV-60).
    typescript = hashlib.sha256(f"checkpoint_{ALICE}_{ORACLE}".encode()).hexdigest()[:17]
    assert expected != typescript
    assert checkpoint_storage_key(ALICE, "did:ixo:ixo1otheroracle") != expected


async def test_each_user_gets_a_file_under_user_dbs(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    dbs = open_dbs()
    key = hashlib.sha256(f"py-checkpoint_{ALICE}_{ORACLE}".encode()).hexdigest()[:17]
    folder = f"did_ixo_ixo1alice-{hashlib.sha256(ALICE.encode()).hexdigest()[:12]}"
    expected = tmp_path / "data" / "user_dbs" / folder / f"{key}.db"
    assert dbs.storage_key(ALICE) == key
    assert dbs.path_for(ALICE) == expected
    assert not expected.exists()  # nothing is created before first use

    async with dbs.use(ALICE) as handle:
        assert handle.path == expected
        assert handle.user_did == ALICE
    assert expected.is_file()
    tables = {row[0] for row in raw_rows(expected, "SELECT name FROM sqlite_master")}
    assert {"oracle_sessions", "checkpoints", "writes"} <= tables
    assert sorted(p.name for p in (tmp_path / "data" / "user_dbs").iterdir()) == [folder]


async def test_sessions_live_in_their_owners_file(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    await dbs.sessions.create(session(ALICE, "alice-1", "Alice's"))
    await dbs.sessions.create(session(BOB, "bob-1", "Bob's"))

    query = "SELECT session_id, user_did, title FROM oracle_sessions"
    assert raw_rows(dbs.path_for(ALICE), query) == [("alice-1", ALICE, "Alice's")]
    assert raw_rows(dbs.path_for(BOB), query) == [("bob-1", BOB, "Bob's")]

    alice_page, alice_total = await dbs.sessions.list(ALICE)
    assert ([s.session_id for s in alice_page], alice_total) == (["alice-1"], 1)
    bob_page, bob_total = await dbs.sessions.list(BOB)
    assert ([s.session_id for s in bob_page], bob_total) == (["bob-1"], 1)
    assert await dbs.sessions.get(BOB, "alice-1") is None
    assert await dbs.sessions.get(ALICE, "bob-1") is None
    assert not await dbs.sessions.delete(BOB, "alice-1")

    await dbs.sessions.set_matrix_thread(ALICE, "alice-1", room_id="!r:hs", thread_id="$root")
    stored = await dbs.sessions.get(ALICE, "alice-1")
    assert stored is not None
    assert (stored.room_id, stored.matrix_thread_id) == ("!r:hs", "$root")
    assert raw_rows(dbs.path_for(BOB), "SELECT room_id, matrix_thread_id FROM oracle_sessions") == [
        (None, None)
    ]


async def test_open_user_databases_hold_no_thread_of_their_own(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    before = threading.active_count()
    users = [f"did:ixo:ixo1user{n}" for n in range(2 * POOL_THREADS + 1)]
    conns: list[PooledConnection] = []
    for user in users:
        await dbs.sessions.create(session(user, f"{user}-1"))
        saver = await dbs(user)
        assert isinstance(saver, AsyncSqliteSaver)
        assert isinstance(saver.conn, PooledConnection)
        conns.append(saver.conn)
        await saver.aput(
            {"configurable": {"thread_id": f"{user}-1", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {},
            {},
        )
        assert await dbs.sessions.touch(user, f"{user}-1") is not None
        assert (await dbs.sessions.list(user))[1] == 1
    # Every user's file runs on the threads the process shares, whatever the sessions did.
    assert threading.active_count() - before <= POOL_THREADS
    assert all(conn.is_alive() for conn in conns)
    await dbs.aclose()
    assert not any(conn.is_alive() for conn in conns)


async def test_a_session_write_never_undoes_a_thread_delete(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    await dbs.sessions.create(session(ALICE, "alice-1"))
    saver = await dbs(ALICE)
    config: RunnableConfig = {"configurable": {"thread_id": "alice-1", "checkpoint_ns": ""}}
    await saver.aput(config, empty_checkpoint(), {}, {})
    # A refused session write (a duplicate id) rolls back while the delete runs.
    results = await asyncio.gather(
        saver.adelete_thread("alice-1"),
        dbs.sessions.create(session(ALICE, "alice-1")),
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], DuplicateSessionError)
    assert await saver.aget_tuple(config) is None
    assert raw_rows(dbs.path_for(ALICE), "SELECT count(*) FROM checkpoints") == [(0,)]
    assert await dbs.sessions.get(ALICE, "alice-1") is not None


# --- sharing, LRU and closing ---------------------------------------------------------


async def test_reads_of_a_user_without_a_database_create_nothing(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    assert await dbs.sessions.get(ALICE, "s1") is None
    assert await dbs.sessions.list(ALICE) == ([], 0)
    assert await dbs.sessions.touch(ALICE, "s1", NOON) is None
    await dbs.sessions.set_title(ALICE, "s1", "A title")
    await dbs.sessions.set_matrix_thread(ALICE, "s1", room_id="!r:x", thread_id="$t")
    assert await dbs.sessions.delete(ALICE, "s1") is False
    await dbs.delete_threads(ALICE, ["s1"])
    assert await dbs.delete_session_threads(ALICE, "s1") == []
    async with dbs.use_existing(ALICE) as absent:
        assert absent is None
    assert not dbs.base_path.exists()
    assert dbs.open_users() == []

    await dbs.sessions.create(session(ALICE, "s1"))
    async with dbs.use_existing(ALICE) as present:
        assert present is not None
        assert present.refs == 1
    assert dbs.path_for(ALICE).is_file()
    assert [r.session_id for r in (await dbs.sessions.list(ALICE))[0]] == ["s1"]


async def test_a_handle_is_shared_and_reference_counted(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    async with dbs.use(ALICE) as first:
        assert dbs.is_in_use(ALICE)
        async with dbs.use(ALICE) as second:
            assert second is first
            assert first.refs == 2
        assert first.refs == 1
        assert dbs.is_in_use(ALICE)
        # Nobody closes a database under its holder.
        assert await dbs.close_user(ALICE) is False
        assert dbs.open_users() == [ALICE]
        assert await handle_is_open(first)
        assert await first.sessions.create(session(ALICE, "still-usable"))
    assert not dbs.is_in_use(ALICE)
    assert dbs.idle_for(ALICE) is not None

    assert await dbs.close_user(ALICE) is True
    assert dbs.open_users() == []
    assert dbs.idle_for(ALICE) is None
    assert not await handle_is_open(first)
    # Reopening reads the same file.
    assert await dbs.sessions.get(ALICE, "still-usable") is not None


async def test_beyond_max_open_the_least_recently_used_idle_one_closes(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs(max_open=2)
    async with dbs.use(ALICE) as alice:
        pass
    async with dbs.use(BOB) as bob:
        pass
    async with dbs.use(ALICE):  # Alice is now more recent than Bob
        pass
    assert dbs.open_users() == [BOB, ALICE]

    async with dbs.use(CAROL):
        assert dbs.open_users() == [ALICE, CAROL]
    assert not await handle_is_open(bob)
    assert await handle_is_open(alice)


async def test_a_handle_in_use_is_never_evicted(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs(max_open=1)
    async with dbs.use(ALICE) as alice:
        async with dbs.use(BOB) as bob:
            # Over the limit, but both are held: neither closes.
            assert dbs.open_users() == [ALICE, BOB]
        async with dbs.use(CAROL):
            # Bob is idle and goes; Alice and Carol are held and stay, over the limit.
            assert dbs.open_users() == [ALICE, CAROL]
            assert not await handle_is_open(bob)
            assert await handle_is_open(alice)
            await alice.sessions.create(session(ALICE, "written-while-over-the-limit"))
    # Alice's handle was never closed under her; once released, the next use brings the
    # pool back to the limit by closing the idle one (Carol).
    assert await dbs.sessions.get(ALICE, "written-while-over-the-limit") is not None
    assert dbs.open_users() == [ALICE]


def test_max_open_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"persistence\.bad_max_open"):
        UserDatabases(tmp_path, oracle_did=ORACLE, max_open=0)


# --- removal --------------------------------------------------------------------------


async def test_remove_user_runs_before_remove_on_the_closed_file_then_deletes_the_folder(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    await dbs.sessions.create(session(ALICE, "alice-1"))
    await dbs.sessions.create(session(BOB, "bob-1"))
    path = dbs.path_for(ALICE)
    seen: list[tuple[Path, list[tuple[Any, ...]], list[str]]] = []

    async def upload(file: Path) -> None:
        # The handle is closed by now: the file alone holds every row.
        rows = raw_rows(file, "SELECT session_id FROM oracle_sessions")
        seen.append((file, rows, dbs.open_users()))

    assert await dbs.remove_user(ALICE, before_remove=upload) is True
    assert seen == [(path, [("alice-1",)], [BOB])]
    assert not path.parent.exists()
    assert dbs.path_for(BOB).is_file()
    # Alice starts again with an empty file.
    assert await dbs.sessions.get(ALICE, "alice-1") is None


async def test_remove_user_deletes_nothing_when_before_remove_raises(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    await dbs.sessions.create(session(ALICE, "alice-1"))
    path = dbs.path_for(ALICE)

    async def failing_upload(_file: Path) -> None:
        raise ConnectionError("homeserver unreachable")

    with pytest.raises(ConnectionError, match="homeserver unreachable"):
        await dbs.remove_user(ALICE, before_remove=failing_upload)
    assert path.is_file()
    assert raw_rows(path, "SELECT session_id FROM oracle_sessions") == [("alice-1",)]
    assert await dbs.sessions.get(ALICE, "alice-1") is not None


async def test_remove_user_leaves_a_database_in_use_alone(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    calls: list[Path] = []

    async def upload(file: Path) -> None:
        calls.append(file)

    async with dbs.use(ALICE) as alice:
        await alice.sessions.create(session(ALICE, "alice-1"))
        assert await dbs.remove_user(ALICE, before_remove=upload) is False
        assert calls == []
        assert dbs.path_for(ALICE).is_file()
        assert await handle_is_open(alice)


# --- restore --------------------------------------------------------------------------


class CopyingRestorer:
    """A :class:`UserRestorer` that copies a prepared SQLite file with the backup API.

    It pauses before copying, so that concurrent first uses overlap with the restore.
    """

    def __init__(self, source: Path | None, *, pause: float = 0.05) -> None:
        self.source = source
        self.pause = pause
        self.calls: list[tuple[str, str, Path]] = []

    async def restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        self.calls.append((user_did, storage_key, dest))
        await asyncio.sleep(self.pause)
        if self.source is None:
            return False
        await asyncio.to_thread(self._copy, self.source, dest)
        return True

    @staticmethod
    def _copy(source: Path, dest: Path) -> None:
        with sqlite3.connect(source) as src, sqlite3.connect(dest) as dst:
            src.backup(dst)
        dst.close()
        src.close()


class UnreachableRestorer:
    """A :class:`UserRestorer` whose backup cannot be reached right now."""

    def __init__(self) -> None:
        self.calls = 0

    async def restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        self.calls += 1
        raise StorageUnavailableError("the homeserver is unreachable")


async def prepared_backup(tmp_path: Path) -> Path:
    """Alice's database from another node: one session, written through the real stores."""
    other = UserDatabases(tmp_path / "other-node", oracle_did=ORACLE)
    try:
        await other.sessions.create(session(ALICE, "from-backup", "Restored"))
        path = other.path_for(ALICE)
    finally:
        await other.aclose()
    return path


async def test_the_restorer_fills_a_missing_file_once(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    restorer = CopyingRestorer(await prepared_backup(tmp_path))
    dbs = open_dbs(restorer=restorer)

    restored = await dbs.sessions.get(ALICE, "from-backup")
    assert restored is not None
    assert restored.title == "Restored"
    assert restorer.calls == [(ALICE, dbs.storage_key(ALICE), dbs.path_for(ALICE))]

    # The file exists now: closing and reopening never asks the restorer again.
    assert await dbs.close_user(ALICE)
    assert await dbs.sessions.get(ALICE, "from-backup") is not None
    assert len(restorer.calls) == 1


async def test_the_restorer_is_not_asked_when_the_file_exists(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    local = open_dbs()
    await local.sessions.create(session(ALICE, "local"))
    await local.aclose()

    restorer = CopyingRestorer(await prepared_backup(tmp_path))
    dbs = open_dbs(restorer=restorer)
    assert await dbs.sessions.get(ALICE, "local") is not None
    assert await dbs.sessions.get(ALICE, "from-backup") is None
    assert restorer.calls == []


async def test_a_new_user_without_backup_starts_empty(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    restorer = CopyingRestorer(None)
    dbs = open_dbs(restorer=restorer)
    page, total = await dbs.sessions.list(ALICE)
    assert (page, total) == ([], 0)
    assert [call[0] for call in restorer.calls] == [ALICE]
    # A read creates nothing, not even the folder the restore was offered.
    assert not dbs.base_path.exists()
    await dbs.sessions.create(session(ALICE, "first"))
    assert [call[0] for call in restorer.calls] == [ALICE, ALICE]
    assert dbs.path_for(ALICE).is_file()


async def test_an_unreachable_backup_leaves_no_file_and_propagates(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    restorer = UnreachableRestorer()
    dbs = open_dbs(restorer=restorer)
    path = dbs.path_for(ALICE)

    for attempt in (1, 2):
        with pytest.raises(StorageUnavailableError, match="unreachable"):
            await dbs.sessions.list(ALICE)
        assert restorer.calls == attempt  # a failure is not remembered: the next use retries
        assert not path.exists()
        assert dbs.open_users() == []
    # A checkpointer request fails the same way, without creating the file either.
    with pytest.raises(StorageUnavailableError):
        await dbs(ALICE)
    assert not path.exists()

    # Once the backup is reachable, the user gets it, not an empty database.
    dbs.restorer = CopyingRestorer(await prepared_backup(tmp_path))
    assert await dbs.sessions.get(ALICE, "from-backup") is not None


async def test_a_caller_cancelled_mid_open_leaves_the_handle_to_be_reused(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    # An aborted turn can be cancelled while its user's database is opening: the open
    # completes anyway and the handle is kept, instead of a connection left unclosed.
    restorer = CopyingRestorer(await prepared_backup(tmp_path), pause=0.2)
    dbs = open_dbs(restorer=restorer)
    waiting = asyncio.create_task(dbs.sessions.list(ALICE))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert dbs.open_users() == []
    for _ in range(100):
        if dbs.open_users():
            break
        await asyncio.sleep(0.02)
    assert dbs.open_users() == [ALICE]
    records, total = await dbs.sessions.list(ALICE)
    assert (total, records[0].session_id) == (1, "from-backup")
    assert len(restorer.calls) == 1


async def test_concurrent_first_uses_restore_and_open_once(
    open_dbs: Callable[..., UserDatabases], tmp_path: Path
) -> None:
    restorer = CopyingRestorer(await prepared_backup(tmp_path), pause=0.2)
    dbs = open_dbs(restorer=restorer)
    handles: list[UserDatabase] = []
    titles: list[str | None] = []

    async def first_use() -> None:
        async with dbs.use(ALICE) as handle:
            handles.append(handle)
            record = await handle.sessions.get(ALICE, "from-backup")
            titles.append(None if record is None else record.title)
            await asyncio.sleep(0.05)  # still held while the others arrive

    await asyncio.gather(*(first_use() for _ in range(6)))
    assert len(restorer.calls) == 1
    assert len(handles) == 6
    assert all(handle is handles[0] for handle in handles)
    assert titles == ["Restored"] * 6
    assert handles[0].refs == 0


# --- additive migrations --------------------------------------------------------------

# `oracle_sessions` as the first schema created it: no `matrix_thread_id` column.
OLD_SESSIONS_DDL = """
CREATE TABLE oracle_sessions (
    session_id VARCHAR(255) NOT NULL PRIMARY KEY,
    user_did VARCHAR(255) NOT NULL,
    title TEXT,
    created_at DATETIME NOT NULL,
    last_updated_at DATETIME NOT NULL,
    oracle_name VARCHAR(255) NOT NULL,
    oracle_did VARCHAR(255),
    oracle_entity_did VARCHAR(255),
    last_processed_count INTEGER,
    user_context JSON,
    room_id VARCHAR(255),
    slack_thread_ts VARCHAR(64),
    client VARCHAR(32) NOT NULL
)
"""


def write_old_sessions(path: Path, rows: list[tuple[str, str, str]]) -> None:
    """An older database with ``(session_id, user_did, title)`` rows, via plain sqlite3."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(OLD_SESSIONS_DDL)
        conn.executemany(
            "INSERT INTO oracle_sessions (session_id, user_did, title, created_at,"
            " last_updated_at, oracle_name, oracle_did, user_context, room_id, client)"
            " VALUES (?, ?, ?, '2025-06-01 08:30:00.000000', '2025-06-02 09:00:00.000000',"
            " 'Old Oracle', ?, '{\"lang\": \"fr\"}', '!old:hs', 'portal')",
            [(*row, ORACLE) for row in rows],
        )
    conn.close()
    assert "matrix_thread_id" not in column_names(path, "oracle_sessions")


async def test_the_server_database_gains_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_old_sessions(data / "oracle.db", [("s-1", ALICE, "First"), ("s-2", BOB, "Second")])

    storage = await Storage.open(database_url(None, str(data)))
    try:
        assert column_names(data / "oracle.db", "oracle_sessions")[-2:] == [
            "matrix_thread_id",
            "multitask_strategy",
        ]
        first = await storage.sessions.get(ALICE, "s-1")
        assert first is not None
        assert (first.title, first.room_id, first.user_context) == (
            "First",
            "!old:hs",
            {"lang": "fr"},
        )
        assert first.created_at == datetime(2025, 6, 1, 8, 30, tzinfo=UTC)
        assert first.matrix_thread_id is None
        assert first.multitask_strategy is None
        second = await storage.sessions.get(BOB, "s-2")
        assert second is not None
        assert second.title == "Second"
        # The new column is usable.
        await storage.sessions.set_matrix_thread(ALICE, "s-1", room_id="!new:hs", thread_id="$t")
        updated = await storage.sessions.get(ALICE, "s-1")
        assert updated is not None
        assert updated.matrix_thread_id == "$t"
    finally:
        await storage.close()

    # Opening again is a no-op: same columns, same rows.
    again = await Storage.open(database_url(None, str(data)))
    await again.close()
    assert column_names(data / "oracle.db", "oracle_sessions").count("matrix_thread_id") == 1
    assert column_names(data / "oracle.db", "oracle_sessions").count("multitask_strategy") == 1
    assert len(raw_rows(data / "oracle.db", "SELECT * FROM oracle_sessions")) == 2


async def test_a_users_older_file_gains_new_columns_and_keeps_its_rows(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    path = dbs.path_for(ALICE)
    write_old_sessions(path, [("old-1", ALICE, "Before the upgrade")])

    kept = await dbs.sessions.get(ALICE, "old-1")
    assert kept is not None
    assert kept.title == "Before the upgrade"
    assert kept.matrix_thread_id is None
    assert "matrix_thread_id" in column_names(path, "oracle_sessions")
    await dbs.sessions.set_matrix_thread(ALICE, "old-1", room_id="!r:hs", thread_id="$root")
    assert raw_rows(path, "SELECT matrix_thread_id FROM oracle_sessions") == [("$root",)]


async def test_a_file_is_marked_once_its_tables_are_current_and_reopened_without_checks(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    await dbs.sessions.create(session(ALICE, "alice-1"))
    path = dbs.path_for(ALICE)
    marker = raw_rows(path, "PRAGMA user_version")[0][0]
    assert marker != 0
    await dbs.aclose()

    # A marked file is trusted: a table dropped behind the runtime's back is not
    # recreated (what proves the checks were skipped), while the others still work.
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TABLE oracle_message_blobs")
    raw.close()
    reopened = open_dbs()
    stored = await reopened.sessions.get(ALICE, "alice-1")
    assert stored is not None
    assert (
        raw_rows(path, "SELECT name FROM sqlite_master WHERE name = 'oracle_message_blobs'") == []
    )
    await reopened.aclose()

    # Another marker (a file from another schema or LangGraph version) is checked again.
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA user_version = 7")
    raw.close()
    checked = open_dbs()
    assert await checked.sessions.get(ALICE, "alice-1") is not None
    assert raw_rows(path, "SELECT name FROM sqlite_master WHERE name = 'oracle_message_blobs'") == [
        ("oracle_message_blobs",)
    ]
    assert raw_rows(path, "PRAGMA user_version") == [(marker,)]
    await checked.aclose()


async def test_an_older_file_is_marked_only_after_it_gained_its_columns(
    open_dbs: Callable[..., UserDatabases],
) -> None:
    dbs = open_dbs()
    path = dbs.path_for(ALICE)
    write_old_sessions(path, [("old-1", ALICE, "Before the upgrade")])
    assert raw_rows(path, "PRAGMA user_version") == [(0,)]
    assert await dbs.sessions.get(ALICE, "old-1") is not None
    assert "matrix_thread_id" in column_names(path, "oracle_sessions")
    assert raw_rows(path, "PRAGMA user_version")[0][0] != 0


async def test_a_missing_not_null_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "widgets.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE widgets (widget_id INTEGER PRIMARY KEY, name TEXT)")
        raw.execute("INSERT INTO widgets VALUES (1, 'sprocket')")
    raw.close()
    widgets = Table(
        "widgets",
        MetaData(),
        Column("widget_id", Integer, primary_key=True),
        Column("name", String(50)),
        Column("colour", String(20), nullable=False),
    )

    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    try:
        with pytest.raises(RuntimeError, match=r"persistence\.migration_unsupported") as caught:
            async with engine.begin() as conn:
                await create_tables(conn, [widgets])
        assert "widgets.colour" in str(caught.value)
        async with engine.connect() as conn:
            names = await conn.run_sync(
                lambda sync: [c["name"] for c in inspect(sync).get_columns("widgets")]
            )
        assert names == ["widget_id", "name"]
    finally:
        await engine.dispose()
    assert raw_rows(path, "SELECT * FROM widgets") == [(1, "sprocket")]


async def test_a_nullable_column_is_added_by_create_tables(tmp_path: Path) -> None:
    path = tmp_path / "widgets.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE widgets (widget_id INTEGER PRIMARY KEY)")
        raw.execute("INSERT INTO widgets VALUES (7)")
    raw.close()
    widgets = Table(
        "widgets",
        MetaData(),
        Column("widget_id", Integer, primary_key=True),
        Column("colour", String(20)),
    )
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.begin() as conn:
            await create_tables(conn, [widgets])
    finally:
        await engine.dispose()
    assert column_names(path, "widgets") == ["widget_id", "colour"]
    assert raw_rows(path, "SELECT * FROM widgets") == [(7, None)]


async def test_a_statement_is_compiled_once_for_every_users_file(
    open_dbs: Callable[..., UserDatabases], caplog: pytest.LogCaptureFixture
) -> None:
    # SQLAlchemy's engine log says of each statement whether it was compiled for this
    # call ("generated in") or taken from the cache ("cached since").
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
    dbs = open_dbs()

    async def a_users_day(user: str, session_id: str) -> list[str]:
        caplog.clear()
        await dbs.sessions.create(session(user, session_id))
        await dbs.sessions.set_title(user, session_id, "Tides")
        page, total = await dbs.sessions.list(user)
        assert ([s.session_id for s in page], total) == ([session_id], 1)
        return [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy")]

    # The first user's statements may be cached already (the cache is the process's).
    await a_users_day(ALICE, "s-alice")
    second = await a_users_day(BOB, "s-bob")  # another file, another connection
    assert any("[cached since" in message for message in second)
    assert not [message for message in second if "[generated in" in message]
