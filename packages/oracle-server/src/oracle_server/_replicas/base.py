"""What the replica bus is: client results and aborts that must reach the replica running a turn.

- ``settle``: a ``tool_result`` or ``action_call_result`` that a socket on this replica
  sent for a call this replica is not waiting for. Every other replica hears it; the one
  whose turn waits for that ``toolCallId`` (bound to that session) settles it.
- ``abort``: ``POST /messages/abort`` (or a session delete) for turns on other replicas, a
  request and reply: every other replica aborts the caller's turns of the session that it
  runs or queues, and the asker learns whether one did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

__all__ = [
    "ABORT_REPLY_TIMEOUT_SECONDS",
    "AbortHandler",
    "ReplicaBus",
    "SettleHandler",
]

ABORT_REPLY_TIMEOUT_SECONDS = 2.0

SettleHandler = Callable[[str, str, str, Mapping[str, Any]], bool]
"""``(kind, session_id, tool_call_id, data) -> settled``: a forwarded client result."""

AbortHandler = Callable[[str, str], Awaitable[bool]]
"""``(user_did, session_id) -> aborted``: abort the caller's turns of the session here."""


class ReplicaBus(Protocol):
    """Control messages between the replicas of one oracle.

    Attributes:
        replica: This replica's id on the bus.
    """

    replica: str

    def handle_settle(self, handler: SettleHandler) -> None:
        """Settle client results forwarded by other replicas with ``handler``."""
        ...

    def handle_abort(self, handler: AbortHandler) -> None:
        """Answer other replicas' abort requests with ``handler``."""
        ...

    async def start(self) -> None:
        """Join the bus; from then on this replica receives every control message.

        Raises:
            ConnectionError: The bus is unreachable (``controlbus.unreachable``).
        """
        ...

    async def publish_settle(
        self, kind: str, session_id: str, tool_call_id: str, data: Mapping[str, Any]
    ) -> None:
        """Offer a client result to the other replicas; failures are only logged."""
        ...

    async def abort_elsewhere(self, user_did: str, session_id: str) -> bool:
        """Ask every other replica to abort ``user_did``'s turns in ``session_id``.

        Returns:
            Whether one of them aborted a turn: at the first that did, or ``False`` once all
            said no, or when one did not answer within the reply timeout (logged).
        """
        ...

    async def aclose(self) -> None:
        """Leave the bus and release its resources (idempotent)."""
        ...
