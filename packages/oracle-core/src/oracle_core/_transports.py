"""Starting turns from a plugin: the transport service (``ctx.transport``).

A plugin that brings messages in from elsewhere (a Slack listener, a scheduler, a group
room) starts a turn for a user with ``await ctx.transport.run_turn(TransportTurn(...))``
and gets the reply. The host runs it exactly as it runs a turn of its own clients: in
the server that is the per-session lock and double-texting policy, the run log, session
rows and titles, the tool policy, the subscription gate, the turn budget and events to
the user's sockets. ``session_for_room`` finds (or makes) the session a room's
conversation lives in.

The local implementation, :class:`LocalTurnTransport`, runs turns on the runtime with a
lock per session, the same four policies, and sessions kept in memory.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from langchain_core.messages import AIMessage

from oracle_core._errors import OracleError

if TYPE_CHECKING:
    from oracle_core._context import UserInfo
    from oracle_core._runtime import OracleRuntime

__all__ = [
    "MULTITASK_STRATEGIES",
    "LocalTurnTransport",
    "MultitaskStrategy",
    "TransportReply",
    "TransportTurn",
    "TurnBusyError",
    "TurnTransport",
]

MultitaskStrategy = Literal["enqueue", "reject", "interrupt", "rollback"]
"""What a message does while its session runs a turn (double texting)."""
MULTITASK_STRATEGIES: tuple[MultitaskStrategy, ...] = ("enqueue", "reject", "interrupt", "rollback")


class TurnBusyError(OracleError):
    """The session runs a turn and the policy is ``reject`` (``turn.busy``)."""

    code = "turn.busy"


@dataclass(frozen=True)
class TransportTurn:
    """A turn a plugin starts.

    Attributes:
        user: Whose turn it is (``did``; ``matrix_user_id`` when known).
        message: The user's message.
        session_id: The session; ``None`` takes ``room_id``'s (``session_for_room``),
            else a new one.
        room_id: The Matrix room (or other room) the conversation lives in.
        client: The transport's name (``slack``, ``matrix``, ``tasks``…), as sessions and
            ``rt_ctx.session.client`` record it.
        strategy: Double texting for this turn; ``None``: the session's, else the host's.
        state: Turn state (``browser_tools``…), as a client's message would carry.
    """

    user: UserInfo
    message: str
    session_id: str | None = None
    room_id: str | None = None
    client: str = "portal"
    strategy: MultitaskStrategy | None = None
    state: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TransportReply:
    """How the turn ended.

    Attributes:
        session_id: The session it ran in.
        status: ``finished``, ``aborted``, ``failed``, ``interrupted`` or ``paused``
            (waiting for the user's approval).
        text: The final answer ('' when there is none).
        run_id: The host's run id (rejoinable in the server), when it has one.
    """

    session_id: str
    status: str
    text: str
    run_id: str | None = None


class TurnTransport(Protocol):
    """Starts turns for plugins (``ctx.transport``)."""

    async def run_turn(self, turn: TransportTurn) -> TransportReply:
        """Run ``turn`` as the host runs its clients' turns; wait for its end.

        Raises:
            TurnBusyError: The session runs a turn and the policy is ``reject``.
            OracleError: The host refused it (the subscription gate, the turn budget);
                ``code`` says which.
        """
        ...

    async def session_for_room(self, user: UserInfo, room_id: str, *, client: str) -> str:
        """The session of ``user`` in ``room_id``: the newest one, else a new one."""
        ...


class LocalTurnTransport:
    """Turns on the runtime itself, one at a time per session; sessions in memory."""

    def __init__(self, runtime: OracleRuntime, *, policy: MultitaskStrategy = "enqueue") -> None:
        self._runtime = runtime
        self._policy = policy
        self._locks: dict[str, asyncio.Lock] = {}
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._rooms: dict[tuple[str, str], str] = {}

    async def session_for_room(self, user: UserInfo, room_id: str, *, client: str) -> str:
        key = (user.did, room_id)
        if key not in self._rooms:
            self._rooms[key] = str(uuid.uuid4())
        return self._rooms[key]

    async def run_turn(self, turn: TransportTurn) -> TransportReply:
        from oracle_core._agent import TurnRequest
        from oracle_core._context import SessionInfo

        session_id = turn.session_id
        if session_id is None:
            session_id = (
                await self.session_for_room(turn.user, turn.room_id, client=turn.client)
                if turn.room_id
                else str(uuid.uuid4())
            )
        strategy = turn.strategy or self._policy
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        running = self._running.get(session_id)
        if lock.locked():
            if strategy == "reject":
                raise TurnBusyError("A turn is already running for this session")
            if strategy in ("interrupt", "rollback") and running is not None:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                if strategy == "rollback":
                    await self._runtime.rollback_last_turn(turn.user.did, session_id)
        async with lock:
            request = TurnRequest(
                user=turn.user,
                session=SessionInfo(
                    id=session_id,
                    client=turn.client,  # type: ignore[arg-type]
                    room_id=turn.room_id,
                ),
                message=turn.message,
                state=dict(turn.state),
            )
            task = asyncio.get_running_loop().create_task(self._runtime.run_turn(request))
            self._running[session_id] = task
            try:
                final = await task
            except asyncio.CancelledError:
                if task.cancelled() and not _cancelling():
                    return TransportReply(session_id, "interrupted", "")
                raise
            finally:
                self._running.pop(session_id, None)
        if final.get("__interrupt__"):
            return TransportReply(session_id, "paused", "")
        answer = next(
            (m for m in reversed(final.get("messages", [])) if isinstance(m, AIMessage)), None
        )
        return TransportReply(session_id, "finished", str(answer.text) if answer else "")


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (not the turn it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
