"""Backend-specific tests of the run logs (the shared contract is in
``test_runlog_conformance.py``): the memory bounds, and in Redis the heartbeats, the
recovery of a run whose replica died, and retention."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from oracle_server._turns.runlog import MemoryRunLog, RedisRunLog, RunEvent, RunGone, RunInfo
from oracle_server._turns.runlog.base import (
    MAX_BYTES,
    RUN_RETENTION_SECONDS,
    RUN_TOMBSTONE_SECONDS,
)
from oracle_server.testing import RedisTestTarget, redis_test_target


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(run_id: str = "r1", session_id: str = "s1") -> RunInfo:
    return RunInfo(
        run_id=run_id,
        session_id=session_id,
        user_did="did:key:alice",
        request_id="req-1",
        status="running",
    )


# --- in memory -------------------------------------------------------------------------------


async def test_memory_remembers_a_runs_owner_for_a_day_after_its_log() -> None:
    clock = FakeClock()
    log = MemoryRunLog(clock=clock)
    await log.create(run("r1"))
    await log.set_status("r1", "finished")

    clock.now += RUN_RETENTION_SECONDS + 1
    assert await log.info("r1") is None
    assert await log.owner("r1") == "did:key:alice"
    clock.now += RUN_TOMBSTONE_SECONDS
    assert await log.owner("r1") is None


async def test_memory_keeps_a_bounded_number_of_owners() -> None:
    log = MemoryRunLog(clock=FakeClock(), max_owners=3)
    for n in range(5):
        await log.create(run(f"r{n}", session_id="s1"))
    await log.info("r4")  # any access trims

    assert [await log.owner(f"r{n}") for n in range(5)] == [None, None] + ["did:key:alice"] * 3


async def test_memory_forgets_a_finished_run_after_its_retention() -> None:
    clock = FakeClock()
    log = MemoryRunLog(clock=clock)
    await log.create(run("r1"))
    await log.create(run("r2", session_id="s2"))
    await log.set_status("r1", "finished")

    clock.now += RUN_RETENTION_SECONDS - 1
    assert await log.info("r1") is not None
    clock.now += 2
    assert await log.info("r1") is None
    with pytest.raises(RunGone):
        await log.read("r1", 0, wait=0)
    # A run still going is kept however old.
    assert await log.info("r2") is not None
    assert log.run_ids() == ["r2"]


async def test_memory_keeps_a_run_under_its_byte_bound() -> None:
    log = MemoryRunLog()
    await log.create(run())
    chunk = "x" * (1024 * 1024)
    await log.append("r1", [RunEvent(seq, "message", {"content": chunk}) for seq in range(1, 11)])

    assert log.payload_bytes("r1") <= MAX_BYTES
    kept = log.event_count("r1")
    assert 0 < kept < 10
    with pytest.raises(RunGone):
        await log.read("r1", 0, wait=0)
    assert [e.seq for e in await log.read("r1", 10 - kept, wait=0)] == list(range(11 - kept, 11))
    assert log.event_count("no-such-run") == log.payload_bytes("no-such-run") == 0


# --- Redis -----------------------------------------------------------------------------------


@pytest.fixture
def redis_target() -> Iterator[RedisTestTarget]:
    with redis_test_target("runs") as target:
        yield target


@pytest.fixture
async def replicas(redis_target: RedisTestTarget) -> AsyncIterator[tuple[RedisRunLog, ...]]:
    """Three replicas' run logs on one Redis, with a short heartbeat."""
    logs = tuple(
        RedisRunLog(Redis.from_url(redis_target.url), prefix=redis_target.prefix, replica_timeout=2)
        for _ in range(3)
    )
    yield logs
    for log in logs:
        await log.aclose()


async def test_redis_a_live_replicas_run_stays_running_elsewhere(
    replicas: tuple[RedisRunLog, ...],
) -> None:
    owner, reader, _ = replicas
    await owner.create(run())
    await owner.append("r1", [RunEvent(1, "message", {"content": "Hel"})])

    active = await reader.active_run("s1")
    assert active is not None
    assert active.status == "running"
    assert active.replica == owner.replica
    assert await reader.read("r1", 1, wait=0.1) == []


async def test_redis_a_run_whose_replica_died_is_ended_once_with_its_text(
    replicas: tuple[RedisRunLog, ...],
) -> None:
    owner, reader, late_reader = replicas
    await owner.create(run())
    await owner.append(
        "r1",
        [
            RunEvent(1, "run", {"runId": "r1"}),
            RunEvent(2, "message", {"content": "Hel"}),
            RunEvent(3, "message", {"content": "lo"}),
        ],
    )
    await owner.aclose()  # its heartbeat stops and its key goes, as when a replica dies

    recovering = await reader.active_run("s1")
    assert recovering is not None
    assert recovering.status == "recovering"

    ending = await reader.read("r1", 3, wait=5)
    assert [(e.seq, e.event) for e in ending] == [(4, "error"), (5, "done")]
    assert ending[0].data["retryable"] is True
    done = ending[1].data
    assert (done["status"], done["interrupted"], done["partialText"]) == (
        "interrupted",
        True,
        "Hello",
    )
    info = await reader.info("r1")
    assert info is not None
    assert info.status == "interrupted"
    assert await reader.active_run("s1") is None
    # Whoever reads next finds the same ending, not a second one.
    assert [e.seq for e in await late_reader.read("r1", 0, wait=0)] == [1, 2, 3, 4, 5]


async def test_redis_a_finished_run_expires_after_its_retention(
    redis_target: RedisTestTarget, replicas: tuple[RedisRunLog, ...]
) -> None:
    log = replicas[0]
    await log.create(run())
    await log.append("r1", [RunEvent(1, "done", {"status": "finished"})])
    await log.set_status("r1", "finished")

    client = Redis.from_url(redis_target.url)
    try:
        keys = sorted([key async for key in client.scan_iter(match=redis_target.prefix + "*")])
        prefix = redis_target.prefix.encode()
        assert keys == [
            prefix + b"r1:events",
            prefix + b"r1:info",
            prefix + b"r1:owner",
            prefix + b"replica:" + log.replica.encode(),
        ]
        for key in keys[:2]:
            assert 0 < await client.ttl(key) <= RUN_RETENTION_SECONDS
        # The owner outlives the run's log, so an expired run is told from an unknown one.
        assert RUN_RETENTION_SECONDS < await client.ttl(keys[2]) <= RUN_TOMBSTONE_SECONDS
        assert 0 < await client.pttl(keys[3]) <= 2000
        await client.delete(*keys[:2])
        assert await log.info("r1") is None
        assert await log.owner("r1") == "did:key:alice"
    finally:
        await client.aclose()
