"""Honour a cancellation that a redis-py call swallowed (CPython gh-86296, Python 3.11).

redis-py sends each command through ``asyncio.wait_for`` when a socket timeout is set (the
default since redis-py 8). On Python 3.11, ``wait_for`` returns the inner result instead of
raising when the task is cancelled just as the inner operation completes; the bug was fixed
in 3.12. The task's cancellation request stays counted (``Task.cancelling()``) even though
no :class:`asyncio.CancelledError` surfaced, so a caller can still notice it afterwards. An
``asyncio.timeout`` or ``task.cancel()`` that lands there would otherwise be lost: a waiter
polling Redis would poll for ever, a timed-out request would run on.

Hand-written because neither redis-py nor asyncio offers it: redis-py cannot tell that
``wait_for`` dropped the cancellation, and the fix is in the standard library of 3.12 only.
Once the project requires Python 3.12 this module can go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["honour_cancellation"]

T = TypeVar("T")


async def honour_cancellation(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``; raise ``CancelledError`` if the task was cancelled meanwhile.

    Wrap each redis-py call on a path that a cancellation or timeout must be able to stop.
    A cancellation requested while ``awaitable`` ran wins over its outcome: a result is
    dropped, and an ordinary exception becomes the ``__cause__`` of the
    ``CancelledError`` (it was caused by the call that should not have completed).
    Cancellations requested before the call, and the call's own ``CancelledError``, pass
    through unchanged.

    Args:
        awaitable: The redis-py call (or a coroutine that makes some).

    Returns:
        What ``awaitable`` returned, when the task was not cancelled meanwhile.

    Raises:
        asyncio.CancelledError: The task was cancelled while ``awaitable`` ran, even if
            ``awaitable`` swallowed it.
    """
    task = asyncio.current_task()
    if task is None:  # not inside a task (a bare callback): nothing can be cancelled
        return await awaitable
    requests_before = task.cancelling()
    try:
        result = await awaitable
    except asyncio.CancelledError:
        raise
    except Exception as error:
        if task.cancelling() > requests_before:
            raise asyncio.CancelledError from error
        raise
    if task.cancelling() > requests_before:
        raise asyncio.CancelledError
    return result
