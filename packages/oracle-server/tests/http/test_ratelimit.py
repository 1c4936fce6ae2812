"""Tests of oracle_server._http.ratelimit: the in-memory and Redis sliding-window limiters."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from oracle_server._http.ratelimit import (
    InMemoryRateLimiter,
    RateDecision,
    RateLimiter,
    RedisRateLimiter,
    create_rate_limiter,
)
from oracle_server.testing import redis_test_target


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def redis_target() -> Iterator[tuple[str, str]]:
    """A Redis URL and a key prefix unique to the test; its keys are deleted afterwards."""
    with redis_test_target("rl") as target:
        yield target.url, target.prefix


@pytest.fixture(params=["memory", "redis"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    """Every backend, so both pass the same behavioural tests."""
    if request.param == "memory":
        backend: RateLimiter = InMemoryRateLimiter()
    else:
        url, prefix = request.getfixturevalue("redis_target")
        backend = RedisRateLimiter(url, prefix=prefix)
    yield backend
    await backend.aclose()


# --- behaviour shared by every backend -------------------------------------------------------


async def test_allows_limit_hits_then_refuses(limiter: RateLimiter) -> None:
    decisions = [await limiter.hit("did:a", limit=3, window_seconds=60) for _ in range(4)]

    assert decisions[:3] == [
        RateDecision(allowed=True, remaining=2, retry_after=0),
        RateDecision(allowed=True, remaining=1, retry_after=0),
        RateDecision(allowed=True, remaining=0, retry_after=0),
    ]
    refused = decisions[3]
    assert not refused.allowed
    assert refused.remaining == 0
    assert 59 <= refused.retry_after <= 60


async def test_keys_are_independent(limiter: RateLimiter) -> None:
    assert (await limiter.hit("did:a", limit=1, window_seconds=60)).allowed
    assert not (await limiter.hit("did:a", limit=1, window_seconds=60)).allowed

    assert (await limiter.hit("did:b", limit=1, window_seconds=60)).allowed
    assert (await limiter.hit("10.0.0.1", limit=1, window_seconds=60)).allowed


async def test_refused_hits_are_not_counted(limiter: RateLimiter) -> None:
    # If refusals were recorded, the client would stay locked out longer than the window.
    for _ in range(5):
        await limiter.hit("did:a", limit=2, window_seconds=60)
    assert (await limiter.hit("did:a", limit=4, window_seconds=60)).allowed
    assert (await limiter.hit("did:a", limit=4, window_seconds=60)).allowed
    assert not (await limiter.hit("did:a", limit=4, window_seconds=60)).allowed


async def test_concurrent_hits_never_exceed_the_limit(limiter: RateLimiter) -> None:
    decisions = await asyncio.gather(
        *(limiter.hit("did:a", limit=10, window_seconds=60) for _ in range(50))
    )

    assert sum(decision.allowed for decision in decisions) == 10
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(10))
    assert all(d.retry_after >= 1 for d in decisions if not d.allowed)


@pytest.mark.parametrize(("limit", "window"), [(0, 60), (-1, 60), (10, 0)])
async def test_rejects_meaningless_limits(limiter: RateLimiter, limit: int, window: int) -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.bad_"):
        await limiter.hit("did:a", limit=limit, window_seconds=window)


# --- in memory -------------------------------------------------------------------------------


async def test_memory_window_slides() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(clock=clock)
    start = clock.now
    for offset in (0.0, 1.0, 2.0):
        clock.now = start + offset
        assert (await limiter.hit("k", limit=3, window_seconds=10)).allowed

    clock.now = start + 2.5
    assert await limiter.hit("k", limit=3, window_seconds=10) == RateDecision(
        allowed=False, remaining=0, retry_after=8
    )
    # Just before the first hit leaves the window, a second is still to wait (rounded up).
    clock.now = start + 9.9
    assert (await limiter.hit("k", limit=3, window_seconds=10)).retry_after == 1

    # The window slides: only the hit at +0 has left it, so exactly one slot frees.
    clock.now = start + 10.0
    assert await limiter.hit("k", limit=3, window_seconds=10) == RateDecision(
        allowed=True, remaining=0, retry_after=0
    )
    refused = await limiter.hit("k", limit=3, window_seconds=10)
    assert not refused.allowed
    assert refused.retry_after == 1  # the hit at +1 leaves at +11

    await limiter.aclose()


async def test_memory_shrunk_limit_waits_for_the_right_hit() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(clock=clock)
    start = clock.now
    for offset in (0.0, 4.0, 8.0):
        clock.now = start + offset
        await limiter.hit("k", limit=3, window_seconds=10)

    # With the limit now 2, the count drops below it once the hit at +4 leaves (at +14).
    decision = await limiter.hit("k", limit=2, window_seconds=10)
    assert not decision.allowed
    assert decision.retry_after == 6


async def test_memory_evicts_idle_keys() -> None:
    clock = FakeClock()
    limiter = InMemoryRateLimiter(clock=clock)
    start = clock.now
    await limiter.hit("a", limit=5, window_seconds=10)
    clock.now = start + 5
    await limiter.hit("b", limit=5, window_seconds=10)
    assert limiter.tracked_keys == 2

    clock.now = start + 10.5  # "a" has been idle for a whole window, "b" not yet
    await limiter.hit("c", limit=5, window_seconds=10)
    assert limiter.tracked_keys == 2

    clock.now = start + 100
    await limiter.hit("c", limit=5, window_seconds=10)
    assert limiter.tracked_keys == 1

    await limiter.aclose()
    assert limiter.tracked_keys == 0


async def test_memory_caps_the_number_of_keys() -> None:
    limiter = InMemoryRateLimiter(clock=FakeClock(), max_keys=2)
    for key in ("a", "b", "c"):
        assert (await limiter.hit(key, limit=1, window_seconds=60)).allowed

    assert limiter.tracked_keys == 2
    # The least recently hit key was dropped, so it starts afresh; the others are still limited.
    assert (await limiter.hit("a", limit=1, window_seconds=60)).allowed
    assert not (await limiter.hit("c", limit=1, window_seconds=60)).allowed


def test_memory_rejects_a_meaningless_key_cap() -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.bad_max_keys"):
        InMemoryRateLimiter(max_keys=0)


# --- Redis -----------------------------------------------------------------------------------


async def test_redis_window_slides(redis_target: tuple[str, str]) -> None:
    url, prefix = redis_target
    limiter = RedisRateLimiter(url, prefix=prefix)
    try:
        start = time.monotonic()
        assert (await limiter.hit("k", limit=2, window_seconds=1)).allowed
        await asyncio.sleep(0.5)
        assert (await limiter.hit("k", limit=2, window_seconds=1)).allowed
        refused = await limiter.hit("k", limit=2, window_seconds=1)
        assert not refused.allowed
        assert refused.retry_after == 1

        await asyncio.sleep(max(0.0, start + 1.1 - time.monotonic()))
        # Only the first hit has left the window: one slot, not a fresh bucket of two.
        assert (await limiter.hit("k", limit=2, window_seconds=1)).allowed
        assert not (await limiter.hit("k", limit=2, window_seconds=1)).allowed
    finally:
        await limiter.aclose()


async def test_redis_instances_share_the_count(redis_target: tuple[str, str]) -> None:
    url, prefix = redis_target
    replica_a = RedisRateLimiter(url, prefix=prefix)
    replica_b = RedisRateLimiter(url, prefix=prefix)
    try:
        assert (await replica_a.hit("did:a", limit=3, window_seconds=60)).remaining == 2
        assert (await replica_b.hit("did:a", limit=3, window_seconds=60)).remaining == 1
        assert (await replica_a.hit("did:a", limit=3, window_seconds=60)).remaining == 0
        assert not (await replica_b.hit("did:a", limit=3, window_seconds=60)).allowed
        assert not (await replica_a.hit("did:a", limit=3, window_seconds=60)).allowed
    finally:
        await replica_a.aclose()
        await replica_b.aclose()


async def test_redis_concurrent_hits_across_instances_are_atomic(
    redis_target: tuple[str, str],
) -> None:
    url, prefix = redis_target
    replicas = [RedisRateLimiter(url, prefix=prefix) for _ in range(2)]
    try:
        decisions = await asyncio.gather(
            *(replicas[n % 2].hit("did:a", limit=10, window_seconds=60) for n in range(50))
        )
        assert sum(decision.allowed for decision in decisions) == 10
    finally:
        for replica in replicas:
            await replica.aclose()


async def test_redis_hit_always_honours_the_callers_timeout(
    redis_target: tuple[str, str],
) -> None:
    # Timeouts land at random points, including inside the Redis call, where redis-py on
    # Python 3.11 can swallow the cancellation (CPython gh-86296).
    url, prefix = redis_target
    limiter = RedisRateLimiter(url, prefix=prefix)
    rng = random.Random(1234)

    async def hit_until_timeout() -> None:
        async with asyncio.timeout(rng.uniform(0.001, 0.01)):
            while True:
                await limiter.hit("did:a", limit=1_000_000, window_seconds=60)

    try:
        for attempt in range(150):
            hitting = asyncio.create_task(hit_until_timeout())
            done, _ = await asyncio.wait([hitting], timeout=2)
            if not done:
                hitting.cancel()
                pytest.fail(f"attempt {attempt}: the cancellation was lost")
            with pytest.raises(TimeoutError):
                hitting.result()
    finally:
        await limiter.aclose()


async def test_redis_keys_expire_with_their_window(redis_target: tuple[str, str]) -> None:
    url, prefix = redis_target
    limiter = RedisRateLimiter(url, prefix=prefix)
    client = Redis.from_url(url)
    try:
        await limiter.hit("did:a", limit=5, window_seconds=2)
        ttl_ms = await client.pttl(prefix + "did:a")
        assert 0 < ttl_ms <= 2000
    finally:
        await client.aclose()
        await limiter.aclose()


async def test_create_rate_limiter_picks_the_backend(redis_target: tuple[str, str]) -> None:
    url, prefix = redis_target
    in_memory = create_rate_limiter(None)
    shared = create_rate_limiter(url, prefix=prefix)
    try:
        assert isinstance(in_memory, InMemoryRateLimiter)
        assert isinstance(shared, RedisRateLimiter)
        assert (await shared.hit("did:a", limit=1, window_seconds=60)).allowed
        assert not (await shared.hit("did:a", limit=1, window_seconds=60)).allowed
    finally:
        await in_memory.aclose()
        await shared.aclose()
