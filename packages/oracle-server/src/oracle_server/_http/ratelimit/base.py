"""What a rate limiter is: a moving window of hits per key, and the decision on a hit."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter

from oracle_server._replicas.cancellation import honour_cancellation

__all__ = ["RateDecision", "RateLimiter", "decide", "window_item"]

_NAMESPACE = "hits"


@dataclass(frozen=True)
class RateDecision:
    """The outcome of one hit against a rate limit.

    No count of the hits left is reported: reading it would cost an allowed hit a second
    round trip to Redis, and no response carries it.

    Attributes:
        allowed: Whether the hit may proceed.
        retry_after: Seconds until a slot frees up; at least 1 when refused, 0 when allowed.
            Suitable for a ``Retry-After`` header as is.
    """

    allowed: bool
    retry_after: int


class RateLimiter(Protocol):
    """A counter of hits per key over a moving window."""

    async def hit(
        self, key: str, *, limit: int, window_seconds: int, cost: int = 1
    ) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Args:
            key: The identity being limited, e.g. ``did:<did>`` or a client IP plus route.
            limit: Hits allowed per window (at least 1).
            window_seconds: Length of the moving window in seconds (at least 1).
            cost: How many hits this one counts for (an upload's megabytes); a hit that
                does not fit as a whole is refused and counts nothing.

        Returns:
            Whether the hit is allowed, and when to retry if refused.

        Raises:
            ValueError: ``ratelimit.bad_limit`` or ``ratelimit.bad_window``.
        """
        ...

    async def aclose(self) -> None:
        """Release the limiter's resources; the limiter is unusable afterwards."""
        ...


def window_item(limit: int, window_seconds: int) -> RateLimitItemPerSecond:
    """The ``limits`` item of ``limit`` hits per ``window_seconds``.

    Its storage key is ``hits/<key>/<limit>/<window>/second``: each limit and window of a
    key counts apart, so a changed ``THROTTLE_LIMIT`` starts a fresh count.
    """
    return RateLimitItemPerSecond(limit, window_seconds, namespace=_NAMESPACE)


async def decide(
    strategy: MovingWindowRateLimiter,
    key: str,
    *,
    limit: int,
    window_seconds: int,
    cost: int = 1,
) -> RateDecision:
    """One hit through a ``limits`` moving window, as a :class:`RateDecision`.

    Args:
        strategy: The moving-window strategy over the backend's storage.
        key: The identity being limited.
        limit: Hits allowed per window.
        window_seconds: Length of the window in seconds.

    Returns:
        The decision. An allowed hit costs one call to the storage (one Lua script in
        Redis); only a refused one reads the window again, for ``retry_after``.

    Raises:
        ValueError: ``limit`` or ``window_seconds`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"ratelimit.bad_limit: limit must be at least 1, got {limit}")
    if window_seconds < 1:
        raise ValueError(
            f"ratelimit.bad_window: window_seconds must be at least 1, got {window_seconds}"
        )
    if not 1 <= cost <= limit:
        raise ValueError(f"ratelimit.bad_cost: cost must be 1 to the limit ({limit}), got {cost}")
    item = window_item(limit, window_seconds)
    if await honour_cancellation(strategy.hit(item, key, cost=cost)):
        return RateDecision(allowed=True, retry_after=0)
    window = await honour_cancellation(strategy.get_window_stats(item, key))
    # Round up so a client that waits exactly Retry-After finds the slot free.
    retry_after = max(1, math.ceil(window.reset_time - time.time()))
    return RateDecision(allowed=False, retry_after=retry_after)
