"""The replica bus's contract, run against every backend: buses on one in-memory hub, and
buses on one Redis channel (with ``ORACLE_TEST_REDIS_URL``; otherwise those cases skip,
naming the variable), then the cases only Redis has. Each Redis case uses a channel of its
own, so buses of other test runs sharing the Redis never answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from oracle_server._replicas import MemoryReplicaBus, MemoryReplicaHub, RedisReplicaBus, ReplicaBus
from oracle_server._replicas.hub import HubReplicaBus
from oracle_server.testing import connected_workers, redis_url_or_skip, unique_key_prefix

Buses = Callable[..., AbstractAsyncContextManager[list[ReplicaBus]]]
# Far beyond the bound of any case that must not wait for it.
NEVER = 600.0


OpenBuses = Callable[[int, float], AbstractAsyncContextManager[list[ReplicaBus]]]


def started_buses(open_buses: OpenBuses) -> Buses:
    """``async with buses(n, reply_timeout=…) as [bus, …]`` over the ``n`` buses that
    ``open_buses(n, reply_timeout)`` gives, started, and closed after the block."""

    @asynccontextmanager
    async def started(count: int, *, reply_timeout: float = 2.0) -> AsyncIterator[list[ReplicaBus]]:
        async with open_buses(count, reply_timeout) as made:
            try:
                for bus in made:
                    await bus.start()
                yield made
            finally:
                for bus in made:
                    await bus.aclose()

    return started


def starting(make: Callable[[float], ReplicaBus]) -> Buses:
    """Started buses that ``make(reply_timeout)`` builds, one call each."""

    @asynccontextmanager
    async def made(count: int, reply_timeout: float) -> AsyncIterator[list[ReplicaBus]]:
        yield [make(reply_timeout) for _ in range(count)]

    return started_buses(made)


def hub_starting() -> Buses:
    """Started buses of ``n`` workers sharing one hub."""

    @asynccontextmanager
    async def made(count: int, reply_timeout: float) -> AsyncIterator[list[ReplicaBus]]:
        async with connected_workers(count) as (_, workers):
            yield [HubReplicaBus(worker, reply_timeout=reply_timeout) for worker in workers]

    return started_buses(made)


@pytest.fixture
def redis_channel() -> tuple[str, str]:
    """The tests' Redis URL and a channel of this test's own."""
    return redis_url_or_skip(), unique_key_prefix("control")


@pytest.fixture(params=["memory", "redis", "hub"])
def buses(request: pytest.FixtureRequest) -> Buses:
    """Started buses that hear each other: on one in-memory hub, one Redis channel, or
    the workers' hub."""
    if request.param == "hub":
        return hub_starting()
    if request.param == "memory":
        hub = MemoryReplicaHub()
        return starting(lambda timeout: MemoryReplicaBus(hub, reply_timeout=timeout))
    url, channel = request.getfixturevalue("redis_channel")
    return starting(lambda timeout: RedisReplicaBus(url, channel=channel, reply_timeout=timeout))


@pytest.fixture
def redis_buses(redis_channel: tuple[str, str]) -> Buses:
    """Started buses on one Redis channel only, for the Redis-specific cases."""
    url, channel = redis_channel
    return starting(lambda timeout: RedisReplicaBus(url, channel=channel, reply_timeout=timeout))


