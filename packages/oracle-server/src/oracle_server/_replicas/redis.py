"""Control messages between replicas (SRV-54), on the Redis of ``SOCKETIO_MESSAGE_QUEUE``.

python-socketio's ``AsyncRedisManager`` carries the room events; this bus carries what
must reach the replica *running* a turn, wherever the request or socket arrived, over
Redis pub/sub (how, in :mod:`oracle_server._replicas.channels`). ``PUBLISH`` returning
how many subscribers received a message is what lets an abort stop waiting at the last
answer. The bus needs no ``REDIS_URL``.

Python's ``socketio`` manager pub/sub was not reused: its listener dispatches a fixed set
of methods, starts only with the first socket, and has no public hook for others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.exceptions import RedisError

from oracle_server._redis import redis_client
from oracle_server._replicas.base import (
    ABORT_REPLY_TIMEOUT_SECONDS,
    AbortHandler,
    SettleHandler,
)
from oracle_server._replicas.cancellation import honour_cancellation
from oracle_server._replicas.channels import CONTROL_CHANNEL, ChannelReplicaBus

__all__ = [
    "ABORT_REPLY_TIMEOUT_SECONDS",
    "CONTROL_CHANNEL",
    "AbortHandler",
    "RedisReplicaBus",
    "SettleHandler",
]

logger = logging.getLogger("oracle.server.controlbus")

SUBSCRIBE_TIMEOUT_SECONDS = 5.0
_RETRY_FIRST_SECONDS = 0.5
_RETRY_MAX_SECONDS = 30.0


class RedisReplicaBus(ChannelReplicaBus):
    """Control messages shared by the replicas of one oracle through Redis pub/sub.

    Args:
        url: ``SOCKETIO_MESSAGE_QUEUE`` (``redis://…``).
        channel: The shared channel; replies go to ``<channel>:reply:<replica>``.
        reply_timeout: Seconds an abort waits for the last replica's answer.

    Attributes:
        replica: This replica's id on the bus.
    """

    publish_errors = (RedisError, OSError)

    def __init__(
        self,
        url: str,
        *,
        channel: str = CONTROL_CHANNEL,
        reply_timeout: float = ABORT_REPLY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(channel=channel, reply_timeout=reply_timeout)
        self._redis = redis_client(url)
        self._pubsub = self._redis.pubsub()
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribe, and return once Redis confirmed it: from then on this replica
        receives every control message.

        Raises:
            ConnectionError: Redis is unreachable or did not confirm the subscription in
                time (``controlbus.unreachable``).
        """
        if self._listener is not None:
            return
        try:
            await self._pubsub.subscribe(self._channel, self._reply_channel)
            confirmed = 0
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT_SECONDS):
                while confirmed < 2:
                    message = await self._pubsub.get_message(timeout=SUBSCRIBE_TIMEOUT_SECONDS)
                    if message is not None and message.get("type") == "subscribe":
                        confirmed += 1
        except (RedisError, OSError, TimeoutError) as exc:
            raise ConnectionError(
                f"controlbus.unreachable: cannot subscribe to the message queue "
                f"(SOCKETIO_MESSAGE_QUEUE): {exc!r}; check the URL and that Redis is up"
            ) from exc
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(), name="oracle-control-bus"
        )

    async def _publish(self, channel: str, message: str) -> int:
        return int(await honour_cancellation(self._redis.publish(channel, message)))

    async def aclose(self) -> None:
        """Stop listening and close the connections (idempotent)."""
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        await self._stop_answering()
        with contextlib.suppress(RedisError, OSError):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py's own hint gap
        with contextlib.suppress(RedisError, OSError):
            await self._redis.aclose()

    async def _listen(self) -> None:
        retry = _RETRY_FIRST_SECONDS
        while True:
            try:
                async for message in self._pubsub.listen():
                    retry = _RETRY_FIRST_SECONDS
                    if message.get("type") == "message":
                        self._dispatch(message.get("data"))
            except (RedisError, OSError) as exc:
                # The next listen() reconnects, and redis-py resubscribes on connect.
                logger.warning("controlbus.listen_failed: retrying in %.1f s: %r", retry, exc)
                await asyncio.sleep(retry)
                retry = min(retry * 2, _RETRY_MAX_SECONDS)
