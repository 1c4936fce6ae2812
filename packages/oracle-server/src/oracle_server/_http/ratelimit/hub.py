"""Rate limits counted by the workers' hub: one count per key across one machine.

The hub holds an :class:`~oracle_server._http.ratelimit.memory.InMemoryRateLimiter`
(``limits``' moving window), so N workers allow what one process would, not N times it.
"""

from __future__ import annotations

from typing import cast

from oracle_server._http.ratelimit.base import RateDecision
from oracle_server._workers.connection import HubConnection

__all__ = ["HubRateLimiter"]


class HubRateLimiter:
    """A moving window per key, shared by one machine's workers through their hub."""

    def __init__(self, hub: HubConnection) -> None:
        self._hub = hub

    async def hit(
        self, key: str, *, limit: int, window_seconds: int, cost: int = 1
    ) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Raises:
            ValueError: ``ratelimit.bad_limit`` or ``ratelimit.bad_window``.
        """
        decision = await self._hub.call(
            "limiter", "hit", key, limit=limit, window_seconds=window_seconds, cost=cost
        )
        return cast(RateDecision, decision)

    async def aclose(self) -> None:
        """Nothing to close here: the hub keeps the counts."""
