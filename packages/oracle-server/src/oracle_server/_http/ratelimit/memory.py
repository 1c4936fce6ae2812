"""Rate limits held in this process: ``limits``' moving window over its memory storage.

Two things are added to ``limits``' :class:`~limits.aio.storage.MemoryStorage` here:

- A cap on the number of keys (``max_keys``), which it lacks. Beyond it the least recently
  hit key is cleared, which only ever lets a client through earlier, never refuses it
  wrongly.
- Expiry on the way instead of its sweep. After every hit, ``limits`` starts a task that
  walks every key and bisects each key's hits in a worker thread (one thread hop per key):
  the cost of a request grew with the number of users, to several percent of the event
  loop at 200 users. Here a key's hits are cut to the ``limit`` newest on each hit (the
  moving window never looks further), and keys whose last hit left its window are
  cleared, oldest first, as hits arrive: a few dictionary operations a hit, whatever the
  number of keys.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from oracle_server._http.ratelimit.base import RateDecision, decide, window_item

__all__ = ["InMemoryRateLimiter"]


class _UnsweptMemoryStorage(MemoryStorage):
    """``limits``' memory storage without the sweep it starts after every hit."""

    # The name-mangled method limits calls (``self.__schedule_expiry()`` in its class).
    async def _MemoryStorage__schedule_expiry(self) -> None:
        """Start no sweep: `InMemoryRateLimiter` expires keys as hits arrive."""

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        acquired: bool = await super().acquire_entry(key, limit, expiry, amount)
        events = self.events.get(key)
        if events is not None and len(events) > limit:
            # Newest first: the window decides on the limit-th newest hit only.
            del events[limit:]
        return acquired


class InMemoryRateLimiter:
    """A moving window per key, held in this process (counters are per replica).

    Memory stays bounded: each key keeps at most ``limit`` hits, a key whose last hit left
    its window is forgotten when a later hit comes (any key's), and beyond ``max_keys``
    keys the least recently hit one is forgotten.

    Args:
        max_keys: Hard cap on the number of keys (each limit and window of a key counts
            once) tracked at once.

    Raises:
        ValueError: ``ratelimit.bad_max_keys`` when ``max_keys`` is below 1.
    """

    def __init__(self, *, max_keys: int = 100_000) -> None:
        if max_keys < 1:
            raise ValueError(f"ratelimit.bad_max_keys: max_keys must be at least 1, got {max_keys}")
        self._max_keys = max_keys
        self._storage = _UnsweptMemoryStorage()
        self._strategy = MovingWindowRateLimiter(self._storage)
        # Least recently hit first, with the time the window of its last hit closes: the
        # keys to forget once that time has passed, or when over the cap.
        self._recent: OrderedDict[tuple[str, int, int], float] = OrderedDict()

    @property
    def tracked_keys(self) -> int:
        """The number of keys with hits still held in memory."""
        return len(self._storage.events)

    async def hit(
        self, key: str, *, limit: int, window_seconds: int, cost: int = 1
    ) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Args:
            key: The identity being limited.
            limit: Hits allowed per window (at least 1).
            window_seconds: Length of the moving window in seconds (at least 1).

        Returns:
            The decision for this hit.

        Raises:
            ValueError: ``limit`` or ``window_seconds`` is below 1.
        """
        decision = await decide(
            self._strategy, key, limit=limit, window_seconds=window_seconds, cost=cost
        )
        now = time.time()
        self._recent[key, limit, window_seconds] = now + window_seconds
        self._recent.move_to_end((key, limit, window_seconds))
        recent = self._recent
        while recent and (len(recent) > self._max_keys or next(iter(recent.values())) <= now):
            (old_key, old_limit, old_window), _ = recent.popitem(last=False)
            await self._strategy.clear(window_item(old_limit, old_window), old_key)
        return decision

    async def aclose(self) -> None:
        """Forget every counter and stop the storage's sweep."""
        sweep = self._storage.timer
        if sweep is not None:
            sweep.cancel()
            await asyncio.gather(sweep, return_exceptions=True)
        await self._storage.reset()
        self._recent.clear()
