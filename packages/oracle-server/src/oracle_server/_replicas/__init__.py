"""What replicas say to each other: the replica bus, in memory or on Redis pub/sub.

Layout: ``base.py`` (the protocol and its handlers), ``memory.py`` (the reference
implementation: several replicas in one process), ``redis.py`` (replicas sharing
``SOCKETIO_MESSAGE_QUEUE``), and ``cancellation.py``, the workaround every redis-py call
on a cancellable path goes through. One conformance suite runs against both buses.
"""

from __future__ import annotations

from oracle_server._replicas.base import AbortHandler, ReplicaBus, SettleHandler
from oracle_server._replicas.memory import MemoryReplicaBus, MemoryReplicaHub
from oracle_server._replicas.redis import RedisReplicaBus

__all__ = [
    "AbortHandler",
    "MemoryReplicaBus",
    "MemoryReplicaHub",
    "RedisReplicaBus",
    "ReplicaBus",
    "SettleHandler",
    "create_replica_bus",
]


def create_replica_bus(url: str | None) -> ReplicaBus:
    """Pick the replica bus for the deployment.

    Args:
        url: ``SOCKETIO_MESSAGE_QUEUE``; when set, the replicas sharing that Redis talk over
            its pub/sub, otherwise this replica is alone on an in-memory bus of its own.

    Returns:
        A :class:`RedisReplicaBus` or a :class:`MemoryReplicaBus`.
    """
    if url:
        return RedisReplicaBus(url)
    return MemoryReplicaBus()
