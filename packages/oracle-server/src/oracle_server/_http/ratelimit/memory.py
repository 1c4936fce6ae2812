"""Rate limits held in this process: ``limits``' moving window over its memory storage.

Hand-written here, because ``limits``' :class:`~limits.aio.storage.MemoryStorage` has no
such bound: the cap on the number of keys (``max_keys``). Beyond it the least recently hit
key is cleared, which only ever lets a client through earlier, never refuses it wrongly.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from oracle_server._http.ratelimit.base import RateDecision, decide, window_item

__all__ = ["InMemoryRateLimiter"]


class InMemoryRateLimiter:
    """A moving window per key, held in this process (counters are per replica).

    Memory stays bounded: each key keeps at most ``limit`` hits, ``limits`` sweeps out the
    hits (and then the keys) that left their window after each hit, and beyond
    ``max_keys`` keys the least recently hit one is forgotten.

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
        self._storage = MemoryStorage()
        self._strategy = MovingWindowRateLimiter(self._storage)
        # Least recently hit first: the keys to forget when over the cap.
        self._recent: OrderedDict[tuple[str, int, int], None] = OrderedDict()

    @property
    def tracked_keys(self) -> int:
        """The number of keys with hits still held in memory."""
        return len(self._storage.events)

    async def hit(self, key: str, *, limit: int, window_seconds: int) -> RateDecision:
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
        decision = await decide(self._strategy, key, limit=limit, window_seconds=window_seconds)
        self._recent[key, limit, window_seconds] = None
        self._recent.move_to_end((key, limit, window_seconds))
        while len(self._recent) > self._max_keys:
            (old_key, old_limit, old_window), _ = self._recent.popitem(last=False)
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
