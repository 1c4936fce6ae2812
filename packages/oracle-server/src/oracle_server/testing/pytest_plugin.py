"""Pytest fixtures of the server's testing kit: a real Matrix homeserver and what stands around it.

Activate them with ``pytest_plugins = ["oracle_server.testing.pytest_plugin"]`` in the
root ``conftest.py`` of a test suite (this repository's does); the async fixtures need
pytest-asyncio. Nothing starts until a test asks for a fixture:

- `synapse`: one `Synapse` for the whole session, started on first use. Its virtualenv is
  built on first use into ``.tools/synapse-<version>`` (a package registry must be
  reachable then; ``ORACLE_SYNAPSE_VENV`` moves it). Without it the tests that use it
  fail, they never skip.
- `own_synapse`: a homeserver of the test's own, which it may stop, freeze, kill and
  restart.
- `new_user`: registers users on `synapse` with fresh localparts (tests share it).
- `oracle_account`: an oracle's Matrix user with its account room provisioned.
- `blocksync`: Blocksync serving the users' ``did:ixo`` documents; a test fails if it
  answered a query that Blocksync would have refused.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from oracle_server.testing._blocksync import BlocksyncDouble
from oracle_server.testing._matrix import NewUser, OracleAccount, fresh_localpart, provision_oracle
from oracle_server.testing._synapse import RegisteredUser, Synapse

__all__ = ["blocksync", "new_user", "oracle_account", "own_synapse", "synapse"]


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """A homeserver for the session, stopped at its end (pytest keeps its data).

    Tests share it: register users with `new_user`; a test that stops or reconfigures a
    homeserver takes `own_synapse` instead.
    """
    with Synapse(data_dir=tmp_path_factory.mktemp("synapse")) as server:
        yield server


@pytest.fixture
def own_synapse(tmp_path: Path) -> Iterator[Synapse]:
    """A homeserver of this test's own, which it may stop, freeze (SIGSTOP) and kill."""
    server = Synapse(data_dir=tmp_path / "synapse")
    server.start()
    try:
        yield server
    finally:
        if server.pid is not None:
            # A frozen process would take SIGTERM only once continued.
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, signal.SIGCONT)
        server.close()


@pytest.fixture
def new_user(synapse: Synapse) -> NewUser:
    """``new_user(prefix)``: a user on `synapse` with a fresh localpart and the password
    ``<localpart>-password``."""

    def register(prefix: str) -> RegisteredUser:
        localpart = fresh_localpart(prefix)
        return synapse.register(localpart, f"{localpart}-password")

    return register


@pytest_asyncio.fixture
async def oracle_account(synapse: Synapse) -> OracleAccount:
    """A new oracle user on `synapse` with its account room and signing mnemonic."""
    return await provision_oracle(synapse)


@pytest_asyncio.fixture
async def blocksync() -> AsyncIterator[BlocksyncDouble]:
    """Blocksync's GraphQL endpoint; the test fails if a query broke its rules."""
    async with BlocksyncDouble() as double:
        yield double
    assert double.violations == []
