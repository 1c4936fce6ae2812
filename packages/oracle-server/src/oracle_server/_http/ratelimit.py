"""Per-identity rate limiting (SRV-46): in memory by default, in Redis when replicas share it.

Both backends implement the same sliding-window log: a hit is allowed when fewer than
``limit`` hits were allowed for the key during the last ``window_seconds``. Refused hits are
not recorded, so a client hammering a refused key does not extend its own ban. A sliding
window (rather than fixed buckets) means a client can never get ``2 * limit`` hits through by
straddling a bucket boundary.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from redis.asyncio import Redis

from oracle_server._replicas.cancellation import honour_cancellation

__all__ = [
    "InMemoryRateLimiter",
    "RateDecision",
    "RateLimiter",
    "RedisRateLimiter",
    "create_rate_limiter",
]


@dataclass(frozen=True)
class RateDecision:
    """The outcome of one hit against a rate limit.

    Attributes:
        allowed: Whether the hit may proceed.
        remaining: Hits still allowed in the current window after this one.
        retry_after: Seconds until a slot frees up; at least 1 when refused, 0 when allowed.
            Suitable for a ``Retry-After`` header as is.
    """

    allowed: bool
    remaining: int
    retry_after: int


class RateLimiter(Protocol):
    """A counter of hits per key over a sliding window."""

    async def hit(self, key: str, *, limit: int, window_seconds: int) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Args:
            key: The identity being limited, e.g. ``did:<did>`` or a client IP plus route.
            limit: Hits allowed per window (at least 1).
            window_seconds: Length of the sliding window in seconds (at least 1).

        Returns:
            Whether the hit is allowed, how many remain, and when to retry if refused.
        """
        ...

    async def aclose(self) -> None:
        """Release the limiter's resources (connections); the limiter is unusable afterwards."""
        ...


def _check_arguments(limit: int, window_seconds: int) -> None:
    if limit < 1:
        raise ValueError(f"ratelimit.bad_limit: limit must be at least 1, got {limit}")
    if window_seconds < 1:
        raise ValueError(
            f"ratelimit.bad_window: window_seconds must be at least 1, got {window_seconds}"
        )


def _retry_seconds(delay: float) -> int:
    # Round up so a client that waits exactly Retry-After finds the slot free.
    return max(1, math.ceil(delay))


@dataclass
class _Window:
    window_seconds: float
    hits: deque[float] = field(default_factory=deque)

    def is_idle(self, now: float) -> bool:
        return not self.hits or self.hits[-1] <= now - self.window_seconds


class InMemoryRateLimiter:
    """A sliding-window log per key, held in this process (counters are per replica).

    Memory stays bounded: each key keeps at most ``limit`` timestamps, keys whose last allowed
    hit has left its window are evicted as other keys are hit, and beyond ``max_keys`` the
    least recently hit keys are dropped (forgetting a key only ever lets a client through
    earlier, never refuses it wrongly).

    Args:
        clock: Monotonic time source in seconds; injectable for tests.
        max_keys: Hard cap on the number of keys tracked at once.
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"ratelimit.bad_max_keys: max_keys must be at least 1, got {max_keys}")
        self._clock = clock
        self._max_keys = max_keys
        # Ordered by last hit, least recent first, so idle keys gather at the front.
        self._windows: OrderedDict[str, _Window] = OrderedDict()

    @property
    def tracked_keys(self) -> int:
        """The number of keys currently held in memory."""
        return len(self._windows)

    async def hit(self, key: str, *, limit: int, window_seconds: int) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Args:
            key: The identity being limited.
            limit: Hits allowed per window (at least 1).
            window_seconds: Length of the sliding window in seconds (at least 1).

        Returns:
            The decision for this hit.

        Raises:
            ValueError: ``limit`` or ``window_seconds`` is below 1.
        """
        _check_arguments(limit, window_seconds)
        now = self._clock()
        self._evict_idle(now)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(window_seconds)
            while len(self._windows) > self._max_keys:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(key)
            window.window_seconds = window_seconds
        hits = window.hits
        while hits and hits[0] <= now - window_seconds:
            hits.popleft()
        if len(hits) < limit:
            hits.append(now)
            return RateDecision(allowed=True, remaining=limit - len(hits), retry_after=0)
        # Only hits[-limit] has to expire for the count to drop below the limit; when the
        # limit shrank between calls older hits may still be queued in front of it.
        return RateDecision(
            allowed=False,
            remaining=0,
            retry_after=_retry_seconds(hits[-limit] + window_seconds - now),
        )

    def _evict_idle(self, now: float) -> None:
        while self._windows:
            oldest = next(iter(self._windows.values()))
            if not oldest.is_idle(now):
                return
            self._windows.popitem(last=False)

    async def aclose(self) -> None:
        """Forget every counter."""
        self._windows.clear()


# KEYS[1] = the key's sorted set; ARGV = limit, window in ms, a unique member.
# The server's clock is used so replicas with skewed clocks still agree on the window.
_SLIDING_WINDOW_LUA = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, ARGV[3])
  redis.call('PEXPIRE', key, window)
  return {1, limit - count - 1, 0}
end
local pivot = redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
return {0, 0, math.ceil(tonumber(pivot[2]) + window - now)}
"""


class RedisRateLimiter:
    """A sliding-window log per key in a Redis sorted set, shared by every replica.

    Each hit runs one Lua script, so the check and the insert are atomic however many replicas
    hit the same key at once. Each key expires one window after its last allowed hit.

    Args:
        url: Redis URL, e.g. ``redis://host:6379/0``.
        prefix: Prepended to every key so several deployments can share one Redis.
    """

    def __init__(self, url: str, *, prefix: str = "oracle:rl:") -> None:
        self._prefix = prefix
        self._redis = Redis.from_url(url)
        self._script = self._redis.register_script(_SLIDING_WINDOW_LUA)

    async def hit(self, key: str, *, limit: int, window_seconds: int) -> RateDecision:
        """Record a hit on ``key`` if it fits under ``limit`` per ``window_seconds``.

        Args:
            key: The identity being limited.
            limit: Hits allowed per window (at least 1).
            window_seconds: Length of the sliding window in seconds (at least 1).

        Returns:
            The decision for this hit.

        Raises:
            ValueError: ``limit`` or ``window_seconds`` is below 1.
            redis.exceptions.RedisError: Redis is unreachable or refused the script.
        """
        _check_arguments(limit, window_seconds)
        allowed, remaining, retry_ms = await honour_cancellation(
            self._script(
                keys=[self._prefix + key],
                args=[limit, window_seconds * 1000, secrets.token_hex(12)],
            )
        )
        if allowed:
            return RateDecision(allowed=True, remaining=int(remaining), retry_after=0)
        return RateDecision(
            allowed=False, remaining=0, retry_after=_retry_seconds(int(retry_ms) / 1000)
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


def create_rate_limiter(redis_url: str | None, *, prefix: str = "oracle:rl:") -> RateLimiter:
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
