"""Redis clients of the server, all made one way: a connection Redis dropped (a restart,
a failover, an idle timeout on the way) is replaced on the next command instead of
failing it, and the server's stores stay usable once Redis is back.

redis-py gives a client no retries by default, so a pooled connection that died while
idle fails the first command sent on it; with `Retry`, the command is sent again on a new
connection. While Redis is down, the retries give up within about a second and the
command raises ``redis.exceptions.ConnectionError``, which the HTTP layer answers with
503 (``service.unavailable``).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["redis_client", "redis_options", "redis_pool"]

_RETRIES = 3
_CONNECT_TIMEOUT_SECONDS = 2.0
_HEALTH_CHECK_SECONDS = 30


def redis_options() -> dict[str, Any]:
    """Keyword arguments for redis-py's ``from_url``: retries, timeouts, keepalive.

    No read timeout: the run log and the control bus block on reads by design.
    """
    return {
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), _RETRIES),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_connect_timeout": _CONNECT_TIMEOUT_SECONDS,
        "socket_keepalive": True,
        "health_check_interval": _HEALTH_CHECK_SECONDS,
    }


def redis_client(url: str) -> Redis:
    """A client for ``url`` (``REDIS_URL``) with the server's connection options."""
    return Redis.from_url(url, **redis_options())


def redis_pool(url: str) -> ConnectionPool:
    """A connection pool for ``url`` with the server's connection options."""
    return ConnectionPool.from_url(url, **redis_options())
