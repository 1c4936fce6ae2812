"""The replicas' control bus (SRV-54) against a real Redis.

Each test uses a channel of its own, so buses of other test runs sharing the Redis never
answer. Needs ``ORACLE_TEST_REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from oracle_server._replicas.redis import ControlBus
from oracle_server.testing import redis_url_or_skip, unique_key_prefix

Buses = Callable[..., AbstractAsyncContextManager[list[ControlBus]]]


@pytest.fixture
def redis_url() -> str:
    return redis_url_or_skip()


@pytest.fixture
def channel() -> str:
    return unique_key_prefix("control")


@pytest.fixture
def buses(redis_url: str, channel: str) -> Buses:
    """``async with buses(n, reply_timeout=…) as [bus, …]``: started buses on one channel."""

    @asynccontextmanager
    async def started(count: int, *, reply_timeout: float = 2.0) -> AsyncIterator[list[ControlBus]]:
        made = [
            ControlBus(redis_url, channel=channel, reply_timeout=reply_timeout)
            for _ in range(count)
        ]
        try:
            for bus in made:
                await bus.start()
            yield made
        finally:
            for bus in made:
                await bus.aclose()

    return started


class AbortRecorder:
    """An abort handler that answers as told and records what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, user_did: str, session_id: str) -> bool:
        self.calls.append((user_did, session_id))
        return self.answer


async def test_an_abort_returns_true_when_another_replica_aborted(buses: Buses) -> None:
    async with buses(3) as (asker, idle, owner):
        asker_handler, idle_handler, owner_handler = (
            AbortRecorder(True),
            AbortRecorder(False),
            AbortRecorder(True),
        )
        asker.handle_abort(asker_handler)
        idle.handle_abort(idle_handler)
        owner.handle_abort(owner_handler)

        aborted = await asker.abort_elsewhere("did:key:alice", "s-1")

        assert aborted is True
        assert owner_handler.calls == [("did:key:alice", "s-1")]
        # The asker aborted its own turns before asking: it is not asked again.
        assert asker_handler.calls == []


async def test_an_abort_nobody_could_do_returns_false_without_waiting_the_timeout(
    buses: Buses,
) -> None:
    async with buses(3, reply_timeout=5.0) as (asker, *others):
        recorders = [AbortRecorder(False) for _ in others]
        for bus, recorder in zip(others, recorders, strict=True):
            bus.handle_abort(recorder)

        started = time.monotonic()
        aborted = await asker.abort_elsewhere("did:key:alice", "s-2")
        elapsed = time.monotonic() - started

        assert aborted is False
        assert [r.calls for r in recorders] == [[("did:key:alice", "s-2")]] * 2
        # Every replica answered: no wait for the 5 s timeout.
        assert elapsed < 2.5, elapsed


async def test_a_replica_that_never_answers_costs_the_reply_timeout(
    buses: Buses, redis_url: str, channel: str
) -> None:
    mute = Redis.from_url(redis_url)
    listener = mute.pubsub()
    await listener.subscribe(channel)  # counted by PUBLISH, never answers
    try:
        async with buses(1, reply_timeout=0.3) as (asker,):
            started = time.monotonic()
            aborted = await asker.abort_elsewhere("did:key:alice", "s-3")
            elapsed = time.monotonic() - started
    finally:
        await listener.aclose()  # type: ignore[no-untyped-call]
        await mute.aclose()

    assert aborted is False
    assert 0.3 <= elapsed < 2.0, elapsed


async def test_a_forwarded_result_reaches_the_other_replicas_only(buses: Buses) -> None:
    async with buses(2) as (sender, receiver):
        received: dict[str, list[tuple[str, str, str, dict[str, Any]]]] = {
            "sender": [],
            "receiver": [],
        }
        arrived = asyncio.Event()

        def recorder(name: str) -> Callable[[str, str, str, Mapping[str, Any]], bool]:
            def settle(kind: str, session_id: str, call_id: str, data: Mapping[str, Any]) -> bool:
                received[name].append((kind, session_id, call_id, dict(data)))
                arrived.set()
                return True

            return settle

        sender.handle_settle(recorder("sender"))
        receiver.handle_settle(recorder("receiver"))

        await sender.publish_settle("browser_tool", "s-4", "call_1", {"result": {"title": "Docs"}})
        await asyncio.wait_for(arrived.wait(), 5)

        assert received == {
            "sender": [],
            "receiver": [("browser_tool", "s-4", "call_1", {"result": {"title": "Docs"}})],
        }


async def test_unreadable_messages_are_ignored(buses: Buses, redis_url: str, channel: str) -> None:
    async with buses(2) as (asker, other):
        other.handle_abort(AbortRecorder(True))
        publisher = Redis.from_url(redis_url)
        try:
            await publisher.publish(channel, b"not json")
            await publisher.publish(channel, b'{"no": "op"}')
        finally:
            await publisher.aclose()

        # The listener survived them and still answers.
        assert await asker.abort_elsewhere("did:key:alice", "s-5") is True


async def test_an_unreachable_queue_fails_start_naming_the_variable() -> None:
    bus = ControlBus("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(ConnectionError, match="SOCKETIO_MESSAGE_QUEUE"):
            await bus.start()
    finally:
        await bus.aclose()
