"""SQLite connections that share a few threads instead of holding one each.

``aiosqlite`` gives every connection a thread of its own that lives as long as the
connection. The runtime keeps one connection per user (CORE-54, a file per user, cached
while the user is active), so 200 active users meant 200 threads, each with its stack
and, past a few, its own ``malloc`` arena. :class:`PooledConnection` is an
``aiosqlite.Connection`` whose calls run on a small pool shared by every connection of
the process. Each connection keeps its calls in order and one at a time (a strand): the
``sqlite3`` connection is never used by two threads at once, only by different ones in
turn, which ``check_same_thread=False`` allows.

Only the way calls reach a thread changes: every ``aiosqlite`` method (cursors,
``execute``, ``commit``, ``executescript``) funnels through ``_execute``, which this class
overrides, so LangGraph's ``AsyncSqliteSaver`` and the runtime's one-trip writes run on it
unchanged. A call that raises gives its exception to its caller and the strand goes on
with the next; calls made after :meth:`~PooledConnection.close` fail with ``ValueError``
as ``aiosqlite``'s do. ``aiosqlite`` has no public hook for where calls run (0.22), so the
three members overridden here are listed in ``oracle_core._langgraph_compat``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiosqlite

__all__ = ["POOL_THREADS", "PooledConnection", "connect_sqlite"]

POOL_THREADS = 8
"""Threads shared by every pooled connection of the process, started as calls need them.

A call holds its thread while SQLite works, including while it waits on another process's
write lock (up to the connection's ``busy_timeout``). Per-user files make that wait rare:
only one user's own work in two worker processes at once contends.
"""

ITER_CHUNK_SIZE = 64
"""Rows an ``async for`` over a cursor fetches per trip (``aiosqlite``'s default)."""


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="oracle-sqlite")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Strand:
    """One connection's calls, run in order and one at a time on the shared pool."""

    __slots__ = ("_draining", "_lock", "_pending")

    def __init__(self) -> None:
        self._pending: deque[tuple[asyncio.Future[Any] | None, Callable[[], Any]]] = deque()
        self._lock = threading.Lock()
        self._draining = False

    def submit(self, future: asyncio.Future[Any] | None, call: Callable[[], Any]) -> None:
        """Queue ``call``; its outcome settles ``future`` (``None``: nobody waits)."""
        with self._lock:
            self._pending.append((future, call))
            if self._draining:
                return
            self._draining = True
        _pool().submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._draining = False
                    return
                future, call = self._pending.popleft()
            result: Any = None
            error: BaseException | None = None
            try:
                result = call()
            except BaseException as exc:
                error = exc
            if future is None:
                continue
            # A closed loop (RuntimeError) has nobody waiting on the future.
            with contextlib.suppress(RuntimeError):
                future.get_loop().call_soon_threadsafe(_settle, future, result, error)


class PooledConnection(aiosqlite.Connection):
    """An ``aiosqlite.Connection`` whose calls run on the process's shared SQLite threads.

    Open it with :func:`connect_sqlite`. It never starts a thread of its own.
    """

    def __init__(self, connector: Callable[[], sqlite3.Connection]) -> None:
        # The base builds its thread object here but only __await__ would start it.
        super().__init__(connector, ITER_CHUNK_SIZE)
        self._strand = _Strand()
        self._sqlite: sqlite3.Connection | None = None
        self._open_call = connector

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._sqlite is None:
            raise ValueError("no active connection")
        return self._sqlite

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._sqlite is None:
            raise ValueError("Connection closed")
        return await self._run(functools.partial(fn, *args, **kwargs))

    async def _run(self, call: Callable[[], Any]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._strand.submit(future, call)
        return await future

    async def _connect(self) -> PooledConnection:
        if self._sqlite is None:
            self._sqlite = await self._run(self._open_call)
        return self

    def __await__(self) -> Generator[Any, None, PooledConnection]:
        return self._connect().__await__()

    def is_alive(self) -> bool:
        """Whether the connection is open (``aiosqlite``'s check reads a thread)."""
        return self._sqlite is not None

    async def close(self) -> None:
        """Wait for the calls already made, then close the ``sqlite3`` connection."""
        sqlite = self._sqlite
        if sqlite is None:
            return
        self._sqlite = None
        await self._run(sqlite.close)

    def stop(self) -> None:
        """Close without waiting (for a connection dropped unclosed)."""
        sqlite, self._sqlite = self._sqlite, None
        if sqlite is not None:
            self._strand.submit(None, sqlite.close)

    def __del__(self) -> None:
        if self._sqlite is not None:
            self.stop()


async def connect_sqlite(path: Path | str, *, schema: str | None = None) -> PooledConnection:
    """Open the SQLite file at ``path`` on the shared threads.

    Args:
        path: The file (its folder is made when missing), or ``:memory:``.
        schema: A script run (and committed) once the file is open: ``CREATE … IF NOT
            EXISTS`` statements of the store using it.
    """
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
    connection = await PooledConnection(
        functools.partial(sqlite3.connect, str(path), check_same_thread=False)
    )
    if schema is not None:
        await connection.executescript(schema)
        await connection.commit()
    return connection
