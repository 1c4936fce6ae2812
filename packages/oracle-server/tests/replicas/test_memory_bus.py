"""Memory-specific tests of the replica bus (the shared contract is in
``test_bus_conformance.py``): hubs keep replicas apart, and the factory picks the bus."""

from __future__ import annotations

from oracle_server._replicas import (
    MemoryReplicaBus,
    MemoryReplicaHub,
    RedisReplicaBus,
    create_replica_bus,
)


async def allow(user_did: str, session_id: str) -> bool:
    return True


async def test_buses_on_different_hubs_do_not_hear_each_other() -> None:
    here, there = MemoryReplicaBus(MemoryReplicaHub()), MemoryReplicaBus(MemoryReplicaHub())
    for bus in (here, there):
        bus.handle_abort(allow)
        await bus.start()
    try:
        assert await here.abort_elsewhere("did:key:alice", "s") is False
    finally:
        await here.aclose()
        await there.aclose()


async def test_create_replica_bus_picks_the_backend() -> None:
    alone = create_replica_bus(None)
    shared = create_replica_bus("redis://127.0.0.1:6379/0")  # not started: no connection
    try:
        assert isinstance(alone, MemoryReplicaBus)
        assert isinstance(shared, RedisReplicaBus)
        await alone.start()
        alone.handle_abort(allow)
        assert await alone.abort_elsewhere("did:key:alice", "s") is False
    finally:
        await alone.aclose()
        await shared.aclose()
