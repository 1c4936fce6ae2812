"""The server database: URL resolution, engine setup and the stores over it (SRV-55/56)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Table, event, inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.schema import CreateIndex, CreateTable

from oracle_server._persistence.approvals import ApprovalStore
from oracle_server._persistence.blobs import SqlBlobStore
from oracle_server._persistence.delegations import DelegationStore, ReauthPrompts
from oracle_server._persistence.matrix_files import MatrixFileEvents
from oracle_server._persistence.replay import ReplayStore
from oracle_server._persistence.sessions import SessionStore
from oracle_server._persistence.tables import metadata

__all__ = [
    "Storage",
    "StorageKind",
    "configure_sqlite",
    "create_tables",
    "create_tables_sync",
    "database_url",
    "storage_kind",
]

StorageKind = Literal["sqlite", "postgresql"]

SQLITE_BUSY_TIMEOUT_MS = 5000
# Arbitrary constant: serialises table creation between replicas booting together.
_SCHEMA_LOCK_KEY = 0x6F72_6163_6C65
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def database_url(database_url: str | None, sqlite_path: str) -> str:
    """The SQLAlchemy async URL of the server database.

    Args:
        database_url: ``DATABASE_URL``; ``None`` or empty selects embedded SQLite.
            ``postgresql://`` and ``postgres://`` get the ``psycopg`` driver;
            ``sqlite:///…`` gets ``aiosqlite``. URLs that already name a driver pass.
        sqlite_path: ``SQLITE_DATABASE_PATH``; the SQLite file is ``<path>/oracle.db``
            and the directory is created.

    Raises:
        ValueError: for a scheme other than SQLite or PostgreSQL.
    """
    if not database_url:
        Path(sqlite_path).mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{sqlite_path}/oracle.db"
    scheme, separator, rest = database_url.partition("://")
    if not separator:
        raise ValueError(
            "persistence.bad_database_url: DATABASE_URL has no scheme; "
            "use postgresql://user@host:5432/db or sqlite:///path/oracle.db"
        )
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    if scheme.startswith(("postgresql+", "sqlite+")):
        return database_url
    raise ValueError(
        f"persistence.bad_database_url: unsupported scheme {scheme!r}; "
        "use postgresql://… (shared mode) or leave DATABASE_URL unset (embedded SQLite)"
    )


def storage_kind(url: str) -> StorageKind:
    """``"sqlite"`` or ``"postgresql"`` for a database URL.

    Raises:
        ValueError: for any other backend.
    """
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return "sqlite"
    if backend == "postgresql":
        return "postgresql"
    raise ValueError(f"persistence.dialect_unsupported: {backend!r}; use SQLite or PostgreSQL")


def configure_sqlite(engine: AsyncEngine) -> None:
    """Set WAL, ``busy_timeout`` and foreign keys on every new connection of ``engine``."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            # WAL lets readers run beside the writer; busy_timeout makes a writer wait
            # for the lock instead of failing (SRV-58).
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()


async def _create_tables(conn: AsyncConnection, kind: StorageKind, schema: str | None) -> None:
    if kind == "postgresql":
        # Replicas booting together would otherwise race on the catalogue even with
        # IF NOT EXISTS; the lock ends with the transaction.
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        if schema is not None:
            await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    await create_tables(conn, metadata.sorted_tables, schema)


def _column_names(sync: Connection, table: str, schema: str | None) -> set[str]:
    return {column["name"] for column in inspect(sync).get_columns(table, schema)}


async def create_tables(
    conn: AsyncConnection, tables: Sequence[Table], schema: str | None = None
) -> None:
    """Create missing tables and indexes, and add columns missing from existing tables.

    Migrations are additive (SRV-56): a column added to a definition is nullable, so an
    older database gains it with ``ALTER TABLE … ADD COLUMN`` and keeps every row.
    """
    await conn.run_sync(create_tables_sync, tables, schema)


