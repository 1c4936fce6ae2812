"""How many turns run at once: up to ``TURN_CONCURRENCY``, fewer while the loop is saturated.

A turn mostly waits for its model. With a remote model, many turns at once cost little,
and the bound is there only so that a burst waits instead of exhausting pools. When the
turns themselves keep the event loop's thread busy (a fast local model, many sessions),
each more turn at once makes every turn dearer: more connections for the model client's
pool to walk, more state alive, more streams written a frame at a time. Side by side, 50
sessions at once took 52.8 ms of CPU a turn with 50 running and 40.5 ms with 10.

So the limit follows how busy the loop's thread is, the way a congestion window follows
loss (additive increase, multiplicative decrease). A timer due every
:data:`PROBE_SECONDS` measures the share of the interval the thread spent on the CPU
(``time.thread_time``), smoothed. Above :data:`BUSY_TARGET` the limit shrinks by a
quarter, never below :data:`FEWEST` or the bound. While turns wait and the share is below
:data:`GROW_BELOW`, it grows by one a tick, never above the bound; between the two it
holds, so a saturated loop settles on a limit instead of sawing around one (and the
connections and memory that follow it settle too). Turns that wait on a slow
model leave the thread idle, so they never shrink it: a loop that is merely late (a
burst of callbacks, a pause) is not a reason to admit fewer. Turns are admitted in
arrival order, and a lower limit never stops a running turn. The timer runs only while
turns run or wait.

No library does this for an asyncio loop; the controller is a few lines.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

__all__ = ["BUSY_TARGET", "FEWEST", "GROW_BELOW", "PROBE_SECONDS", "TurnAdmission"]

PROBE_SECONDS = 0.1
"""How often the loop thread's CPU share is measured while turns run."""
BUSY_TARGET = 0.9
"""Smoothed share of the loop thread's time on the CPU above which fewer turns are admitted."""
GROW_BELOW = 0.7
"""Smoothed share below which the limit grows while turns wait."""
FEWEST = 8
"""The limit never goes below this (nor above the bound)."""
SMOOTHING = 0.3
"""Weight of the newest sample in the smoothed share."""
DECREASE = 0.75
"""Factor applied to the limit when the loop is saturated."""


class TurnAdmission:
    """Admits turns, in arrival order, up to a limit between ``FEWEST`` and ``most``.

    Args:
        most: The bound (``TURN_CONCURRENCY``); the limit starts there.
        fewest: The least the limit shrinks to (at most ``most``).
        busy_target: Smoothed CPU share of the loop thread above which the limit shrinks.
        probe_seconds: Interval of the timer that measures it.
    """

    def __init__(
        self,
        most: int,
        *,
        fewest: int = FEWEST,
        busy_target: float = BUSY_TARGET,
        probe_seconds: float = PROBE_SECONDS,
    ) -> None:
        if most < 1:
            raise ValueError("turns.bad_concurrency: the bound must be at least 1")
        self.most = most
        self.fewest = max(1, min(fewest, most))
        self.limit = most
        self.running = 0
        self.busy = 0.0
        self.busy_target = busy_target
        self.probe_seconds = probe_seconds
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._probe: asyncio.TimerHandle | None = None
        self._since = (0.0, 0.0)  # (loop time, thread CPU time) at the last sample

    @property
    def waiting(self) -> int:
        """Turns waiting to be admitted."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        """Wait for admission; pair with :meth:`release`."""
        self._watch()
        if self.running < self.limit and not self.waiting:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # admitted as it was cancelled: hand the place on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """A turn admitted by :meth:`acquire` has ended."""
        self.running -= 1
        self._admit()

    def observe(self, busy: float) -> None:
        """Take one sample (the loop thread's CPU share since the last) and move the limit."""
        self.busy = SMOOTHING * busy + (1 - SMOOTHING) * self.busy
        if self.busy > self.busy_target:
            self.limit = max(self.fewest, int(self.limit * DECREASE))
        elif self.busy < GROW_BELOW and self.waiting and self.limit < self.most:
            self.limit += 1
            self._admit()

    def _admit(self) -> None:
        while self._waiters and self.running < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self.running += 1

    def _watch(self) -> None:
        if self._probe is None:
            loop = asyncio.get_running_loop()
            self._since = (loop.time(), time.thread_time())
            self._probe = loop.call_later(self.probe_seconds, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        wall, cpu = loop.time(), time.thread_time()
        elapsed = wall - self._since[0]
        if elapsed > 0:
            self.observe(min(1.0, (cpu - self._since[1]) / elapsed))
        self._probe = None
        if self.running or self._waiters:
            self._watch()
        else:
            self.busy = 0.0
