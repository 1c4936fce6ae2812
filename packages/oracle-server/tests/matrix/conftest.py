"""Fixtures of the Matrix layer tests: a real Synapse homeserver on loopback.

`synapse` is one homeserver for the whole session, from `oracle_server.testing`.
Its virtualenv is built on first use into ``.tools/synapse-<version>`` (a package registry
must be reachable then; ``ORACLE_SYNAPSE_VENV`` moves it). Without it these tests fail,
they never skip. Tests share the homeserver, so they register users with `new_user`,
which picks fresh localparts; a test that crashes or reconfigures a homeserver starts its
own `Synapse`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from oracle_server.testing import RegisteredUser, Synapse


def fresh_localpart(prefix: str) -> str:
    """A localpart no other test of the session uses, e.g. ``alice-1f3a9c0e``."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """A started homeserver for the session, stopped at its end (pytest keeps its data)."""
    with Synapse(data_dir=tmp_path_factory.mktemp("synapse")) as server:
        yield server


@pytest.fixture
def new_user(synapse: Synapse) -> Callable[[str], RegisteredUser]:
    """Registers users with fresh localparts and the password ``<localpart>-password``."""

    def register(prefix: str) -> RegisteredUser:
        localpart = fresh_localpart(prefix)
        return synapse.register(localpart, f"{localpart}-password")

    return register