class AbortRecorder:
    """An abort handler that answers as told and records what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, user_did: str, session_id: str) -> bool:
        self.calls.append((user_did, session_id))
        return self.answer


@pytest.fixture
def never_answering() -> Iterator[Callable[[str, str], Any]]:
    """An abort handler that hangs until the test ends."""
    released = asyncio.Event()

    async def hang(user_did: str, session_id: str) -> bool:
        await released.wait()
        return True

    yield hang
    released.set()


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
    async with buses(3, reply_timeout=NEVER) as (asker, *others):
        recorders = [AbortRecorder(False) for _ in others]
        for bus, recorder in zip(others, recorders, strict=True):
            bus.handle_abort(recorder)

        # Every replica answered: the call returns long before the reply timeout.
        async with asyncio.timeout(30):
            aborted = await asker.abort_elsewhere("did:key:alice", "s-2")

        assert aborted is False
        assert [r.calls for r in recorders] == [[("did:key:alice", "s-2")]] * 2


async def test_a_replica_alone_answers_false_at_once(buses: Buses) -> None:
    async with buses(1, reply_timeout=NEVER) as (alone,):
        alone.handle_abort(AbortRecorder(True))

        async with asyncio.timeout(30):
            assert await alone.abort_elsewhere("did:key:alice", "s-3") is False


async def test_a_replica_that_never_answers_makes_the_abort_false_after_the_timeout(
    buses: Buses, never_answering: Callable[[str, str], Any]
) -> None:
    async with buses(2, reply_timeout=0.3) as (asker, mute):
        mute.handle_abort(never_answering)

        assert await asker.abort_elsewhere("did:key:alice", "s-4") is False


async def test_a_forwarded_result_reaches_the_other_replicas_only(buses: Buses) -> None:
    async with buses(3) as (sender, *receivers):
        received: dict[str, list[tuple[str, str, str, dict[str, Any]]]] = {
            "sender": [],
            "first": [],
            "second": [],
        }
        arrived = asyncio.Event()

        def recorder(name: str) -> Callable[[str, str, str, Mapping[str, Any]], bool]:
            def settle(kind: str, session_id: str, call_id: str, data: Mapping[str, Any]) -> bool:
                received[name].append((kind, session_id, call_id, dict(data)))
                if received["first"] and received["second"]:
                    arrived.set()
                return name == "first"

            return settle

        sender.handle_settle(recorder("sender"))
        receivers[0].handle_settle(recorder("first"))
        receivers[1].handle_settle(recorder("second"))

        await sender.publish_settle("browser_tool", "s-5", "call_1", {"result": {"title": "Docs"}})
        await asyncio.wait_for(arrived.wait(), 5)

        forwarded = ("browser_tool", "s-5", "call_1", {"result": {"title": "Docs"}})
        assert received == {"sender": [], "first": [forwarded], "second": [forwarded]}


async def test_a_failing_handler_leaves_the_bus_working(buses: Buses) -> None:
    async with buses(2, reply_timeout=0.3) as (asker, broken):

        async def fail_abort(user_did: str, session_id: str) -> bool:
            raise RuntimeError("the runner broke")

        settled = asyncio.Event()

        def fail_then_settle(kind: str, session_id: str, call_id: str, data: Any) -> bool:
            if call_id == "call_bad":
                raise RuntimeError("the gateway broke")
            settled.set()
            return True

        broken.handle_abort(fail_abort)
        broken.handle_settle(fail_then_settle)

        assert await asker.abort_elsewhere("did:key:alice", "s-6") is False
        await asker.publish_settle("browser_tool", "s-6", "call_bad", {})
        await asker.publish_settle("browser_tool", "s-6", "call_good", {})
        await asyncio.wait_for(settled.wait(), 5)

        broken.handle_abort(AbortRecorder(True))
        assert await asker.abort_elsewhere("did:key:alice", "s-6") is True


async def test_closing_twice_is_harmless(buses: Buses) -> None:
    async with buses(2) as (first, second):
        await second.aclose()
        await second.aclose()
        second.handle_abort(AbortRecorder(True))

        # A closed replica hears nothing any more.
        async with asyncio.timeout(30):
            assert await first.abort_elsewhere("did:key:alice", "s-7") is False


# --- Redis only: foreign subscribers, unreadable messages, an unreachable queue ---------


async def test_a_replica_that_never_answers_costs_the_reply_timeout(
    redis_buses: Buses, redis_channel: tuple[str, str]
) -> None:
    redis_url, channel = redis_channel
    mute = Redis.from_url(redis_url)
    listener = mute.pubsub()
    await listener.subscribe(channel)  # counted by PUBLISH, never answers
    try:
        async with redis_buses(1, reply_timeout=0.3) as (asker,):
            aborted = await asker.abort_elsewhere("did:key:alice", "s-3")
    finally:
        await listener.aclose()  # type: ignore[no-untyped-call]
        await mute.aclose()

    # Without the timeout the asker would wait for the mute subscriber's answer for ever.
    assert aborted is False


async def test_unreadable_messages_are_ignored(
    redis_buses: Buses, redis_channel: tuple[str, str]
) -> None:
    redis_url, channel = redis_channel
    async with redis_buses(2) as (asker, other):
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
    bus = RedisReplicaBus("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(ConnectionError, match="SOCKETIO_MESSAGE_QUEUE"):
            await bus.start()
    finally:
        await bus.aclose()
