"""URL resolution and ``Storage.open`` (SRV-55/56)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from oracle_server._persistence import (
    SessionRecord,
    Storage,
    StorageKind,
    database_url,
)
from oracle_server._persistence import storage_kind as storage_kind_of

TABLES = {
    "blobs",
    "matrix_file_events",
    "oracle_sessions",
    "reauth_prompts",
    "revoked_delegations",
    "ucan_replay",
    "user_delegations",
}


def test_unset_url_means_sqlite_under_the_data_path(tmp_path: Path) -> None:
    data = tmp_path / "nested" / "data"
    assert database_url(None, str(data)) == f"sqlite+aiosqlite:///{data}/oracle.db"
    assert database_url("", str(data)) == f"sqlite+aiosqlite:///{data}/oracle.db"
    assert data.is_dir()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@db:5432/oracle", "postgresql+psycopg://u@db:5432/oracle"),
        ("postgres://u@db/oracle", "postgresql+psycopg://u@db/oracle"),
        ("postgresql+psycopg://u@db/oracle", "postgresql+psycopg://u@db/oracle"),
        ("sqlite:////var/data/oracle.db", "sqlite+aiosqlite:////var/data/oracle.db"),
        ("sqlite+aiosqlite:///rel.db", "sqlite+aiosqlite:///rel.db"),
    ],
)
def test_database_urls_get_async_drivers(given: str, expected: str) -> None:
    assert database_url(given, "/unused") == expected


@pytest.mark.parametrize("given", ["mysql://u@db/oracle", "no-scheme"])
def test_other_databases_are_refused(given: str) -> None:
    with pytest.raises(ValueError, match=r"persistence\.bad_database_url"):
        database_url(given, "/unused")


def test_storage_kind_follows_the_url() -> None:
    assert storage_kind_of("sqlite+aiosqlite:///x.db") == "sqlite"
    assert storage_kind_of("postgresql+psycopg://u@h/db") == "postgresql"
    with pytest.raises(ValueError, match=r"persistence\.dialect_unsupported"):
        storage_kind_of("mysql+aiomysql://u@h/db")


async def test_schema_needs_postgresql(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"persistence\.schema_unsupported"):
        await Storage.open(database_url(None, str(tmp_path)), schema="elsewhere")


async def test_schema_must_be_a_plain_identifier() -> None:
    with pytest.raises(ValueError, match=r"persistence\.bad_schema"):
        await Storage.open("postgresql+psycopg://u@127.0.0.1/db", schema='x"; DROP TABLE y')


async def test_open_creates_every_table(storage: Storage) -> None:
    async with storage.engine.connect() as conn:
        names = await conn.run_sync(
            lambda sync_conn: set(inspect(sync_conn).get_table_names(schema=storage.schema))
        )
    assert names >= TABLES


async def test_open_is_idempotent_and_keeps_data(
    open_storage: Callable[[], Awaitable[Storage]], storage_kind: StorageKind
) -> None:
    first = await open_storage()
    assert first.kind == storage_kind
    assert storage_kind_of(first.url) == storage_kind
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = SessionRecord("s-1", "did:key:alice", None, now, now, "Oracle", None, None)
    await first.sessions.create(record)
    await first.close()

    second = await open_storage()
    third = await open_storage()
    assert await second.sessions.get("did:key:alice", "s-1") == record
    assert await third.sessions.get("did:key:alice", "s-1") == record


async def test_data_lands_where_configured(
    storage: Storage, storage_kind: StorageKind, data_path: Path
) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    await storage.sessions.create(
        SessionRecord("s-1", "did:key:alice", None, now, now, "Oracle", None, None)
    )
    async with storage.engine.connect() as conn:
        if storage_kind == "sqlite":
            # Embedded mode: one file under SQLITE_DATABASE_PATH, WAL, waits on locks.
            assert (data_path / "oracle.db").is_file()
            journal = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar_one()
            foreign_keys = (await conn.execute(text("PRAGMA foreign_keys"))).scalar_one()
            assert (journal, busy, foreign_keys) == ("wal", 5000, 1)
        else:
            # Shared mode with a schema: the rows are in that schema, not the default one.
            assert storage.schema is not None
            count = (
                await conn.execute(text(f'SELECT count(*) FROM "{storage.schema}".oracle_sessions'))
            ).scalar_one()
            assert count == 1
