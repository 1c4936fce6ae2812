"""Control messages between replicas (SRV-54), on the Redis of ``SOCKETIO_MESSAGE_QUEUE``.

python-socketio's ``AsyncRedisManager`` carries the room events; this bus carries what
must reach the replica *running* a turn, wherever the request or socket arrived (the
messages are described in :mod:`oracle_server._replicas.base`):

- ``settle``: every replica hears it on the shared channel; the one whose turn waits for
  that ``toolCallId`` (bound to that session) settles it, the others drop it.
- ``abort``: every replica aborts the caller's turns of the session that it runs or queues
  and answers on the asker's reply channel whether it aborted one.

How the asker knows how many answers to wait for: ``PUBLISH`` returns how many
subscribers received the request, and every replica is subscribed once, the asker
included (its own copy counts as its answer, its local turns being aborted already). So
the asker returns at the first ``true``, or once every replica said ``false`` — an abort
that finds nothing costs one round trip, not a timeout. A replica that dies between
receiving and answering is covered by a short timeout (``false``). This was preferred
over reading the run log's owner: a queued turn of the session can wait on another
replica than the running one, and the bus needs no ``REDIS_URL``.

Python's ``socketio`` manager pub/sub was not reused: its listener dispatches a fixed set
of methods, starts only with the first socket, and has no public hook for others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from oracle_server._redis import redis_client
from oracle_server._replicas.base import (
    ABORT_REPLY_TIMEOUT_SECONDS,
    AbortHandler,
    SettleHandler,
)
from oracle_server._replicas.cancellation import honour_cancellation

__all__ = [
    "ABORT_REPLY_TIMEOUT_SECONDS",
    "CONTROL_CHANNEL",
    "AbortHandler",
    "RedisReplicaBus",
    "SettleHandler",
]

logger = logging.getLogger("oracle.server.controlbus")

CONTROL_CHANNEL = "oracle:control"
SUBSCRIBE_TIMEOUT_SECONDS = 5.0
_RETRY_FIRST_SECONDS = 0.5
_RETRY_MAX_SECONDS = 30.0


@dataclass
class _AbortReplies:
    """Answers to one abort request."""

    expected: int | None = None
    answers: int = 0
    aborted: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, aborted: bool) -> None:
        self.answers += 1
        self.aborted = self.aborted or aborted
        self.changed.set()

    @property
    def complete(self) -> bool:
        return self.aborted or (self.expected is not None and self.answers >= self.expected)


class RedisReplicaBus:
    """Control messages shared by the replicas of one oracle through Redis pub/sub.

    Args:
        url: ``SOCKETIO_MESSAGE_QUEUE`` (``redis://…``).
        channel: The shared channel; replies go to ``<channel>:reply:<replica>``.
        reply_timeout: Seconds an abort waits for the last replica's answer.

    Attributes:
        replica: This replica's id on the bus.
    """

    def __init__(
        self,
        url: str,
        *,
        channel: str = CONTROL_CHANNEL,
        reply_timeout: float = ABORT_REPLY_TIMEOUT_SECONDS,
    ) -> None:
        self.replica = secrets.token_hex(6)
        self._channel = channel
        self._reply_channel = f"{channel}:reply:{self.replica}"
        self._reply_timeout = reply_timeout
        self._redis = redis_client(url)
        self._pubsub = self._redis.pubsub()
        self._settle: SettleHandler | None = None
        self._abort: AbortHandler | None = None
        self._waiting: dict[str, _AbortReplies] = {}
        self._listener: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def handle_settle(self, handler: SettleHandler) -> None:
        """Settle forwarded client results with ``handler`` (the socket gateway)."""
        self._settle = handler

    def handle_abort(self, handler: AbortHandler) -> None:
        """Answer abort requests with ``handler`` (the turn runner's local abort)."""
        self._abort = handler

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

    async def publish_settle(
        self, kind: str, session_id: str, tool_call_id: str, data: Mapping[str, Any]
    ) -> None:
        """Offer a client result to the other replicas; failures are only logged."""
        message = {
            "op": "settle",
            "from": self.replica,
            "kind": kind,
            "sessionId": session_id,
            "toolCallId": tool_call_id,
            "data": dict(data),
        }
        try:
            await self._redis.publish(self._channel, json.dumps(message, default=str))
        except (RedisError, OSError) as exc:
            logger.warning("controlbus.publish_failed: settle of %s: %r", tool_call_id, exc)

    async def abort_elsewhere(self, user_did: str, session_id: str) -> bool:
        """Ask every other replica to abort ``user_did``'s turns in ``session_id``.

        Returns:
            Whether one of them aborted a turn; ``False`` also when Redis is unreachable
            or a replica did not answer within the reply timeout (logged).
        """
        request_id = secrets.token_hex(8)
        replies = self._waiting[request_id] = _AbortReplies()
        message = {
            "op": "abort",
            "from": self.replica,
            "id": request_id,
            "userDid": user_did,
            "sessionId": session_id,
        }
        try:
            # Registered before publishing: answers can arrive before PUBLISH returns.
            published = self._redis.publish(self._channel, json.dumps(message))
            replies.expected = int(await honour_cancellation(published))
            async with asyncio.timeout(self._reply_timeout):
                while not replies.complete:
                    replies.changed.clear()
                    await replies.changed.wait()
        except TimeoutError:
            logger.warning(
                "controlbus.abort_unanswered: %d of %s replicas answered the abort of "
                "session %s in %.1f s",
                replies.answers,
                replies.expected,
                session_id,
                self._reply_timeout,
            )
        except (RedisError, OSError) as exc:
            logger.warning("controlbus.publish_failed: abort of session %s: %r", session_id, exc)
        finally:
            del self._waiting[request_id]
        return replies.aborted

    async def aclose(self) -> None:
        """Stop listening and close the connections (idempotent)."""
        tasks = [t for t in (self._listener, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._listener = None
        with contextlib.suppress(RedisError, OSError):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py's own hint gap
        with contextlib.suppress(RedisError, OSError):
            await self._redis.aclose()

    # -- receiving ---------------------------------------------------------------------

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

    def _dispatch(self, raw: Any) -> None:
        try:
            body = json.loads(raw)
            op = body["op"]
        except (TypeError, ValueError, KeyError):
            logger.warning("controlbus.bad_message: ignored an unreadable control message")
            return
        try:
            if op == "settle":
                self._on_settle(body)
            elif op == "abort":
                self._on_abort(body)
            elif op == "aborted":
                replies = self._waiting.get(str(body.get("id")))
                if replies is not None:
                    replies.add(bool(body.get("aborted")))
        except Exception:
            logger.exception("controlbus.handler_failed: %s", op)

    def _on_settle(self, body: Mapping[str, Any]) -> None:
        data = body.get("data")
        if body.get("from") == self.replica or self._settle is None:
            return
        if not isinstance(data, Mapping):
            return
        self._settle(
            str(body.get("kind")), str(body.get("sessionId")), str(body.get("toolCallId")), data
        )

    def _on_abort(self, body: Mapping[str, Any]) -> None:
        request_id = str(body.get("id"))
        if body.get("from") == self.replica:
            # Our own request: the runner aborted the local turns before asking.
            replies = self._waiting.get(request_id)
            if replies is not None:
                replies.add(False)
            return
        self._spawn(self._answer_abort(request_id, body))

    async def _answer_abort(self, request_id: str, body: Mapping[str, Any]) -> None:
        aborted = False
        if self._abort is not None:
            aborted = await self._abort(str(body.get("userDid")), str(body.get("sessionId")))
        reply = {"op": "aborted", "id": request_id, "aborted": aborted}
        await self._redis.publish(f"{self._channel}:reply:{body.get('from')}", json.dumps(reply))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("controlbus.answer_failed: %r", task.exception())
