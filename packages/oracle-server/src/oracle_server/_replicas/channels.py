"""The replica bus over any publish/subscribe channels: what Redis and the workers' hub share.

The messages are described in :mod:`oracle_server._replicas.base`; how they travel here:

- ``settle``: every replica hears it on the shared channel; the one whose turn waits for
  that ``toolCallId`` (bound to that session) settles it, the others drop it.
- ``abort``: every replica aborts the caller's turns of the session that it runs or queues
  and answers on the asker's reply channel whether it aborted one.

How the asker knows how many answers to wait for: a publish returns how many subscribers
received the request, and every replica is subscribed once, the asker included (its own
copy counts as its answer, its local turns being aborted already). So the asker returns
at the first ``true``, or once every replica said ``false`` — an abort that finds nothing
costs one round trip, not a timeout. A replica that dies between receiving and answering
is covered by a short timeout (``false``). This was preferred over reading the run log's
owner: a queued turn of the session can wait on another replica than the running one.

A backend supplies the channels (``_publish``, and feeds what it receives to
``_dispatch``); :class:`~oracle_server._replicas.redis.RedisReplicaBus` uses Redis pub/sub,
:class:`~oracle_server._replicas.hub.HubReplicaBus` the channels of the workers' hub.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import secrets
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from oracle_server._replicas.base import (
    ABORT_REPLY_TIMEOUT_SECONDS,
    AbortHandler,
    SettleHandler,
)

__all__ = ["CONTROL_CHANNEL", "ChannelReplicaBus"]

logger = logging.getLogger("oracle.server.controlbus")

CONTROL_CHANNEL = "oracle:control"


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


class ChannelReplicaBus(abc.ABC):
    """Control messages between replicas on a shared channel, with a reply channel each.

    Args:
        channel: The shared channel; replies go to ``<channel>:reply:<replica>``.
        reply_timeout: Seconds an abort waits for the last replica's answer.
        replica: This replica's id (random when omitted).

    Attributes:
        replica: This replica's id on the bus.
    """

    # What a failed publish raises on this backend: logged, never raised to the caller.
    publish_errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(
        self,
        *,
        channel: str = CONTROL_CHANNEL,
        reply_timeout: float = ABORT_REPLY_TIMEOUT_SECONDS,
        replica: str | None = None,
    ) -> None:
        self.replica = replica or secrets.token_hex(6)
        self._channel = channel
        self._reply_channel = f"{channel}:reply:{self.replica}"
        self._reply_timeout = reply_timeout
        self._settle: SettleHandler | None = None
        self._abort: AbortHandler | None = None
        self._waiting: dict[str, _AbortReplies] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @abc.abstractmethod
    async def _publish(self, channel: str, message: str) -> int:
        """Publish ``message``; returns how many subscribers received it."""

    def handle_settle(self, handler: SettleHandler) -> None:
        """Settle forwarded client results with ``handler`` (the socket gateway)."""
        self._settle = handler

    def handle_abort(self, handler: AbortHandler) -> None:
        """Answer abort requests with ``handler`` (the turn runner's local abort)."""
        self._abort = handler

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
            await self._publish(self._channel, json.dumps(message, default=str))
        except self.publish_errors as exc:
            logger.warning("controlbus.publish_failed: settle of %s: %r", tool_call_id, exc)

    async def abort_elsewhere(self, user_did: str, session_id: str) -> bool:
        """Ask every other replica to abort ``user_did``'s turns in ``session_id``.

        Returns:
            Whether one of them aborted a turn; ``False`` also when the channels are
            unreachable or a replica did not answer within the reply timeout (logged).
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
            # Registered before publishing: answers can arrive before the publish returns.
            replies.expected = await self._publish(self._channel, json.dumps(message))
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
        except self.publish_errors as exc:
            logger.warning("controlbus.publish_failed: abort of session %s: %r", session_id, exc)
        finally:
            del self._waiting[request_id]
        return replies.aborted

    async def _stop_answering(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- receiving ---------------------------------------------------------------------

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
        await self._publish(f"{self._channel}:reply:{body.get('from')}", json.dumps(reply))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("controlbus.answer_failed: %r", task.exception())
