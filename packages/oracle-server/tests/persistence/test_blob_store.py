"""Blob store on SQL: ids, per-user scoping, TTL and clamping (SRV-59)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from oracle_core import BlobStore
from oracle_server._persistence import Storage
from oracle_server._persistence.tables import blobs

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"


async def count_rows(storage: Storage) -> int:
    """Rows in ``blobs``, expired ones included."""
    async with storage.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(blobs))).scalar_one())


async def test_put_then_get_returns_the_blob(storage: Storage) -> None:
    store: BlobStore = storage.blobs
    blob_id = await store.put(user_did=ALICE, name="ucan_invocation", value="car-bytes")
    assert store.is_valid_blob_id(blob_id)

    blob = await store.get(user_did=ALICE, blob_id=blob_id)
    assert blob is not None
    assert (blob.blob_id, blob.user_did, blob.name, blob.value) == (
        blob_id,
        ALICE,
        "ucan_invocation",
        "car-bytes",
    )


async def test_ids_are_unique(storage: Storage) -> None:
    ids = {await storage.blobs.put(user_did=ALICE, name="n", value="v") for _ in range(20)}
    assert len(ids) == 20


async def test_another_users_blob_is_invisible(storage: Storage) -> None:
    blob_id = await storage.blobs.put(user_did=ALICE, name="n", value="v")
    assert await storage.blobs.get(user_did=BOB, blob_id=blob_id) is None


async def test_default_ttl_is_an_hour(
    storage: Storage, clock: Callable[[], float], advance_clock: Callable[[float], None]
) -> None:
    blob_id = await storage.blobs.put(user_did=ALICE, name="n", value="v")
    blob = await storage.blobs.get(user_did=ALICE, blob_id=blob_id)
    assert blob is not None
    assert blob.expires_at == clock() + 3600
    advance_clock(3599)
    assert await storage.blobs.get(user_did=ALICE, blob_id=blob_id) is not None
    advance_clock(1)
    assert await storage.blobs.get(user_did=ALICE, blob_id=blob_id) is None


@pytest.mark.parametrize(("ttl", "lifetime"), [(10**7, 86400), (0, 1), (-5, 1), (120, 120)])
async def test_ttl_is_clamped(
    storage: Storage, clock: Callable[[], float], ttl: int, lifetime: int
) -> None:
    blob_id = await storage.blobs.put(user_did=ALICE, name="n", value="v", ttl_seconds=ttl)
    blob = await storage.blobs.get(user_did=ALICE, blob_id=blob_id)
    assert blob is not None
    assert blob.expires_at == clock() + lifetime


async def test_unknown_and_malformed_ids_miss(storage: Storage) -> None:
    assert await storage.blobs.get(user_did=ALICE, blob_id="blob_0123456789abcdef") is None
    assert await storage.blobs.get(user_did=ALICE, blob_id="not-a-blob") is None


async def test_blob_id_shape(storage: Storage) -> None:
    assert storage.blobs.is_valid_blob_id("blob_0123456789abcdef")
    assert not storage.blobs.is_valid_blob_id("blob_0123456789ABCDEF")
    assert not storage.blobs.is_valid_blob_id("blob_0123456789abcde")
    assert not storage.blobs.is_valid_blob_id("blob_0123456789abcdef0")
    assert not storage.blobs.is_valid_blob_id("0123456789abcdef")


async def test_a_user_is_required(storage: Storage) -> None:
    with pytest.raises(ValueError, match=r"blobs\.user_required"):
        await storage.blobs.put(user_did="", name="n", value="v")


async def test_expired_blobs_are_swept_when_storing(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.blobs.put(user_did=ALICE, name="n", value="v", ttl_seconds=10)
    await storage.blobs.put(user_did=BOB, name="n", value="v", ttl_seconds=100)
    advance_clock(10)
    await storage.blobs.put(user_did=ALICE, name="n", value="v")
    assert await count_rows(storage) == 2
