"""Tests of oracle_server._replicas.cancellation: a swallowed cancellation is honoured.

The double below swallows a cancellation exactly as ``asyncio.wait_for`` does on Python
3.11 when the cancellation lands as the inner call completes (CPython gh-86296): it catches
the ``CancelledError`` and returns a result, leaving the task's cancellation request
counted. Provoking the real race inside redis-py is not deterministic; its effect is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oracle_server._replicas.cancellation import honour_cancellation


async def swallowing_call(started: asyncio.Event) -> str:
    """Return normally even when cancelled, as the 3.11 ``wait_for`` race does."""
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        return "sent anyway"
    return "unreachable"


async def failing_call(started: asyncio.Event) -> str:
    """Turn a cancellation into another error, as a caller of a swallowing call may."""
    await swallowing_call(started)
    raise LookupError("the lock was no longer owned")


async def cancel_once_started(
    call: Callable[[asyncio.Event], Awaitable[Any]], *, honoured: bool
) -> asyncio.Task[Any]:
    started = asyncio.Event()

    async def caller() -> Any:
        if honoured:
            return await honour_cancellation(call(started))
        return await call(started)

    task = asyncio.create_task(caller())
    await started.wait()
    task.cancel()
    await asyncio.wait([task])
    return task


async def test_the_double_swallows_a_cancellation_without_the_helper() -> None:
    task = await cancel_once_started(swallowing_call, honoured=False)

    # What the helper guards against: the task finished as if never cancelled.
    assert not task.cancelled()
    assert task.result() == "sent anyway"


async def test_a_swallowed_cancellation_is_raised() -> None:
    task = await cancel_once_started(swallowing_call, honoured=True)

    assert task.cancelled()


async def test_a_swallowed_cancellation_wins_over_the_error_it_caused() -> None:
    task = await cancel_once_started(failing_call, honoured=True)

    assert task.cancelled()


async def test_a_swallowed_timeout_still_times_out() -> None:
    started = asyncio.Event()

    async def wait_briefly() -> None:
        async with asyncio.timeout(0):
            await honour_cancellation(swallowing_call(started))

    with pytest.raises(TimeoutError):
        await wait_briefly()
    assert started.is_set()


async def test_results_and_errors_pass_through_when_not_cancelled() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def refuse() -> int:
        await asyncio.sleep(0)
        raise LookupError("no such key")

    assert await honour_cancellation(answer()) == 42
    with pytest.raises(LookupError, match="no such key"):
        await honour_cancellation(refuse())


async def test_an_earlier_cancellation_request_is_not_raised_again() -> None:
    # A cancellation that was requested (and handled) before the call does not count.
    async def outlive_a_cancellation() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            assert current is not None
            assert current.cancelling() == 1
        return await honour_cancellation(asyncio.sleep(0, result=7))

    task = asyncio.create_task(outlive_a_cancellation())
    await asyncio.sleep(0)
    task.cancel()

    assert await task == 7


async def test_a_cancellation_the_call_raises_itself_propagates() -> None:
    task = asyncio.create_task(honour_cancellation(asyncio.Event().wait()))
    await asyncio.sleep(0)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
