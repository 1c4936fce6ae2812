"""UCAN replay store on SQL: single use, expiry and atomic claims across engines (UCAN-34)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sqlalchemy import func, select

from oracle_server._persistence import Storage
from oracle_server._persistence.tables import ucan_replay
from oracle_ucan import InvocationStore

CID = "bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"


async def count_rows(storage: Storage) -> int:
    """Rows in ``ucan_replay``, expired ones included."""
    async with storage.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(ucan_replay))).scalar_one())


async def test_is_an_invocation_store(storage: Storage) -> None:
    store: InvocationStore = storage.replay
    assert await store.claim(CID, 60) is True
    assert await store.has(CID) is True


async def test_unknown_cid_is_not_recorded(storage: Storage) -> None:
    assert await storage.replay.has(CID) is False


async def test_add_records_until_the_ttl_passes(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.replay.add(CID, 60)
    advance_clock(59)
    assert await storage.replay.has(CID) is True
    advance_clock(1)
    assert await storage.replay.has(CID) is False


async def test_claim_wins_once_until_expiry(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    assert await storage.replay.claim(CID, 60) is True
    assert await storage.replay.claim(CID, 60) is False
    advance_clock(60)
    assert await storage.replay.claim(CID, 60) is True
    assert await storage.replay.claim(CID, 60) is False


async def test_claim_after_add_loses(storage: Storage) -> None:
    await storage.replay.add(CID, 60)
    assert await storage.replay.claim(CID, 60) is False


async def test_add_replaces_the_expiry(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.replay.add(CID, 10)
    await storage.replay.add(CID, 100)
    advance_clock(50)
    assert await storage.replay.has(CID) is True


async def test_ttl_is_capped_at_a_day(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.replay.add(CID, 10 * 24 * 3600)
    advance_clock(24 * 3600 - 1)
    assert await storage.replay.has(CID) is True
    advance_clock(1)
    assert await storage.replay.has(CID) is False


async def test_ttl_is_at_least_a_second(storage: Storage) -> None:
    assert await storage.replay.claim(CID, 0) is True
    assert await storage.replay.has(CID) is True


async def test_cleanup_drops_only_expired_rows(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.replay.add("short", 10)
    await storage.replay.add("long", 100)
    advance_clock(10)
    assert await storage.replay.cleanup() == 1
    assert await count_rows(storage) == 1
    assert await storage.replay.has("long") is True


async def test_expired_rows_are_swept_hourly_on_write(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    await storage.replay.add("short", 10)
    advance_clock(3600)
    await storage.replay.add("fresh", 10)
    assert await count_rows(storage) == 1


async def test_concurrent_claims_on_one_storage_win_once(storage: Storage) -> None:
    for index in range(3):
        cid = f"{CID}-{index}"
        results = await asyncio.gather(*(storage.replay.claim(cid, 60) for _ in range(20)))
        assert results.count(True) == 1


async def test_concurrent_claims_across_two_engines_win_once(
    open_storage: Callable[[], Awaitable[Storage]],
) -> None:
    first, second = await open_storage(), await open_storage()
    assert first.engine is not second.engine
    for index in range(3):
        cid = f"{CID}-{index}"
        results = await asyncio.gather(
            *(store.replay.claim(cid, 60) for store in [first, second] * 10)
        )
        assert results.count(True) == 1
        assert await second.replay.has(cid) is True
