"""The turn locks' contract, run against every backend: memory, and Redis.

The Redis locks run with ``ORACLE_TEST_REDIS_URL`` (otherwise their cases skip, naming the
variable); their own cases (replicas, leases, crashes) are in ``test_locks.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from oracle_server._turns.locks import InMemoryTurnLocks, RedisTurnLocks, TurnBusy, TurnLocks
from oracle_server._turns.locks.hub import HubTurnLocks
from oracle_server.testing import connected_workers, redis_test_target


@pytest.fixture(params=["memory", "redis", "hub"])
async def locks(request: pytest.FixtureRequest) -> AsyncIterator[TurnLocks]:
    """Every backend, so all pass the same behavioural tests."""
    backend: TurnLocks
    if request.param == "memory":
        backend = InMemoryTurnLocks()
        yield backend
        await backend.aclose()
        return
    if request.param == "hub":
        async with connected_workers(1) as (_, [worker]):
            backend = HubTurnLocks(worker)
            yield backend
            await backend.aclose()
        return
    with redis_test_target("turn") as target:
        backend = RedisTurnLocks(target.url, prefix=target.prefix, lease_seconds=2)
        yield backend
        await backend.aclose()


async def take(locks: TurnLocks, session_id: str, *, wait: bool, patience: float = 5) -> None:
    """Take the turn and give it back straight away."""
    async with locks.hold(session_id, wait=wait, timeout=patience):
        pass


async def fail_inside(locks: TurnLocks, session_id: str) -> None:
    async with locks.hold(session_id, wait=False):
        raise RuntimeError("boom")


async def test_reject_policy_raises_while_held(locks: TurnLocks) -> None:
    async with locks.hold("s", wait=False):
        with pytest.raises(TurnBusy, match="A turn is already running for this session") as info:
            await take(locks, "s", wait=False)
        assert info.value.code == "turn.busy"
        assert info.value.session_id == "s"
        # Other sessions are not affected.
        await take(locks, "other", wait=False)

    await take(locks, "s", wait=False)


async def test_enqueue_policy_runs_turns_one_at_a_time_in_arrival_order(locks: TurnLocks) -> None:
    order: list[int] = []
    running = 0
    most_running = 0

    async def turn(number: int) -> None:
        nonlocal running, most_running
        async with locks.hold("s", wait=True, timeout=10):
            running += 1
            most_running = max(most_running, running)
            order.append(number)
            await asyncio.sleep(0.02)
            running -= 1

    async with locks.hold("s", wait=False):
        waiters = []
        for number in range(3):
            waiters.append(asyncio.create_task(turn(number)))
            await asyncio.sleep(0.05)  # let it reach the queue before the next one arrives
        assert order == []

    await asyncio.wait_for(asyncio.gather(*waiters), 10)
    assert order == [0, 1, 2]
    assert most_running == 1


async def test_reject_policy_refuses_while_turns_are_queued(locks: TurnLocks) -> None:
    async with locks.hold("s", wait=False):
        waiter = asyncio.create_task(take(locks, "s", wait=True))
        await asyncio.sleep(0.05)
    # The holder left, but the queued turn comes first.
    with pytest.raises(TurnBusy):
        await take(locks, "s", wait=False)
    await asyncio.wait_for(waiter, 5)


async def test_waiting_times_out(locks: TurnLocks) -> None:
    async with locks.hold("s", wait=False):
        with pytest.raises(TimeoutError, match=r"^turn\.wait_timeout: session s stayed busy"):
            await take(locks, "s", wait=True, patience=0.2)
        assert await locks.is_held("s")

    # The timed-out waiter left nothing behind.
    assert not await locks.is_held("s")
    await take(locks, "s", wait=False)


async def test_cancelled_waiter_leaves_the_queue(locks: TurnLocks) -> None:
    async with locks.hold("s", wait=False):
        waiter = asyncio.create_task(take(locks, "s", wait=True))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    await take(locks, "s", wait=False)


async def test_exception_inside_the_block_releases(locks: TurnLocks) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        await fail_inside(locks, "s")

    assert not await locks.is_held("s")
    await take(locks, "s", wait=False)


async def test_is_held(locks: TurnLocks) -> None:
    assert not await locks.is_held("s")
    async with locks.hold("s", wait=True):
        assert await locks.is_held("s")
        assert not await locks.is_held("other")
    assert not await locks.is_held("s")
