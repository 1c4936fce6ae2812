"""Backend-specific tests of the rate limiters (the shared contract is in
``test_ratelimit_conformance.py``): the memory bounds, and Redis shared by replicas."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest
import time_machine
from redis.asyncio import Redis

from oracle_server._http.ratelimit import (
    InMemoryRateLimiter,
    RedisRateLimiter,
    create_rate_limiter,
)
from oracle_server.testing import RedisTestTarget, redis_test_target

START = 1_800_000_000.0


@pytest.fixture
def redis_target() -> Iterator[RedisTestTarget]:
    with redis_test_target("rl") as target:
        yield target


# --- in memory -------------------------------------------------------------------------------


async def test_memory_evicts_idle_keys() -> None:
    limiter = InMemoryRateLimiter()
    with time_machine.travel(START, tick=False) as clock:
        await limiter.hit("a", limit=5, window_seconds=10)
        clock.move_to(START + 5)
        await limiter.hit("b", limit=5, window_seconds=10)
        assert limiter.tracked_keys == 2

        clock.move_to(START + 10.5)  # "a" has been idle for a whole window, "b" not yet
        await limiter.hit("c", limit=5, window_seconds=10)
        assert limiter.tracked_keys == 2

        clock.move_to(START + 100)
        await limiter.hit("c", limit=5, window_seconds=10)
        assert limiter.tracked_keys == 1

    await limiter.aclose()
    assert limiter.tracked_keys == 0


async def test_memory_caps_the_number_of_keys() -> None:
    limiter = InMemoryRateLimiter(max_keys=2)
    try:
        for key in ("a", "b", "c"):
            assert (await limiter.hit(key, limit=1, window_seconds=60)).allowed

        assert limiter.tracked_keys == 2
        # The least recently hit key was dropped, so it starts afresh; the others are
        # still limited.
        assert (await limiter.hit("a", limit=1, window_seconds=60)).allowed
        assert not (await limiter.hit("c", limit=1, window_seconds=60)).allowed
    finally:
        await limiter.aclose()


async def test_memory_hits_cost_the_same_however_many_keys_there_are() -> None:
    limiter = InMemoryRateLimiter()
    try:
        with time_machine.travel(START, tick=False) as clock:
            for user in range(500):
                await limiter.hit(f"did:{user}", limit=5, window_seconds=60)
            assert limiter.tracked_keys == 500
            for step in range(40):  # one hit every 20 s: each allowed, the window moves on
                clock.move_to(START + 20 * (step + 1))
                decision = await limiter.hit("did:busy", limit=5, window_seconds=60)
                assert decision.allowed
        # No sweep over every key was started by any of those hits; a busy key holds only
        # the hits its window looks at, and the idle keys went as later hits came.
        assert limiter._storage.timer is None
        assert len(limiter._storage.events["hits/did:busy/5/60/second"]) == 5
        assert limiter.tracked_keys == 1
    finally:
        await limiter.aclose()


def test_memory_rejects_a_meaningless_key_cap() -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.bad_max_keys"):
        InMemoryRateLimiter(max_keys=0)


# --- Redis -----------------------------------------------------------------------------------


async def test_redis_instances_share_the_count(redis_target: RedisTestTarget) -> None:
    replica_a = RedisRateLimiter(redis_target.url, prefix=redis_target.prefix)
    replica_b = RedisRateLimiter(redis_target.url, prefix=redis_target.prefix)
    try:
        assert (await replica_a.hit("did:a", limit=3, window_seconds=60)).allowed
        assert (await replica_b.hit("did:a", limit=3, window_seconds=60)).allowed
        assert (await replica_a.hit("did:a", limit=3, window_seconds=60)).allowed
        assert not (await replica_b.hit("did:a", limit=3, window_seconds=60)).allowed
        assert not (await replica_a.hit("did:a", limit=3, window_seconds=60)).allowed
    finally:
        await replica_a.aclose()
        await replica_b.aclose()


async def test_redis_concurrent_hits_across_instances_are_atomic(
    redis_target: RedisTestTarget,
) -> None:
    replicas = [RedisRateLimiter(redis_target.url, prefix=redis_target.prefix) for _ in range(2)]
    try:
        decisions = await asyncio.gather(
            *(replicas[n % 2].hit("did:a", limit=10, window_seconds=60) for n in range(50))
        )
        assert sum(decision.allowed for decision in decisions) == 10
    finally:
        for replica in replicas:
            await replica.aclose()


async def test_redis_hit_always_honours_the_callers_timeout(
    redis_target: RedisTestTarget,
) -> None:
    # Timeouts land at random points, including inside the Redis call, where redis-py on
    # Python 3.11 can swallow the cancellation (CPython gh-86296).
    limiter = RedisRateLimiter(redis_target.url, prefix=redis_target.prefix)
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


async def test_redis_keys_expire_with_their_window(redis_target: RedisTestTarget) -> None:
    limiter = RedisRateLimiter(redis_target.url, prefix=redis_target.prefix)
    client = Redis.from_url(redis_target.url)
    try:
        await limiter.hit("did:a", limit=5, window_seconds=2)
        keys = [key async for key in client.scan_iter(match=redis_target.prefix + "*")]
        assert len(keys) == 1
        assert b"did:a" in keys[0]
        ttl_ms = await client.pttl(keys[0])
        assert 0 < ttl_ms <= 2000
    finally:
        await client.aclose()
        await limiter.aclose()


async def test_create_rate_limiter_picks_the_backend(redis_target: RedisTestTarget) -> None:
    in_memory = create_rate_limiter(None)
    shared = create_rate_limiter(redis_target.url, prefix=redis_target.prefix)
    try:
        assert isinstance(in_memory, InMemoryRateLimiter)
        assert isinstance(shared, RedisRateLimiter)
        assert (await shared.hit("did:a", limit=1, window_seconds=60)).allowed
        assert not (await shared.hit("did:a", limit=1, window_seconds=60)).allowed
    finally:
        await in_memory.aclose()
        await shared.aclose()


async def test_redis_an_allowed_hit_is_one_round_trip(redis_target: RedisTestTarget) -> None:
    # Redis' MONITOR shows every command the limiter sends under this test's prefix.
    limiter = RedisRateLimiter(redis_target.url, prefix=redis_target.prefix)
    client = Redis.from_url(redis_target.url)
    marker = f"{redis_target.prefix}:end"
    try:
        # The first hit loads the scripts; what follows is the steady state.
        await limiter.hit("did:warm", limit=1, window_seconds=60)
        async with client.monitor() as monitor:
            for _ in range(3):
                assert (await limiter.hit("did:a", limit=3, window_seconds=60)).allowed
            assert not (await limiter.hit("did:a", limit=3, window_seconds=60)).allowed
            await client.echo(marker)
            sent: list[str] = []
            while True:
                command = await monitor.next_command()
                if marker in command["command"]:
                    break
                if command["client_type"] != "lua" and redis_target.prefix in command["command"]:
                    sent.append(command["command"].split(" ", 1)[0].upper())
        # Three allowed hits, one script each; the refused one reads the window too.
        assert sent == ["EVALSHA"] * 3 + ["EVALSHA", "EVALSHA"]
    finally:
        await client.aclose()
        await limiter.aclose()
