"""Storage backends for the persistence conformance suite.

Every test that takes ``storage`` (or a fixture built on ``backend``) runs once per
backend: SQLite in a temporary directory, and PostgreSQL at ``ORACLE_TEST_DATABASE_URL``
in a schema of its own that is dropped afterwards. Without that variable the PostgreSQL
runs are skipped with a reason naming it; ``.ci/run`` sets it, so CI skips nothing.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from oracle_server._persistence import (
    CheckpointerFactory,
    Storage,
    StorageKind,
    database_url,
    open_checkpointers,
)

PG_URL_ENV = "ORACLE_TEST_DATABASE_URL"
# One prefix per test run; each test adds a counter, so runs and tests never share.
RUN_SCHEMA_PREFIX = f"oracle_test_{secrets.token_hex(4)}"
_schema_numbers = itertools.count()


@dataclass(frozen=True)
class Backend:
    """Where one parametrisation keeps its data."""

    kind: StorageKind
    url: str
    schema: str | None
    data_path: Path

    @property
    def checkpoint_target(self) -> str:
        """What ``open_checkpointers`` takes for this backend."""
        return str(self.data_path) if self.kind == "sqlite" else self.url


class FakeClock:
    """Unix time that only moves when a test says so."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _drop_schemas(url: str, like: str) -> None:
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (like,)
            ).fetchall()
        ]
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _drop_run_schemas() -> Iterator[None]:
    """At the end of the run, drop any schema of this run that a test left behind."""
    yield
    url = os.environ.get(PG_URL_ENV)
    if url:
        _drop_schemas(database_url(url, ""), f"{RUN_SCHEMA_PREFIX}\\_%")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each storage backend in turn; PostgreSQL gets a fresh schema per test."""
    data_path = tmp_path / "data"
    if request.param == "sqlite":
        yield Backend("sqlite", database_url(None, str(data_path)), None, data_path)
        return
    raw_url = os.environ.get(PG_URL_ENV)
    if not raw_url:
        pytest.skip(
            f"PostgreSQL backend: set {PG_URL_ENV} "
            "(e.g. postgresql+psycopg://root@127.0.0.1:5432/test) to run it"
        )
    request.getfixturevalue("_drop_run_schemas")
    url = database_url(raw_url, "")
    schema = f"{RUN_SCHEMA_PREFIX}_{next(_schema_numbers)}"
    yield Backend("postgresql", url, schema, data_path)
    _drop_schemas(url, schema)


@pytest.fixture
def clock() -> FakeClock:
    """The clock every store of the test reads."""
    return FakeClock()


@pytest.fixture
def advance_clock(clock: FakeClock) -> Callable[[float], None]:
    """Move the test clock forward by some seconds."""

    def advance(seconds: float) -> None:
        clock.now += seconds

    return advance


@pytest.fixture
def storage_kind(backend: Backend) -> StorageKind:
    """``"sqlite"`` or ``"postgresql"``."""
    return backend.kind


@pytest.fixture
def data_path(backend: Backend) -> Path:
    """``SQLITE_DATABASE_PATH`` of the test."""
    return backend.data_path


@pytest.fixture
async def open_storage(
    backend: Backend, clock: FakeClock
) -> AsyncIterator[Callable[[], Awaitable[Storage]]]:
    """Open another ``Storage`` on the test's database; all are closed afterwards."""
    opened: list[Storage] = []

    async def open_one() -> Storage:
        storage = await Storage.open(backend.url, schema=backend.schema, clock=clock)
        opened.append(storage)
        return storage

    yield open_one
    for storage in opened:
        await storage.close()


@pytest.fixture
async def storage(open_storage: Callable[[], Awaitable[Storage]]) -> Storage:
    """The storage under test."""
    return await open_storage()


@pytest.fixture
async def open_checkpointer_factory(
    backend: Backend,
) -> AsyncIterator[Callable[[], Awaitable[CheckpointerFactory]]]:
    """Open the backend's checkpointer factory; every one opened is closed afterwards."""
    opened: list[CheckpointerFactory] = []

    async def open_one() -> CheckpointerFactory:
        factory = await open_checkpointers(
            backend.kind, backend.checkpoint_target, schema=backend.schema
        )
        opened.append(factory)
        return factory

    yield open_one
    for factory in opened:
        await factory.aclose()
