"""The rate limiter's contract, run against every backend: memory, and Redis.

The Redis limiter runs with ``ORACLE_TEST_REDIS_URL`` (otherwise its cases skip, naming the
variable). Both backends take their timestamps from ``time.time()`` (``limits`` does), so
time-machine moves the clock of either without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import time_machine

from oracle_server._http.ratelimit import (
    InMemoryRateLimiter,
    RateDecision,
    RateLimiter,
    RedisRateLimiter,
)
from oracle_server._http.ratelimit.hub import HubRateLimiter
from oracle_server.testing import connected_workers, redis_test_target

START = 1_800_000_000.0


@pytest.fixture(params=["memory", "redis", "hub"])
async def limiter(request: pytest.FixtureRequest) -> AsyncIterator[RateLimiter]:
    """Every backend, so all pass the same behavioural tests."""
    backend: RateLimiter
    if request.param == "memory":
        backend = InMemoryRateLimiter()
        yield backend
        await backend.aclose()
        return
    if request.param == "hub":
        async with connected_workers(1) as (_, [worker]):
            backend = HubRateLimiter(worker)
            yield backend
            await backend.aclose()
        return
    with redis_test_target("rl") as target:
        backend = RedisRateLimiter(target.url, prefix=target.prefix)
        yield backend
        await backend.aclose()


@pytest.fixture
def clock() -> Iterator[time_machine.Traveller]:
    """The wall clock, stopped at ``START``; ``clock.move_to(START + s)`` moves it."""
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


async def test_allows_limit_hits_then_refuses(limiter: RateLimiter) -> None:
    decisions = [await limiter.hit("did:a", limit=3, window_seconds=60) for _ in range(4)]

    assert decisions[:3] == [RateDecision(allowed=True, retry_after=0)] * 3
    refused = decisions[3]
    assert not refused.allowed
    assert 59 <= refused.retry_after <= 60


async def test_keys_are_independent(limiter: RateLimiter) -> None:
    assert (await limiter.hit("did:a", limit=1, window_seconds=60)).allowed
    assert not (await limiter.hit("did:a", limit=1, window_seconds=60)).allowed

    assert (await limiter.hit("did:b", limit=1, window_seconds=60)).allowed
    assert (await limiter.hit("10.0.0.1", limit=1, window_seconds=60)).allowed


async def test_the_window_moves(limiter: RateLimiter, clock: time_machine.Traveller) -> None:
    for offset in (0.0, 1.0, 2.0):
        clock.move_to(START + offset)
        assert (await limiter.hit("k", limit=3, window_seconds=10)).allowed

    clock.move_to(START + 2.5)
    assert await limiter.hit("k", limit=3, window_seconds=10) == RateDecision(
        allowed=False, retry_after=8
    )
    # Just before the first hit leaves the window, a second is still to wait (rounded up).
    clock.move_to(START + 9.9)
    assert (await limiter.hit("k", limit=3, window_seconds=10)).retry_after == 1

    # The window moves: only the hit at +0 has left it, so exactly one slot frees, not a
    # fresh bucket of three.
    clock.move_to(START + 10.5)
    assert await limiter.hit("k", limit=3, window_seconds=10) == RateDecision(
        allowed=True, retry_after=0
    )
    refused = await limiter.hit("k", limit=3, window_seconds=10)
    assert not refused.allowed
    assert refused.retry_after == 1  # the hit at +1 leaves at +11


async def test_refused_hits_are_not_counted(
    limiter: RateLimiter, clock: time_machine.Traveller
) -> None:
    assert (await limiter.hit("did:a", limit=2, window_seconds=10)).allowed
    assert (await limiter.hit("did:a", limit=2, window_seconds=10)).allowed
    clock.move_to(START + 5)
    for _ in range(3):
        refused = await limiter.hit("did:a", limit=2, window_seconds=10)
        assert not refused.allowed
        assert refused.retry_after == 5

    # If the refusals at +5 were recorded, the client would stay locked out until +15.
    clock.move_to(START + 10.5)
    assert (await limiter.hit("did:a", limit=2, window_seconds=10)).allowed
    assert (await limiter.hit("did:a", limit=2, window_seconds=10)).allowed
    assert not (await limiter.hit("did:a", limit=2, window_seconds=10)).allowed


async def test_each_limit_of_a_key_counts_apart(limiter: RateLimiter) -> None:
    for _ in range(3):
        assert (await limiter.hit("did:a", limit=3, window_seconds=60)).allowed
    assert not (await limiter.hit("did:a", limit=3, window_seconds=60)).allowed

    # A changed limit (or window) starts a count of its own.
    assert await limiter.hit("did:a", limit=2, window_seconds=60) == RateDecision(
        allowed=True, retry_after=0
    )
    assert (await limiter.hit("did:a", limit=3, window_seconds=30)).allowed
    assert not (await limiter.hit("did:a", limit=3, window_seconds=60)).allowed


async def test_concurrent_hits_never_exceed_the_limit(limiter: RateLimiter) -> None:
    decisions = await asyncio.gather(
        *(limiter.hit("did:a", limit=10, window_seconds=60) for _ in range(50))
    )

    assert sum(decision.allowed for decision in decisions) == 10
    assert all(d.retry_after >= 1 for d in decisions if not d.allowed)


async def test_a_costly_hit_counts_its_cost_and_is_refused_whole(
    limiter: RateLimiter, clock: time_machine.Traveller
) -> None:
    # An upload quota: 10 megabytes a minute, spent 4, 4, then 3 (refused: 11 > 10).
    spend = [await limiter.hit("up:a", limit=10, window_seconds=60, cost=c) for c in (4, 4, 3)]
    assert [d.allowed for d in spend] == [True, True, False]
    assert spend[2].retry_after >= 1
    # The refused hit counted nothing: 2 still fit, and a third does not.
    fits = await limiter.hit("up:a", limit=10, window_seconds=60, cost=2)
    over = await limiter.hit("up:a", limit=10, window_seconds=60, cost=1)
    assert (fits.allowed, over.allowed) == (True, False)
    clock.move_to(START + 61)
    assert (await limiter.hit("up:a", limit=10, window_seconds=60, cost=10)).allowed


@pytest.mark.parametrize("cost", [0, -1, 11])
async def test_rejects_a_cost_outside_the_limit(limiter: RateLimiter, cost: int) -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.bad_cost"):
        await limiter.hit("did:a", limit=10, window_seconds=60, cost=cost)


@pytest.mark.parametrize(("limit", "window"), [(0, 60), (-1, 60), (10, 0)])
async def test_rejects_meaningless_limits(limiter: RateLimiter, limit: int, window: int) -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.bad_"):
        await limiter.hit("did:a", limit=limit, window_seconds=window)
