"""Fixtures of the embedded store tests: a real store in ``tmp_path`` and two users."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle_plugins.vfs._local import LocalVfs, LocalVfsStore

ALICE = "did:ixo:alice"
BOB = "did:ixo:bob"
BASE_URL = "https://oracle.test"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalVfsStore]:
    """A store rooted in the test's own folder, closed afterwards."""
    with LocalVfsStore(tmp_path / "vfs") as opened:
        yield opened


@pytest.fixture
def vfs(store: LocalVfsStore) -> LocalVfs:
    """Alice's files."""
    return store.for_user(ALICE, public_base_url=BASE_URL)


@pytest.fixture
def bob(store: LocalVfsStore) -> LocalVfs:
    """Bob's files, in the same store."""
    return store.for_user(BOB, public_base_url=BASE_URL)


@pytest.fixture
def alice_root(store: LocalVfsStore, vfs: LocalVfs) -> Path:
    """Where Alice's ``/`` is on disk: ``users/<sha256 of her DID>/files``."""
    return store.root / "users" / hashlib.sha256(ALICE.encode()).hexdigest() / "files"
