"""Redis-specific tests of the replica bus (the shared contract is in
``test_bus_conformance.py``): foreign subscribers, unreadable messages, an unreachable queue.

Each test uses a channel of its own, so buses of other test runs sharing the Redis never
answer. Needs ``ORACLE_TEST_REDIS_URL``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
from redis.asyncio import Redis

from oracle_server._replicas.redis import ControlBus, RedisReplicaBus
from oracle_server.testing import redis_url_or_skip, unique_key_prefix

Buses = Callable[..., AbstractAsyncContextManager[list[RedisReplicaBus]]]


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
    async def started(
        count: int, *, reply_timeout: float = 2.0
    ) -> AsyncIterator[list[RedisReplicaBus]]:
        made = [
            RedisReplicaBus(redis_url, channel=channel, reply_timeout=reply_timeout)
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


async def test_a_replica_that_never_answers_costs_the_reply_timeout(
    buses: Buses, redis_url: str, channel: str
) -> None:
    mute = Redis.from_url(redis_url)
    listener = mute.pubsub()
    await listener.subscribe(channel)  # counted by PUBLISH, never answers
    try:
        async with buses(1, reply_timeout=0.3) as (asker,):
            aborted = await asker.abort_elsewhere("did:key:alice", "s-3")
    finally:
        await listener.aclose()  # type: ignore[no-untyped-call]
        await mute.aclose()

    # Without the timeout the asker would wait for the mute subscriber's answer for ever.
    assert aborted is False


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
    bus = RedisReplicaBus("redis://127.0.0.1:9/0")
    try:
        with pytest.raises(ConnectionError, match="SOCKETIO_MESSAGE_QUEUE"):
            await bus.start()
    finally:
        await bus.aclose()


def test_the_former_name_still_imports() -> None:
    # The boot constructs ControlBus until it is rewired to create_replica_bus.
    assert ControlBus is RedisReplicaBus
