"""One running turn per session (SRV-25), in this process or across replicas through Redis.

The ``enqueue`` policy maps to ``hold(session_id, wait=True)`` and the ``reject`` policy to
``hold(session_id, wait=False)``, whose :class:`TurnBusy` the HTTP layer answers with 409.

Layout: ``base.py`` (the protocol and its errors), ``memory.py`` (the reference
implementation), ``redis.py``; one conformance suite runs against both.
"""

from __future__ import annotations

from oracle_server._turns.locks.base import TurnBusy, TurnLocks
from oracle_server._turns.locks.memory import InMemoryTurnLocks
from oracle_server._turns.locks.redis import RedisTurnLocks

__all__ = [
    "InMemoryTurnLocks",
    "RedisTurnLocks",
    "TurnBusy",
    "TurnLocks",
    "create_turn_locks",
]


def create_turn_locks(
    redis_url: str | None, *, prefix: str = "oracle:turn:", lease_seconds: float = 30
) -> TurnLocks:
    """Pick the turn locks for the deployment.

    Args:
        redis_url: ``REDIS_URL``; when set the locks live in Redis and hold across replicas,
            otherwise they hold within this process.
        prefix: Key prefix in Redis (ignored in memory).
        lease_seconds: Redis lease length (ignored in memory).

    Returns:
        A :class:`RedisTurnLocks` or an :class:`InMemoryTurnLocks`.
    """
    if redis_url:
        return RedisTurnLocks(redis_url, prefix=prefix, lease_seconds=lease_seconds)
    return InMemoryTurnLocks()
