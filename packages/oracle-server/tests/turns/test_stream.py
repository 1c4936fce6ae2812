"""A run's stream: every pushed event reaches the log under its number, whatever its data,
on every backend (memory, and Redis with ``ORACLE_TEST_REDIS_URL``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from oracle_server._turns.runlog import MemoryRunLog, RedisRunLog, RunEvent, RunInfo, RunLog, follow
from oracle_server._turns.stream import TurnStream
from oracle_server.testing import PersistentSseParser, SseEvent, redis_test_target


@pytest.fixture(params=["memory", "redis"])
async def log(request: pytest.FixtureRequest) -> AsyncIterator[RunLog]:
    backend: RunLog
    if request.param == "memory":
        backend = MemoryRunLog()
        yield backend
        await backend.aclose()
        return
    with redis_test_target("stream") as target:
        backend = RedisRunLog(Redis.from_url(target.url), prefix=target.prefix)
        yield backend
        await backend.aclose()


async def started(log: RunLog) -> TurnStream:
    await log.create(
        RunInfo(
            run_id="r1", session_id="s1", user_did="did:key:a", request_id="q", status="running"
        )
    )
    return TurnStream(log, "r1")


async def streamed(log: RunLog) -> list[SseEvent]:
    """What a client reading the run from the start receives."""
    chunks = [chunk async for chunk in follow(log, "r1", 0)]
    parser = PersistentSseParser()
    return parser.feed(b"".join(chunks).decode()) + parser.end()


async def test_a_lone_surrogate_is_repaired_and_costs_no_frame(log: RunLog) -> None:
    stream = await started(log)
    stream.push("message", {"content": "Par\udc80is"})
    stream.push("tool_call", {"toolName": "city_time", "args": {"city": "\ud800"}})
    stream.push("message", {"content": "!"})
    stream.finish("interrupted")
    await stream.flushed()

    events = await streamed(log)
    assert [(e.id, e.event) for e in events] == [
        (1, "message"),
        (2, "tool_call"),
        (3, "message"),
        (4, "done"),
    ]
    assert events[0].data["content"] == "Par\ufffdis"
    assert events[1].data["args"] == {"city": "\ufffd"}
    assert events[3].data["partialText"] == "Par\ufffdis!"


async def test_data_that_is_no_json_becomes_an_error_in_its_place(log: RunLog) -> None:
    stream = await started(log)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    stream.push("message", {"content": "a"})
    stream.push("render_component", looped)
    stream.push("render_component", {(1, 2): "a tuple key"})
    stream.finish("finished")
    await stream.flushed()

    events = await streamed(log)
    assert [(e.id, e.event) for e in events] == [
        (1, "message"),
        (2, "error"),
        (3, "error"),
        (4, "done"),
    ]
    assert {events[1].data["code"], events[2].data["code"]} == {"turn.event_unencodable"}


class RefusingRunLog(MemoryRunLog):
    """A backend that cannot store one kind of event (as Redis refuses an oversized value)."""

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        if any(e.event == "unstorable" for e in events):
            raise ValueError("refused")
        await super().append(run_id, events)


async def test_an_event_the_log_refuses_takes_no_other_with_it() -> None:
    log = RefusingRunLog()
    stream = await started(log)
    stream.push("message", {"content": "a"})
    stream.push("unstorable", {"x": 1})
    stream.push("message", {"content": "b"})
    stream.finish("finished")
    await stream.flushed()

    events = await streamed(log)
    assert [(e.id, e.event) for e in events] == [
        (1, "message"),
        (2, "error"),
        (3, "message"),
        (4, "done"),
    ]
    assert events[1].data["code"] == "turn.event_unwritable"
