"""The event loop a served oracle runs on: uvloop where it is installed (``EVENT_LOOP``).

The turn path is event-loop work more than anything: every SSE frame, model chunk and
database reply is a wake-up, a callback and a socket call. uvloop (libuv) does each for
a fraction of what the standard selector loop costs, and Hypercorn, aiosqlite, psycopg,
redis-py and aiohttp run on it unchanged. ``EVENT_LOOP=asyncio`` keeps the standard loop
(a debugger that needs it, a platform without uvloop).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from oracle_core import EnvValidationError

__all__ = ["EVENT_LOOPS", "event_loop_factory", "run"]

EVENT_LOOPS = ("uvloop", "asyncio")
"""The values ``EVENT_LOOP`` takes; the first is the default."""

_T = TypeVar("_T")


def event_loop_factory(
    env: Mapping[str, str] | None = None,
) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory ``EVENT_LOOP`` names, for ``asyncio.Runner(loop_factory=...)``.

    Args:
        env: The environment (``os.environ`` when ``None``).

    Returns:
        ``uvloop.new_event_loop``; ``None`` (the standard loop) for ``EVENT_LOOP=asyncio``
        or where uvloop is not installed (it does not build on Windows).

    Raises:
        EnvValidationError: ``EVENT_LOOP`` is neither ``uvloop`` nor ``asyncio``.
    """
    choice = (os.environ if env is None else env).get("EVENT_LOOP", EVENT_LOOPS[0])
    if choice not in EVENT_LOOPS:
        raise EnvValidationError([f"EVENT_LOOP: must be 'uvloop' or 'asyncio', not {choice!r}"])
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, _T], *, env: Mapping[str, str] | None = None) -> _T:
    """``asyncio.run(main)`` on the loop ``EVENT_LOOP`` names (``event_loop_factory``).

    Raises:
        EnvValidationError: ``EVENT_LOOP`` is neither ``uvloop`` nor ``asyncio``.
    """
    try:
        factory = event_loop_factory(env)
    except BaseException:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
