"""SQLite connections on shared threads: bounded threads, per-connection order, isolation."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

from oracle_core import MessageStoreSqliteSaver, PooledConnection, connect_sqlite
from oracle_core._sqlite_connection import POOL_THREADS


def _sqlite_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("oracle-sqlite")]


async def test_many_connections_share_a_bounded_set_of_threads(tmp_path: Path) -> None:
    before = threading.active_count()
    conns = [await connect_sqlite(tmp_path / f"user-{i}.sqlite") for i in range(3 * POOL_THREADS)]
    try:
        await asyncio.gather(
            *(c.execute("CREATE TABLE t (n INTEGER)") for c in conns),
        )
        await asyncio.gather(
            *(c.execute("INSERT INTO t VALUES (?)", (i,)) for i, c in enumerate(conns))
        )
        await asyncio.gather(*(c.commit() for c in conns))
        for i, conn in enumerate(conns):
            async with conn.execute("SELECT n FROM t") as cursor:
                assert list(await cursor.fetchall()) == [(i,)]
        assert 1 <= len(_sqlite_threads()) <= POOL_THREADS
        assert threading.active_count() - before <= POOL_THREADS
    finally:
        for conn in conns:
            await conn.close()


async def test_one_connections_calls_run_in_the_order_they_were_made(tmp_path: Path) -> None:
    conn = await connect_sqlite(tmp_path / "order.sqlite")
    try:
        await conn.execute("CREATE TABLE t (n INTEGER)")
        await asyncio.gather(*(conn.execute("INSERT INTO t VALUES (?)", (n,)) for n in range(200)))
        await conn.commit()
        async with conn.execute("SELECT n FROM t ORDER BY rowid") as cursor:
            assert [row[0] for row in await cursor.fetchall()] == list(range(200))
    finally:
        await conn.close()


async def test_a_call_that_fails_raises_to_its_caller_and_the_next_call_runs(
    tmp_path: Path,
) -> None:
    conn = await connect_sqlite(tmp_path / "fail.sqlite")
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await conn.execute("SELECT * FROM missing")
        async with conn.execute("SELECT 1 + 1") as cursor:
            assert await cursor.fetchone() == (2,)
    finally:
        await conn.close()


async def test_a_blocked_connection_does_not_hold_up_another(tmp_path: Path) -> None:
    release = threading.Event()
    blocked = await connect_sqlite(tmp_path / "blocked.sqlite")
    other = await connect_sqlite(tmp_path / "other.sqlite")
    try:
        await blocked.create_function("wait_for_release", 0, lambda: release.wait(10))
        waiting = asyncio.ensure_future(blocked.execute("SELECT wait_for_release()"))
        await asyncio.sleep(0.05)
        async with other.execute("SELECT 'still served'") as cursor:
            assert await cursor.fetchone() == ("still served",)
        assert not waiting.done()
        release.set()
        cursor = await waiting
        assert await cursor.fetchone() == (1,)
    finally:
        release.set()
        await blocked.close()
        await other.close()


async def test_a_cancelled_caller_leaves_the_connection_usable(tmp_path: Path) -> None:
    release = threading.Event()
    conn = await connect_sqlite(tmp_path / "cancel.sqlite")
    try:
        await conn.create_function("wait_for_release", 0, lambda: release.wait(10))
        waiting = asyncio.ensure_future(conn.execute("SELECT wait_for_release()"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        async with conn.execute("SELECT 'after'") as cursor:
            assert await cursor.fetchone() == ("after",)
    finally:
        release.set()
        await conn.close()


async def test_close_waits_for_earlier_calls_and_later_calls_fail(tmp_path: Path) -> None:
    path = tmp_path / "close.sqlite"
    conn = await connect_sqlite(path)
    await conn.execute("CREATE TABLE t (n INTEGER)")
    insert = asyncio.ensure_future(conn.execute("INSERT INTO t VALUES (7)"))
    commit = asyncio.ensure_future(conn.commit())
    await asyncio.sleep(0)
    await conn.close()
    await insert
    await commit
    assert not conn.is_alive()
    with pytest.raises(ValueError, match="no active connection"):
        await conn.execute("SELECT 1")
    await conn.close()  # a second close is a no-op
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT n FROM t").fetchall() == [(7,)]


async def test_langgraphs_saver_runs_on_a_pooled_connection(tmp_path: Path) -> None:
    conn = await connect_sqlite(tmp_path / "saver.sqlite")
    assert isinstance(conn, PooledConnection)
    saver = MessageStoreSqliteSaver(conn)
    try:
        await saver.setup()
        config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        assert await saver.aget_tuple(config) is None
        async with conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ) as cursor:
            tables = {row[0] for row in await cursor.fetchall()}
        assert {"checkpoints", "writes"} <= tables
    finally:
        await conn.close()
