"""Backend-specific tests of the turn locks (the shared contract is in
``test_locks_conformance.py``): memory bookkeeping, and Redis across replicas, with leases
that are renewed, that expire after a crash, and cancellations that leave nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import pytest
from redis.asyncio import Redis

from oracle_server._turns.locks import (
    InMemoryTurnLocks,
    RedisTurnLocks,
    TurnBusy,
    TurnLocks,
    create_turn_locks,
)
from oracle_server.testing import redis_test_target

# A replica in its own process: takes the turn, reports it, then runs until killed.
_CRASHING_REPLICA = """
import asyncio, sys
from oracle_server._turns.locks import RedisTurnLocks

async def main() -> None:
    locks = RedisTurnLocks(sys.argv[1], prefix=sys.argv[2], lease_seconds=1)
    async with locks.hold("s", wait=False):
        print("held", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


@pytest.fixture
def redis_target() -> Iterator[tuple[str, str]]:
    """A Redis URL and a key prefix unique to the test; its keys are deleted afterwards."""
    with redis_test_target("turn") as target:
        yield target.url, target.prefix


@pytest.fixture
async def replicas(redis_target: tuple[str, str]) -> AsyncIterator[tuple[RedisTurnLocks, ...]]:
    """Two replicas' locks with their own Redis clients and a one-second lease."""
    url, prefix = redis_target
    pair = (
        RedisTurnLocks(url, prefix=prefix, lease_seconds=1),
        RedisTurnLocks(url, prefix=prefix, lease_seconds=1),
    )
    yield pair
    for replica in pair:
        await replica.aclose()


async def take(locks: TurnLocks, session_id: str, *, wait: bool, patience: float = 5) -> None:
    """Take the turn and give it back straight away."""
    async with locks.hold(session_id, wait=wait, timeout=patience):
        pass


async def fail_inside(locks: TurnLocks, session_id: str) -> None:
    async with locks.hold(session_id, wait=False):
        raise RuntimeError("boom")


# --- in memory -------------------------------------------------------------------------------


async def test_memory_leaves_no_entries_behind() -> None:
    locks = InMemoryTurnLocks()
    async with locks.hold("a", wait=False):
        waiter = asyncio.create_task(take(locks, "a", wait=True))
        timed_out = asyncio.create_task(take(locks, "a", wait=True, patience=0.01))
        async with locks.hold("b", wait=False):
            assert locks.tracked_sessions == 2
        with pytest.raises(TimeoutError):
            await timed_out
    with pytest.raises(RuntimeError, match="boom"):
        await fail_inside(locks, "c")
    with pytest.raises(TurnBusy):
        await take(locks, "a", wait=False)  # the waiter still queues on "a"
    await waiter

    assert locks.tracked_sessions == 0


# --- Redis: two replicas ---------------------------------------------------------------------


async def test_redis_reject_is_enforced_across_replicas(
    replicas: tuple[RedisTurnLocks, ...],
) -> None:
    first, second = replicas
    async with first.hold("s", wait=False):
        assert await second.is_held("s")
        with pytest.raises(TurnBusy):
            await take(second, "s", wait=False)
    assert not await second.is_held("s")
    await take(second, "s", wait=False)


async def test_redis_waiter_on_another_replica_proceeds_once_released(
    replicas: tuple[RedisTurnLocks, ...],
) -> None:
    first, second = replicas
    acquired = asyncio.Event()

    async def second_turn() -> None:
        async with second.hold("s", wait=True, timeout=5):
            acquired.set()

    async with first.hold("s", wait=False):
        waiter = asyncio.create_task(second_turn())
        await asyncio.sleep(0.3)  # several polls of Redis
        assert not acquired.is_set()

    # It polls every POLL_SECONDS, far within its timeout.
    await asyncio.wait_for(waiter, 5)
    assert acquired.is_set()


async def test_redis_renewal_keeps_a_long_turn_exclusive(
    redis_target: tuple[str, str], replicas: tuple[RedisTurnLocks, ...]
) -> None:
    url, prefix = redis_target
    first, second = replicas
    client = Redis.from_url(url)
    try:
        async with first.hold("s", wait=False):
            # Two and a half leases: without renewal the lock would be gone after one.
            for _ in range(5):
                await asyncio.sleep(0.5)
                with pytest.raises(TurnBusy):
                    await take(second, "s", wait=False)
                assert 0 < await client.pttl(prefix + "s") <= 1000
        await take(second, "s", wait=False)
    finally:
        await client.aclose()


async def test_redis_crashed_holder_frees_the_turn_after_its_lease(
    redis_target: tuple[str, str], replicas: tuple[RedisTurnLocks, ...]
) -> None:
    url, prefix = redis_target
    _, survivor = replicas
    crashing = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CRASHING_REPLICA, url, prefix, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert crashing.stdout is not None
        assert await asyncio.wait_for(crashing.stdout.readline(), 15) == b"held\n"
        # The other process renews its lease while alive.
        await asyncio.sleep(1.5)
        with pytest.raises(TurnBusy):
            await take(survivor, "s", wait=False)
    finally:
        crashing.kill()
        await crashing.wait()

    # Killed without releasing: the turn frees when the one-second lease runs out, well
    # within the waiter's patience (it would never free without the lease).
    await take(survivor, "s", wait=True, patience=5)
    assert not await survivor.is_held("s")


async def test_redis_expired_holder_never_releases_or_renews_the_new_holders_lock(
    redis_target: tuple[str, str],
    replicas: tuple[RedisTurnLocks, ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, prefix = redis_target
    first, second = replicas
    key = prefix + "s"
    client = Redis.from_url(url)
    try:
        async with AsyncExitStack() as first_turn, AsyncExitStack() as second_turn:
            await first_turn.enter_async_context(first.hold("s", wait=False))
            await client.delete(key)  # the first holder's lease ran out (e.g. a long pause)
            await second_turn.enter_async_context(second.hold("s", wait=False))
            second_token = await client.get(key)
            assert second_token is not None

            with caplog.at_level(logging.ERROR, logger="oracle_server._turns.locks"):
                await asyncio.sleep(0.5)  # the first holder's renewal runs and finds it lost
            assert "turn.lease_lost" in caplog.text

            await first_turn.aclose()
            assert await client.get(key) == second_token
            with pytest.raises(TurnBusy):
                await take(first, "s", wait=False)

            await second_turn.aclose()
            assert not await client.exists(key)
    finally:
        await client.aclose()


async def test_redis_waiter_always_honours_the_callers_timeout(
    replicas: tuple[RedisTurnLocks, ...],
) -> None:
    # Timeouts land at random points of the polling loop, including inside Redis calls,
    # where redis-py on Python 3.11 can swallow the cancellation (CPython gh-86296).
    first, second = replicas
    rng = random.Random(1234)

    async def wait_briefly() -> None:
        async with asyncio.timeout(rng.uniform(0.001, 0.03)):
            await take(second, "s", wait=True)

    async with first.hold("s", wait=False):
        for attempt in range(150):
            waiter = asyncio.create_task(wait_briefly())
            done, _ = await asyncio.wait([waiter], timeout=2)
            if not done:
                waiter.cancel()
                pytest.fail(f"attempt {attempt}: the timed-out waiter kept polling")
            with pytest.raises(TimeoutError):
                waiter.result()
    # No waiter took the turn behind the holder's back or left a token behind.
    assert not await second.is_held("s")


async def test_redis_cancelled_acquisition_leaves_no_lock_behind(
    replicas: tuple[RedisTurnLocks, ...],
) -> None:
    # Cancellations land at random points of taking a free turn, some after Redis has
    # already stored the token: the token must be deleted, not left to block for a lease.
    _, locks = replicas
    rng = random.Random(1234)
    for attempt in range(100):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(rng.uniform(0, 0.003)):
                await take(locks, "s", wait=False)
        # A release cut short by the timeout finishes in the background (it is shielded);
        # give it well under the one-second lease a leaked token would keep.
        for _ in range(50):
            if not await locks.is_held("s"):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail(f"attempt {attempt} left the turn held")


async def test_redis_leaves_no_keys_behind(
    redis_target: tuple[str, str], replicas: tuple[RedisTurnLocks, ...]
) -> None:
    url, prefix = redis_target
    first, second = replicas
    async with first.hold("a", wait=False):
        timed_out = asyncio.create_task(take(second, "a", wait=True, patience=0.1))
        with pytest.raises(TimeoutError):
            await timed_out
    with pytest.raises(RuntimeError, match="boom"):
        await fail_inside(second, "b")

    client = Redis.from_url(url)
    try:
        assert [key async for key in client.scan_iter(match=prefix + "*")] == []
    finally:
        await client.aclose()


def test_redis_rejects_a_meaningless_lease() -> None:
    with pytest.raises(ValueError, match=r"turnlock\.bad_lease"):
        RedisTurnLocks("redis://127.0.0.1:6379/0", lease_seconds=0)


async def test_create_turn_locks_picks_the_backend(redis_target: tuple[str, str]) -> None:
    url, prefix = redis_target
    in_memory = create_turn_locks(None)
    shared = create_turn_locks(url, prefix=prefix, lease_seconds=5)
    try:
        assert isinstance(in_memory, InMemoryTurnLocks)
        assert isinstance(shared, RedisTurnLocks)
        async with shared.hold("s", wait=False):
            assert await shared.is_held("s")
    finally:
        await in_memory.aclose()
        await shared.aclose()
