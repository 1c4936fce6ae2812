"""Per-identity rate limiting (SRV-46): in memory by default, in Redis when replicas share it.

Both backends are ``limits``' moving window (:mod:`limits.aio.strategies`): a hit is allowed
when fewer than ``limit`` hits were allowed for the key during the last ``window_seconds``.
Refused hits are not recorded, so a client hammering a refused key does not extend its own
ban, and a moving window (rather than fixed buckets) means a client can never get
``2 * limit`` hits through by straddling a bucket boundary. Each limit and window of a key
counts apart (the ``limits`` key holds both).

Layout: ``base.py`` (the protocol and the decision), ``memory.py`` (the reference
implementation), ``redis.py``; one conformance suite runs against both.
"""

from __future__ import annotations

from oracle_server._http.ratelimit.base import RateDecision, RateLimiter
from oracle_server._http.ratelimit.memory import InMemoryRateLimiter
from oracle_server._http.ratelimit.redis import RedisRateLimiter

__all__ = [
    "InMemoryRateLimiter",
    "RateDecision",
    "RateLimiter",
    "RedisRateLimiter",
    "create_rate_limiter",
]


def create_rate_limiter(redis_url: str | None, *, prefix: str = "oracle:rl") -> RateLimiter:
    """Pick the rate limiter for the deployment.

    Args:
        redis_url: ``REDIS_URL``; when set the counters live in Redis and are shared by
            replicas, otherwise they live in this process.
        prefix: Key prefix in Redis (ignored in memory).

    Returns:
        A :class:`RedisRateLimiter` or an :class:`InMemoryRateLimiter`.
    """
    if redis_url:
        return RedisRateLimiter(redis_url, prefix=prefix)
    return InMemoryRateLimiter()
