"""What the workers of one machine share through their hub, seen from two workers.

The single-backend contracts are in the conformance suites (``hub`` parameter); these
cases need two workers: one count and one turn per session across both, and what the
hub does when a worker's connection ends (it crashed or was killed).
"""

from __future__ import annotations

import asyncio

import pytest

from oracle_server._http.ratelimit.hub import HubRateLimiter
from oracle_server._replicas.hub import HubReplicaBus
from oracle_server._turns.locks import TurnBusy
from oracle_server._turns.locks.hub import HubTurnLocks
from oracle_server._turns.runlog import RunEvent, RunInfo
from oracle_server._turns.runlog.hub import HubRunLog
from oracle_server._workers.connection import HUB_LOST
from oracle_server.testing import connected_workers, eventually


def running(run_id: str = "r1") -> RunInfo:
    return RunInfo(
        run_id=run_id,
        session_id="s1",
        user_did="did:key:alice",
        request_id="req-1",
        status="running",
    )


async def test_two_workers_count_hits_on_one_window() -> None:
    async with connected_workers(2) as (_, workers):
        first, second = (HubRateLimiter(w) for w in workers)
        decisions = [
            await limiter.hit("did:key:alice", limit=3, window_seconds=60)
            for limiter in (first, second, first, second)
        ]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert decisions[-1].retry_after >= 1


async def test_a_session_runs_one_turn_across_workers_in_arrival_order() -> None:
    async with connected_workers(2) as (_, workers):
        first, second = (HubTurnLocks(w) for w in workers)
        order: list[str] = []
        release = asyncio.Event()

        async def turn(locks: HubTurnLocks, name: str) -> None:
            async with locks.hold("s1", wait=True, timeout=10):
                order.append(name)
                await release.wait()

        holder = asyncio.create_task(turn(first, "first"))
        await eventually(lambda: second.is_held("s1"), timeout=5, interval=0.01)
        with pytest.raises(TurnBusy) as busy:
            async with second.hold("s1", wait=False):
                pass
        waiter = asyncio.create_task(turn(second, "second"))
        await asyncio.sleep(0.1)
        assert order == ["first"]
        release.set()
        await asyncio.gather(holder, waiter)
    assert order == ["first", "second"]
    assert busy.value.session_id == "s1"
    assert busy.value.code == "turn.busy"


async def test_a_worker_that_dies_gives_back_its_turn_at_once() -> None:
    async with connected_workers(2) as (_, [doomed, survivor]):
        entered = asyncio.Event()

        async def hold_forever() -> None:
            async with HubTurnLocks(doomed).hold("s1", wait=False):
                entered.set()
                await asyncio.Event().wait()

        holder = asyncio.create_task(hold_forever())
        await entered.wait()
        locks = HubTurnLocks(survivor)
        assert await locks.is_held("s1")
        await doomed.aclose()  # what the hub sees when the process is killed
        async with asyncio.timeout(5), locks.hold("s1", wait=True):
            assert await locks.is_held("s1")
        holder.cancel()
        await asyncio.gather(holder, return_exceptions=True)


async def test_the_runs_of_a_worker_that_dies_end_interrupted_for_every_reader() -> None:
    async with connected_workers(2) as (_, [doomed, survivor]):
        writer, reader = HubRunLog(doomed), HubRunLog(survivor)
        await writer.create(running())
        await writer.append("r1", [RunEvent(1, "message", {"content": "Half an ans"})])
        info = await reader.info("r1")
        assert info is not None
        assert info.replica == "worker-0"

        await doomed.aclose()

        async def ended() -> RunInfo | None:
            info = await reader.info("r1")
            return info if info is not None and info.status != "running" else None

        info = await eventually(ended, timeout=5, interval=0.01)
        events = await reader.read("r1", 1, wait=1)
    assert info is not None
    assert info.status == "interrupted"
    assert [e.seq for e in events] == [2, 3]
    done = events[-1].to_sse().decode()
    assert "event: done" in done
    assert '"interrupted":true' in done.replace(" ", "")
    assert "Half an ans" in done


async def test_a_runs_events_read_alike_from_its_worker_and_from_another() -> None:
    async with connected_workers(2) as (hub, [running_it, other]):
        writer, rejoiner = HubRunLog(running_it), HubRunLog(other)
        await writer.create(running())
        events = [RunEvent(n, "message", {"content": f"part {n}"}) for n in range(1, 6)]
        for event in events:
            await writer.append("r1", [event])  # casts: nothing waited for
        await writer.set_status("r1", "finished")  # a call: after the casts

        here = await writer.read("r1", 0, wait=0)
        there = await rejoiner.read("r1", 2, wait=0)
        info = await rejoiner.info("r1")
        assert hub.runs.event_count("r1") == 5
    frames = [event.to_sse() for event in events]
    assert [event.to_sse() for event in here] == frames
    assert [event.to_sse() for event in there] == frames[2:]
    assert info is not None
    assert info.status == "finished"


async def test_a_failing_cast_is_logged_and_the_connection_keeps_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with connected_workers(1) as (_, [worker]):
        worker.cast("runs", "append", "no-such-run", [RunEvent(1, "message", {})])
        worker.cast("runs", "drop_everything")
        log = HubRunLog(worker)
        await log.create(running())
        assert await worker.call("runs", "info", "r1") is not None
    messages = [r.getMessage() for r in caplog.records]
    assert any("workers.cast_failed: runs.drop_everything" in m for m in messages)


async def test_an_abort_reaches_the_worker_running_the_turn() -> None:
    async with connected_workers(2) as (_, [asking, running_it]):
        asker, owner = HubReplicaBus(asking), HubReplicaBus(running_it)
        asked: list[tuple[str, str]] = []

        async def abort_here(user_did: str, session_id: str) -> bool:
            asked.append((user_did, session_id))
            return True

        owner.handle_abort(abort_here)
        await asker.start()
        await owner.start()
        assert await asker.abort_elsewhere("did:key:alice", "s1") is True
        await asker.aclose()
        await owner.aclose()
    assert asked == [("did:key:alice", "s1")]


async def test_calls_after_the_hub_is_gone_fail_with_a_code() -> None:
    async with connected_workers(1) as (hub, [worker]):
        lost = asyncio.Event()
        worker.on_lost(lost.set)
        await hub.aclose()
        async with asyncio.timeout(5):
            await lost.wait()
        with pytest.raises(ConnectionError, match=HUB_LOST):
            await HubRunLog(worker).info("r1")
    assert worker.closed
