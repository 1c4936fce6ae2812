"""The run log's contract, run against every backend: memory, Redis streams, the workers' hub.

The Redis log runs with ``ORACLE_TEST_REDIS_URL`` (otherwise its cases skip, naming the
variable); recovery of a run whose replica died, retention and byte bounds are in
``test_runlog.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from oracle_server._http.sse import frame
from oracle_server._turns.runlog import (
    MemoryRunLog,
    RedisRunLog,
    RunEvent,
    RunGone,
    RunInfo,
    RunLog,
    follow,
)
from oracle_server._turns.runlog.base import MAX_EVENTS
from oracle_server._turns.runlog.hub import HubRunLog
from oracle_server.testing import PersistentSseParser, connected_workers, redis_test_target


@pytest.fixture(params=["memory", "redis", "hub"])
async def log(request: pytest.FixtureRequest) -> AsyncIterator[RunLog]:
    """Every backend, so all pass the same behavioural tests."""
    backend: RunLog
    if request.param == "memory":
        backend = MemoryRunLog()
        yield backend
        await backend.aclose()
        return
    if request.param == "hub":
        async with connected_workers(1) as (_, [worker]):
            backend = HubRunLog(worker)
            yield backend
            await backend.aclose()
        return
    with redis_test_target("runs") as target:
        backend = RedisRunLog(Redis.from_url(target.url), prefix=target.prefix)
        yield backend
        await backend.aclose()


def run(run_id: str = "r1", session_id: str = "s1") -> RunInfo:
    return RunInfo(
        run_id=run_id,
        session_id=session_id,
        user_did="did:key:alice",
        request_id="req-1",
        status="running",
        created_at=1_800_000_000.5,
    )


def message(seq: int, text: str) -> RunEvent:
    return RunEvent(seq, "message", {"content": text, "seq": seq})


async def test_a_created_run_is_known_and_the_sessions_active_run(log: RunLog) -> None:
    await log.create(run())

    info = await log.info("r1")
    assert info == RunInfo(
        run_id="r1",
        session_id="s1",
        user_did="did:key:alice",
        request_id="req-1",
        status="running",
        replica=log.replica,
        created_at=1_800_000_000.5,
    )
    active = await log.active_run("s1")
    assert active is not None
    assert active.run_id == "r1"
    assert active.to_wire() == {"runId": "r1", "status": "running"}
    assert await log.active_run("s2") is None
    assert await log.info("no-such-run") is None


async def test_events_are_read_once_in_order_after_any_number(log: RunLog) -> None:
    await log.create(run())
    await log.append("r1", [message(1, "Hel"), message(2, "lo")])
    await log.append("r1", [message(3, " there"), RunEvent(4, "tool_call", {"name": "x"})])

    everything = await log.read("r1", 0, wait=0)
    assert [(e.seq, e.event) for e in everything] == [
        (1, "message"),
        (2, "message"),
        (3, "message"),
        (4, "tool_call"),
    ]
    # Whatever a backend keeps, the frames it gives back are the ones appended.
    assert [e.to_sse() for e in everything] == [
        frame("message", {"content": "Hel", "seq": 1}, event_id=1),
        frame("message", {"content": "lo", "seq": 2}, event_id=2),
        frame("message", {"content": " there", "seq": 3}, event_id=3),
        frame("tool_call", {"name": "x"}, event_id=4),
    ]
    assert [e.seq for e in await log.read("r1", 2, wait=0)] == [3, 4]
    assert await log.read("r1", 4, wait=0) == []


async def test_a_reader_waits_for_the_next_events(log: RunLog) -> None:
    await log.create(run())
    await log.append("r1", [message(1, "a")])

    reader = asyncio.create_task(log.read("r1", 1, wait=30))
    await asyncio.sleep(0.1)
    assert not reader.done()
    await log.append("r1", [message(2, "b")])

    fresh = await asyncio.wait_for(reader, 10)
    assert [(e.seq, e.event) for e in fresh] == [(2, "message")]


async def test_an_idle_running_run_gives_nothing_after_the_wait(log: RunLog) -> None:
    await log.create(run())
    await log.append("r1", [message(1, "a")])

    assert await log.read("r1", 1, wait=0.1) == []


async def test_a_finished_run_answers_at_once_and_leaves_the_session(log: RunLog) -> None:
    await log.create(run())
    await log.append("r1", [message(1, "a"), RunEvent(2, "done", {"status": "finished"})])
    await log.set_status("r1", "finished")

    info = await log.info("r1")
    assert info is not None
    assert info.status == "finished"
    assert await log.active_run("s1") is None
    # No wait for events that will never come (the bound only catches a hang).
    async with asyncio.timeout(10):
        assert await log.read("r1", 2, wait=30) == []
    assert [e.seq for e in await log.read("r1", 0, wait=0)] == [1, 2]


async def test_an_older_run_ending_leaves_a_newer_run_active(log: RunLog) -> None:
    await log.create(run("r1"))
    await log.create(run("r2"))
    await log.set_status("r1", "aborted")

    active = await log.active_run("s1")
    assert active is not None
    assert active.run_id == "r2"


async def test_an_unknown_run_is_gone(log: RunLog) -> None:
    with pytest.raises(RunGone):
        await log.read("no-such-run", 0, wait=0)


async def test_past_the_event_bound_the_oldest_events_are_gone(log: RunLog) -> None:
    await log.create(run())
    total = MAX_EVENTS + 5
    for start in range(1, total + 1, 5000):
        batch = range(start, min(start + 5000, total + 1))
        await log.append("r1", [RunEvent(seq, "message", {"content": "x"}) for seq in batch])

    with pytest.raises(RunGone):
        await log.read("r1", 4, wait=0)
    kept = await log.read("r1", 5, wait=0)
    assert len(kept) == MAX_EVENTS
    assert (kept[0].seq, kept[-1].seq) == (6, total)


async def test_follow_streams_every_frame_after_a_number_until_done(log: RunLog) -> None:
    await log.create(run())
    events = [message(1, "a"), message(2, "b"), RunEvent(3, "done", {"status": "finished"})]

    async def collect(after: int) -> bytes:
        chunks: list[bytes] = []
        async for chunk in follow(log, "r1", after):
            chunks.append(chunk)
        return b"".join(chunks)

    following = asyncio.create_task(collect(1))
    await log.append("r1", events[:2])
    await log.append("r1", events[2:])
    await log.set_status("r1", "finished")

    streamed = await asyncio.wait_for(following, 10)
    assert streamed == b"".join(e.to_sse() for e in events[1:])
    assert await collect(0) == b"".join(e.to_sse() for e in events)


async def test_follow_of_an_unknown_run_ends_at_once(log: RunLog) -> None:
    frames: list[Any] = [chunk async for chunk in follow(log, "no-such-run", 0)]

    assert frames == []


async def test_the_owner_of_a_run_is_remembered(log: RunLog) -> None:
    await log.create(run())
    await log.set_status("r1", "finished")

    assert await log.owner("r1") == "did:key:alice"
    assert await log.owner("no-such-run") is None


async def test_follow_of_an_ended_run_with_nothing_left_closes_with_its_status(
    log: RunLog,
) -> None:
    await log.create(run())
    await log.append("r1", [message(1, "a"), RunEvent(2, "done", {"status": "aborted"})])
    await log.set_status("r1", "aborted")

    for after in (2, 7):
        chunks = [chunk async for chunk in follow(log, "r1", after)]
        parser = PersistentSseParser()
        closing = parser.feed(b"".join(chunks).decode()) + parser.end()
        assert [(e.event, e.data["status"], e.data["aborted"]) for e in closing] == [
            ("done", "aborted", True)
        ]
