"""Turn admission: arrival order, the bound, and a limit that follows how busy the loop is."""

from __future__ import annotations

import asyncio

import pytest

from oracle_server._turns.admission import TurnAdmission
from oracle_server.testing import eventually

# The timer is far off: these tests feed the controller its samples themselves.
NEVER = 3600.0


async def admitted(
    admission: TurnAdmission, count: int, order: list[int]
) -> list[asyncio.Task[None]]:
    """``count`` tasks asking for admission one after another; each notes its number."""

    async def ask(number: int) -> None:
        await admission.acquire()
        order.append(number)

    tasks = []
    for number in range(count):
        tasks.append(asyncio.create_task(ask(number)))
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    return tasks


async def test_turns_beyond_the_limit_wait_and_are_admitted_in_arrival_order() -> None:
    admission = TurnAdmission(2, fewest=1, probe_seconds=NEVER)
    order: list[int] = []
    tasks = await admitted(admission, 5, order)
    assert order == [0, 1]
    assert (admission.running, admission.waiting) == (2, 3)

    admission.release()
    await asyncio.sleep(0)
    assert order == [0, 1, 2]
    admission.release()
    admission.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert (admission.running, admission.waiting) == (2, 0)


async def test_a_saturated_loop_shrinks_the_limit_by_a_quarter_down_to_the_fewest() -> None:
    admission = TurnAdmission(64, fewest=8, probe_seconds=NEVER)
    admission.busy = 1.0  # saturated for a while already
    limits = []
    for _ in range(12):
        admission.observe(1.0)
        limits.append(admission.limit)
    assert limits[:3] == [48, 36, 27]
    assert limits[-1] == 8
    assert min(limits) == 8


async def test_a_lower_limit_stops_no_running_turn_and_admits_none_until_below_it() -> None:
    admission = TurnAdmission(4, fewest=1, probe_seconds=NEVER)
    order: list[int] = []
    tasks = await admitted(admission, 5, order)
    assert admission.running == 4
    admission.busy = 1.0
    for _ in range(5):
        admission.observe(1.0)
    assert admission.limit == 1
    assert admission.running == 4  # all still running
    for _ in range(3):
        admission.release()
    await asyncio.sleep(0)
    assert order == [0, 1, 2, 3]  # 1 running, the limit: the fifth still waits
    admission.release()
    await asyncio.sleep(0)
    assert order == [0, 1, 2, 3, 4]
    await asyncio.gather(*tasks)


async def test_while_turns_wait_and_the_loop_has_time_the_limit_grows_to_the_bound() -> None:
    admission = TurnAdmission(10, fewest=2, probe_seconds=NEVER)
    for _ in range(10):
        admission.observe(1.0)
    assert admission.limit == 2
    admission.busy = 0.0
    order: list[int] = []
    tasks = await admitted(admission, 6, order)
    assert order == [0, 1]

    admission.observe(0.0)
    await asyncio.sleep(0)
    assert (admission.limit, order) == (3, [0, 1, 2])
    for _ in range(20):
        admission.observe(0.0)
    await asyncio.gather(*tasks)
    assert order == list(range(6))
    # Growth stopped when nothing waited.
    assert admission.limit == 6


async def test_the_limit_does_not_grow_when_nothing_waits() -> None:
    admission = TurnAdmission(10, fewest=2, probe_seconds=NEVER)
    for _ in range(10):
        admission.observe(1.0)
    admission.busy = 0.0
    for _ in range(5):
        admission.observe(0.0)
    assert admission.limit == 2


async def test_a_cancelled_waiter_takes_no_place() -> None:
    admission = TurnAdmission(1, probe_seconds=NEVER)
    order: list[int] = []
    tasks = await admitted(admission, 3, order)
    tasks[1].cancel()
    await asyncio.sleep(0)
    assert admission.waiting == 1
    admission.release()
    await asyncio.gather(tasks[0], tasks[2])
    assert order == [0, 2]
    assert admission.running == 1


async def test_a_waiter_cancelled_as_it_is_admitted_hands_its_place_on() -> None:
    admission = TurnAdmission(1, probe_seconds=NEVER)
    order: list[int] = []
    tasks = await admitted(admission, 3, order)
    admission.release()  # admits the second ...
    tasks[1].cancel()  # ... which is cancelled before it runs
    await asyncio.gather(tasks[0], tasks[2], return_exceptions=True)
    assert tasks[1].cancelled()
    assert order == [0, 2]
    assert (admission.running, admission.waiting) == (1, 0)


async def test_the_timer_runs_only_while_turns_run_or_wait() -> None:
    admission = TurnAdmission(4, probe_seconds=0.01)
    await admission.acquire()
    assert admission._probe is not None
    admission.release()

    async def stopped() -> bool:
        return admission._probe is None

    assert await eventually(stopped, timeout=5, interval=0.01)


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"turns\.bad_concurrency"):
        TurnAdmission(0)


async def test_turns_waiting_on_a_slow_model_never_shrink_the_limit() -> None:
    admission = TurnAdmission(16, fewest=2, probe_seconds=0.01)
    for _ in range(16):
        await admission.acquire()
    # Sixteen turns, all waiting (an idle loop thread), for many samples.
    await asyncio.sleep(0.3)
    assert admission.limit == 16
    assert admission.busy < 0.9
    for _ in range(16):
        admission.release()


async def test_between_the_two_thresholds_the_limit_holds() -> None:
    admission = TurnAdmission(10, fewest=2, probe_seconds=NEVER)
    admission.busy = 1.0
    for _ in range(3):
        admission.observe(1.0)
    held = admission.limit
    order: list[int] = []
    tasks = await admitted(admission, 12, order)
    admission.busy = 0.8
    for _ in range(10):
        admission.observe(0.8)
    assert admission.limit == held
    for _ in range(12):
        admission.release()
    await asyncio.gather(*tasks)


def test_with_the_fewest_at_the_bound_the_limit_is_fixed() -> None:
    admission = TurnAdmission(64, fewest=64, probe_seconds=NEVER)
    admission.busy = 1.0
    for _ in range(10):
        admission.observe(1.0)
    assert admission.limit == 64
