"""Rate limits in Redis, shared by every replica: ``limits``' moving window on redis-py.

``limits``' :class:`~limits.aio.storage.RedisStorage` runs each hit as one Lua script over a
list of timestamps per key, so the check and the insert are atomic however many replicas
hit the key at once, and each key expires one window after its last allowed hit. It talks
through redis-py (``implementation="redispy"``), the client the server already uses, over
a connection pool of this limiter's own, which :meth:`RedisRateLimiter.aclose` closes.

Differences from the hand-written script it replaced: the timestamps come from the replica's
clock rather than Redis' ``TIME`` (replicas' clocks must agree to well under a second, as
NTP keeps them), and a refused hit reads ``retry_after`` with a second script; an allowed
hit is one round trip.
"""

from __future__ import annotations

from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from oracle_server._http.ratelimit.base import RateDecision, decide
from oracle_server._redis import redis_pool

__all__ = ["RedisRateLimiter"]


def _storage_uri(url: str) -> str:
    # limits picks its client by scheme; the pool below carries the actual connection.
    if url.startswith("unix://"):
        return "async+redis+unix://" + url.removeprefix("unix://")
    return "async+" + url


class RedisRateLimiter:
    """A moving window per key in Redis, shared by every replica.

    Args:
        url: Redis URL, e.g. ``redis://host:6379/0``.
        prefix: Prepended (with ``:``) to every key so several deployments can share one
            Redis.
    """

    def __init__(self, url: str, *, prefix: str = "oracle:rl") -> None:
        self._pool = redis_pool(url)
        storage = RedisStorage(
            _storage_uri(url),
            implementation="redispy",
            key_prefix=prefix.removesuffix(":"),
            connection_pool=self._pool,  # type: ignore[arg-type]  # passed on to redis-py
        )
        self._strategy = MovingWindowRateLimiter(storage)

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
            redis.exceptions.RedisError: Redis is unreachable or refused the script.
        """
        return await decide(
            self._strategy, key, limit=limit, window_seconds=window_seconds, cost=cost
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._pool.aclose()
