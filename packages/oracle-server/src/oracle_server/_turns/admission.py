"""How many turns run at once: up to ``TURN_CONCURRENCY``, fewer while the loop is behind.

A turn mostly waits for its model. With a remote model, many turns at once cost little,
and the bound is there only so that a burst waits instead of exhausting pools. When the
turns themselves keep the event loop busy (a fast local model, many sessions), each more
turn at once makes every turn dearer: more connections for the model client's pool to
walk, more state alive, more streams written a frame at a time. Side by side, 50
sessions at once took 52.8 ms of CPU a turn with 50 running and 40.5 ms with 10.

So the limit follows the loop's lag, the way a congestion window follows loss (additive
increase, multiplicative decrease): a timer due every :data:`PROBE_SECONDS` measures how
late it fires, smoothed; above :data:`LAG_TARGET_SECONDS` the limit shrinks by a quarter
(never below :data:`FEWEST` or the bound), and while turns wait and the loop keeps up it
grows by one a tick (never above the bound). Turns are admitted in arrival order, and a
lower limit never stops a running turn. The timer runs only while turns run or wait.

No library does this for an asyncio loop; the controller is a few lines.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["FEWEST", "LAG_TARGET_SECONDS", "PROBE_SECONDS", "TurnAdmission"]

PROBE_SECONDS = 0.1
"""How often the loop's lag is measured while turns run."""
LAG_TARGET_SECONDS = 0.005
"""Smoothed lag above which fewer turns are admitted."""
FEWEST = 8
"""The limit never goes below this (nor above the bound)."""
SMOOTHING = 0.3
"""Weight of the newest lag sample in the smoothed lag."""
DECREASE = 0.75
"""Factor applied to the limit when the loop is behind."""


class TurnAdmission:
    """Admits turns, in arrival order, up to a limit between ``FEWEST`` and ``most``.

    Args:
        most: The bound (``TURN_CONCURRENCY``); the limit starts there.
        fewest: The least the limit shrinks to (at most ``most``).
        lag_target: Smoothed loop lag, in seconds, above which the limit shrinks.
        probe_seconds: Interval of the lag timer.
    """

    def __init__(
        self,
        most: int,
        *,
        fewest: int = FEWEST,
        lag_target: float = LAG_TARGET_SECONDS,
        probe_seconds: float = PROBE_SECONDS,
    ) -> None:
        if most < 1:
            raise ValueError("turns.bad_concurrency: the bound must be at least 1")
        self.most = most
        self.fewest = max(1, min(fewest, most))
        self.limit = most
        self.running = 0
        self.lag = 0.0
        self.lag_target = lag_target
        self.probe_seconds = probe_seconds
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._probe: asyncio.TimerHandle | None = None
        self._due = 0.0

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

    def observe(self, lag: float) -> None:
        """Take one lag sample (seconds) and move the limit."""
        self.lag = SMOOTHING * lag + (1 - SMOOTHING) * self.lag
        if self.lag > self.lag_target:
            self.limit = max(self.fewest, int(self.limit * DECREASE))
        elif self.waiting and self.limit < self.most:
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
            self._due = loop.time() + self.probe_seconds
            self._probe = loop.call_at(self._due, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.observe(max(0.0, loop.time() - self._due))
        self._probe = None
        if self.running or self._waiters:
            self._watch()
        else:
            self.lag = 0.0
