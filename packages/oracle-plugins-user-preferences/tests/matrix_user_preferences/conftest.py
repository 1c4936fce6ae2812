"""A real Synapse homeserver for the user-preferences tests against the Matrix layer.

`synapse` is one homeserver for the session, from `oracle_server.testing` (its
virtualenv is built on first use into ``.tools/synapse-<version>``; a package registry
must be reachable then, ``ORACLE_SYNAPSE_VENV`` moves it). Without it these tests fail,
they never skip.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from oracle_server.testing import (
    BlocksyncDouble,
    OracleAccount,
    RegisteredUser,
    Synapse,
    provision_oracle,
)


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """A started homeserver for the session, stopped at its end."""
    with Synapse(data_dir=tmp_path_factory.mktemp("prefs-synapse")) as server:
        yield server


@pytest.fixture
def new_user(synapse: Synapse) -> Callable[[str], RegisteredUser]:
    """Registers users with fresh localparts (tests share the homeserver)."""

    def register(prefix: str) -> RegisteredUser:
        localpart = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return synapse.register(localpart, f"{localpart}-password")

    return register


@pytest.fixture
async def account(synapse: Synapse, new_user: Callable[[str], RegisteredUser]) -> OracleAccount:
    """The oracle's Matrix account with its account room provisioned."""
    return await provision_oracle(synapse, new_user("oracle"))


@pytest.fixture
async def blocksync() -> AsyncIterator[BlocksyncDouble]:
    """Blocksync serving the users' ``did:ixo`` documents."""
    async with BlocksyncDouble() as double:
        yield double
    assert double.violations == []
