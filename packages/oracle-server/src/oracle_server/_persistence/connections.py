"""Where a store's statements run: a pooled async engine, or the thread of a SQLite file.

A store writes each operation as a plain function of a synchronous SQLAlchemy
``Connection`` and hands it to :class:`Connections`, which runs it in a transaction:

- :class:`EngineConnections`: the server database (SQLite or PostgreSQL), a pooled
  :class:`~sqlalchemy.ext.asyncio.AsyncEngine`; the function runs under ``run_sync``.
- :class:`ThreadConnections`: a user's own file in embedded mode, on the one aiosqlite
  connection its checkpoint saver already holds (a ``PooledConnection`` of oracle-core,
  whose calls run in order on threads shared by every user's file). The function runs
  there in one trip: a session lookup or update is one hop, where an engine of its own
  paid a hop for each cursor, execute, fetch, commit and pool reset, and a thread (and a
  connection) of its own for each of its pooled connections.

  Every user's file speaks through one SQLite dialect and one cache of compiled
  statements (:func:`_shared_sqlite`): an engine of SQLAlchemy's making per file compiled
  each statement again for each user, about 120 KiB of heap and a few milliseconds of CPU
  a user.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from sqlalchemy import URL, Connection, Engine, create_engine
from sqlalchemy.engine.interfaces import DBAPIConnection, Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import StaticPool
from sqlalchemy.util import LRUCache

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["Connections", "EngineConnections", "ThreadConnections", "connections_of"]

T = TypeVar("T")

COMPILED_STATEMENTS = 500
"""Compiled statements kept for all user files together (SQLAlchemy's own per-engine size)."""


@functools.cache
def _shared_sqlite() -> tuple[Dialect, URL, LRUCache[Any, Any]]:
    """The SQLite dialect, initialised once, and the compiled-statement cache that every
    user file's engine shares (a compiled statement is keyed by its dialect)."""
    template = create_engine("sqlite://")
    with template.connect():
        pass  # the first connect initialises the dialect (server version, features)
    template.dispose()
    return template.dialect, template.url, LRUCache(COMPILED_STATEMENTS)


class Connections(Protocol):
    """Runs a function of a connection in a transaction: committed when it returns,
    rolled back when it raises."""

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` (queries only)."""
        ...

    async def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` and commit."""
        ...


class EngineConnections:
    """Each call on a connection of ``engine``'s pool."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def read(self, work: Callable[[Connection], T]) -> T:
        async with self.engine.connect() as conn:
            return await conn.run_sync(work)

    async def write(self, work: Callable[[Connection], T]) -> T:
        async with self.engine.begin() as conn:
            return await conn.run_sync(work)


class ThreadConnections:
    """Each call in ``conn``'s order of calls, on its ``sqlite3`` connection, in one trip.

    The saver that owns ``conn`` keeps using it. Its writes, and its deletes, commit
    within one trip too (``MessageStoreSqliteSaver``), so no transaction of the saver's is
    ever open between two trips for one of these to commit or roll back. The connection's
    pragmas are the saver's (WAL, ``busy_timeout``); closing it is the saver's business.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        # The sqlite3 connection, used only by calls that conn runs.
        raw = cast("DBAPIConnection", conn._conn)
        dialect, url, compiled = _shared_sqlite()
        # A reset would roll back whatever the saver has begun on the connection.
        pool = StaticPool(lambda: raw, reset_on_return=None, dialect=dialect)
        # What create_engine would build, without a dialect of its own: its connect hooks
        # add SQL functions (regexp, floor) that no statement of a user file uses.
        self._engine: Engine = Engine(pool, dialect, url).execution_options(compiled_cache=compiled)

    async def read(self, work: Callable[[Connection], T]) -> T:
        return await self._on_thread(self._read, work)

    async def write(self, work: Callable[[Connection], T]) -> T:
        return await self._on_thread(self._write, work)

    async def _on_thread(self, run: Callable[[Callable[[Connection], T]], T], work: Any) -> T:
        # aiosqlite has no public call that runs a function in its order of calls (0.22).
        result: T = await self._conn._execute(run, work)  # type: ignore[no-untyped-call]
        return result

    def _read(self, work: Callable[[Connection], T]) -> T:
        with self._engine.connect() as conn:
            return work(conn)

    def _write(self, work: Callable[[Connection], T]) -> T:
        with self._engine.begin() as conn:
            return work(conn)


def connections_of(database: AsyncEngine | Connections) -> Connections:
    """``database`` as :class:`Connections` (an engine is wrapped)."""
    return EngineConnections(database) if isinstance(database, AsyncEngine) else database