def create_tables_sync(
    conn: Connection, tables: Sequence[Table], schema: str | None = None
) -> None:
    """:func:`create_tables` on a synchronous connection."""
    for table in tables:
        conn.execute(CreateTable(table, if_not_exists=True))
        present = _column_names(conn, table.name, schema)
        for column in table.columns:
            if column.name in present:
                continue
            if not column.nullable or column.primary_key:
                raise RuntimeError(
                    f"persistence.migration_unsupported: column {table.name}.{column.name} "
                    "is missing and not nullable; only nullable columns can be added"
                )
            column_type = column.type.compile(dialect=conn.dialect)
            target = f'"{schema}"."{table.name}"' if schema else f'"{table.name}"'
            conn.execute(text(f'ALTER TABLE {target} ADD COLUMN "{column.name}" {column_type}'))
        for index in sorted(table.indexes, key=lambda index: str(index.name)):
            conn.execute(CreateIndex(index, if_not_exists=True))


class Storage:
    """Owns the engine of the server database and the stores over it.

    Open with :meth:`open`; :meth:`close` disposes of the engine.

    Attributes:
        engine: The SQLAlchemy async engine.
        kind: ``"sqlite"`` (embedded) or ``"postgresql"`` (shared).
        url: The URL it was opened with; it may hold a password, so never log it.
        schema: The PostgreSQL schema of the tables, ``None`` for the default.
        sessions: Chat sessions.
        delegations: Stored delegations and revocations.
        replay: UCAN replay protection (an ``oracle_ucan.InvocationStore``).
        blobs: The blob store (an ``oracle_core.BlobStore``).
        reauth: Re-authorisation prompt throttle.
        matrix_files: The last Matrix upload of each backed-up user file.
        approvals: Tool approval requests and their decisions (plugins spec §20.2).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        kind: StorageKind,
        *,
        url: str,
        schema: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.kind: StorageKind = kind
        self.url = url
        self.schema = schema
        self.sessions = SessionStore(engine, clock=clock)
        self.delegations = DelegationStore(engine, clock=clock)
        self.replay = ReplayStore(engine, clock=clock)
        self.blobs = SqlBlobStore(engine, clock=clock)
        self.reauth = ReauthPrompts(engine, clock=clock)
        self.matrix_files = MatrixFileEvents(engine)
        self.approvals = ApprovalStore(engine, clock=clock)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        schema: str | None = None,
        clock: Callable[[], float] = time.time,
        pool_size: int = 10,
        pool_timeout: float = 30.0,
    ) -> Storage:
        """Connect and create any missing table; safe to call on an existing database.

        Args:
            url: An async URL, as returned by :func:`database_url`.
            schema: PostgreSQL only: keep every table in this schema (created if
                missing) instead of the connection's default.
            clock: Unix time in seconds, for every store (tests inject one).
            pool_size: Connections kept open (``DATABASE_POOL_SIZE``); as many again may
                be opened for a burst.
            pool_timeout: Seconds a query waits for a free connection before it fails
                with ``sqlalchemy.exc.TimeoutError`` (``DATABASE_POOL_TIMEOUT_SECONDS``).

        Raises:
            ValueError: for an unsupported backend, a bad schema name, or a schema with
                SQLite.
        """
        kind = storage_kind(url)
        options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": pool_size,
            "pool_timeout": pool_timeout,
        }
        if schema is not None:
            if kind != "postgresql":
                raise ValueError("persistence.schema_unsupported: schema= needs PostgreSQL")
            if _SCHEMA_NAME.fullmatch(schema) is None:
                raise ValueError(f"persistence.bad_schema: {schema!r} is not a plain identifier")
            options["execution_options"] = {"schema_translate_map": {None: schema}}
        if kind == "sqlite":
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        else:
            # Connections dropped by the server or a proxy are replaced, not handed out.
            options["pool_pre_ping"] = True
        engine = create_async_engine(url, **options)
        if kind == "sqlite":
            configure_sqlite(engine)
        try:
            async with engine.begin() as conn:
                await _create_tables(conn, kind, schema)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, kind, url=url, schema=schema, clock=clock)

    async def close(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()
