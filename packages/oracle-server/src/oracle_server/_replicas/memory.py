"""The replica bus in one process: buses on one hub talk as replicas sharing Redis would.

The reference implementation of :class:`~oracle_server._replicas.base.ReplicaBus`: several
replicas in one process (tests, benchmarks) share a :class:`MemoryReplicaHub`; a bus alone
on its hub (a single replica) answers :meth:`MemoryReplicaBus.abort_elsewhere` with
``False`` at once. Messages are copied through JSON, as the Redis bus sends them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from oracle_server._replicas.base import (
    ABORT_REPLY_TIMEOUT_SECONDS,
    AbortHandler,
    SettleHandler,
)

__all__ = ["MemoryReplicaBus", "MemoryReplicaHub"]

logger = logging.getLogger("oracle.server.controlbus")


class MemoryReplicaHub:
    """Where the in-memory buses of one process meet."""

    def __init__(self) -> None:
        self.buses: list[MemoryReplicaBus] = []


class MemoryReplicaBus:
    """Control messages between the buses of one hub, in this process.

    Args:
        hub: The hub shared with the other replicas; a hub of its own when omitted.
        reply_timeout: Seconds an abort waits for the last replica's answer.

    Attributes:
        replica: This replica's id on the bus.
    """

    def __init__(
        self,
        hub: MemoryReplicaHub | None = None,
        *,
        reply_timeout: float = ABORT_REPLY_TIMEOUT_SECONDS,
    ) -> None:
        self.replica = secrets.token_hex(6)
        self._hub = MemoryReplicaHub() if hub is None else hub
        self._reply_timeout = reply_timeout
        self._settle: SettleHandler | None = None
        self._abort: AbortHandler | None = None
        self._answers: set[asyncio.Task[bool]] = set()

    def handle_settle(self, handler: SettleHandler) -> None:
        """Settle forwarded client results with ``handler`` (the socket gateway)."""
        self._settle = handler

    def handle_abort(self, handler: AbortHandler) -> None:
        """Answer abort requests with ``handler`` (the turn runner's local abort)."""
        self._abort = handler

    async def start(self) -> None:
        """Join the hub (idempotent)."""
        if self not in self._hub.buses:
            self._hub.buses.append(self)

    def _others(self) -> list[MemoryReplicaBus]:
        return [bus for bus in self._hub.buses if bus is not self]

    async def publish_settle(
        self, kind: str, session_id: str, tool_call_id: str, data: Mapping[str, Any]
    ) -> None:
        """Offer a client result to the other replicas; a failing handler is only logged."""
        copied = json.loads(json.dumps(dict(data), default=str))
        for bus in self._others():
            if bus._settle is None:
                continue
            try:
                bus._settle(kind, session_id, tool_call_id, copied)
            except Exception:
                logger.exception("controlbus.handler_failed: settle")

    async def abort_elsewhere(self, user_did: str, session_id: str) -> bool:
        """Ask every other replica to abort ``user_did``'s turns in ``session_id``.

        Returns:
            Whether one of them aborted a turn; ``False`` also when a replica did not
            answer within the reply timeout (logged).
        """
        # The others run on after the first "yes", as replicas on Redis do.
        pending = {bus._answer(user_did, session_id) for bus in self._others()}
        try:
            async with asyncio.timeout(self._reply_timeout):
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    if any(task.result() for task in done):
                        return True
        except TimeoutError:
            logger.warning(
                "controlbus.abort_unanswered: %d replicas did not answer the abort of "
                "session %s in %.1f s",
                len(pending),
                session_id,
                self._reply_timeout,
            )
        return False

    def _answer(self, user_did: str, session_id: str) -> asyncio.Task[bool]:
        task = asyncio.get_running_loop().create_task(self._abort_here(user_did, session_id))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)
        return task

    async def _abort_here(self, user_did: str, session_id: str) -> bool:
        if self._abort is None:
            return False
        try:
            return await self._abort(user_did, session_id)
        except Exception:
            logger.exception("controlbus.handler_failed: abort")
            return False

    async def aclose(self) -> None:
        """Leave the hub and stop answering (idempotent)."""
        if self in self._hub.buses:
            self._hub.buses.remove(self)
        answers = list(self._answers)
        for task in answers:
            task.cancel()
        await asyncio.gather(*answers, return_exceptions=True)
