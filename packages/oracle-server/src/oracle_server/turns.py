"""Running turns: one at a time per session, as background tasks that stream frames.

A turn runs in its own task, so a client that disconnects does not stop it (it finishes
and is checkpointed); only an abort or shutdown cancels it. Frames go to a queue the SSE
response drains; plugin events for the turn's request join the same queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage

from oracle_core import (
    AbortSignal,
    OracleEvent,
    OracleRuntime,
    SessionInfo,
    TurnRequest,
    UserInfo,
)
from oracle_server.auth import AuthData
from oracle_server.errors import HTTPError
from oracle_server.history import message_id
from oracle_server.sse import HEARTBEAT, HEARTBEAT_SECONDS, frame, timestamp
from oracle_server.turnlock import TurnBusy, TurnLocks

__all__ = ["ActiveTurn", "ServerEventSink", "TurnInput", "TurnRunner"]

logger = logging.getLogger("oracle.server.turns")

THINKING = "Thinking…"
# Client event names (SRV-31) for the runtime's emit channels.
EVENT_NAMES = {
    "tool_call": "tool_call",
    "action_call": "action_call",
    "render_component": "render_component",
    "reasoning": "reasoning",
    "browser_tool_call": "browser_tool_call",
    "router": "router.update",
    "message_cache_invalidation": "message_cache_invalidation",
}


@dataclass(frozen=True)
class TurnInput:
    """Everything a turn needs from the request."""

    auth: AuthData
    session_id: str
    message: str
    request_id: str
    client: str = "portal"
    state: Mapping[str, Any] = field(default_factory=dict)
    timezone: str | None = None


class TurnStream:
    """The frames of one turn, in order, for the response to drain."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    def push(self, event: str, data: Any) -> None:
        """Queue a frame (ignored once the turn ended)."""
        if not self.closed:
            self._queue.put_nowait(frame(event, data))

    def close(self) -> None:
        """No more frames."""
        if not self.closed:
            self.closed = True
            self._queue.put_nowait(None)

    async def frames(self) -> AsyncIterator[bytes]:
        """Frames as they come, with a heartbeat comment every 15 s of silence."""
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), HEARTBEAT_SECONDS)
            except TimeoutError:
                yield HEARTBEAT
                continue
            if item is None:
                return
            yield item


@dataclass
class ActiveTurn:
    """A running turn."""

    session_id: str
    user_did: str
    request_id: str
    stream: TurnStream
    abort_signal: AbortSignal
    message: str = ""
    home_server: str | None = None
    client: str = "portal"
    task: asyncio.Task[None] | None = None
    status: str = "running"
    reply: AIMessage | None = None
    error: BaseException | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ServerEventSink:
    """Routes plugin events (``rt_ctx.emit``) to the turn's stream and to socket.io."""

    def __init__(self) -> None:
        self.streams: dict[str, TurnStream] = {}
        self.broadcast: Callable[[OracleEvent], None] | None = None

    def emit(self, event: OracleEvent) -> None:
        name = EVENT_NAMES.get(event.name, event.name)
        payload = {"sessionId": event.session_id, "requestId": event.request_id, **event.payload}
        stream = self.streams.get(event.request_id or "")
        if stream is not None:
            stream.push(name, payload)
        if self.broadcast is not None:
            try:
                self.broadcast(event)
            except Exception:
                logger.exception("socket broadcast of %s failed", event.name)


def _tool_messages(update: Any) -> list[ToolMessage]:
    items = update if isinstance(update, list) else [update]
    found: list[ToolMessage] = []
    for item in items:
        if isinstance(item, Mapping):
            found.extend(m for m in item.get("messages", []) if isinstance(m, ToolMessage))
    return found


def _ai_messages(update: Any) -> list[AIMessage]:
    items = update if isinstance(update, list) else [update]
    found: list[AIMessage] = []
    for item in items:
        if isinstance(item, Mapping):
            found.extend(m for m in item.get("messages", []) if isinstance(m, AIMessage))
    return found


def _is_main_model(metadata: Mapping[str, Any]) -> bool:
    namespace = str(metadata.get("langgraph_checkpoint_ns") or metadata.get("checkpoint_ns") or "")
    # Nested graphs (sub-agents) add "|" segments; their tokens are not the reply.
    return metadata.get("langgraph_node") == "model" and "|" not in namespace


class TurnRunner:
    """Starts turns, one per session at a time, and aborts them.

    Args:
        runtime: The booted core runtime.
        locks: Per-session turn locks (in memory, or Redis across replicas).
        events: The runtime's event sink, to attach streams to.
        policy: ``enqueue`` (wait for the running turn) or ``reject`` (409).
        on_finished: Called after a turn ends (session bookkeeping).
        user_scope: Held around each turn for its user (keeps the user's database open).
        stored_delegation: The user's stored delegation (raw), adopted for the turn when
            the request brought none (SRV-42).
    """

    def __init__(
        self,
        runtime: OracleRuntime,
        locks: TurnLocks,
        events: ServerEventSink,
        *,
        policy: str = "enqueue",
        on_finished: Callable[[ActiveTurn], Any] | None = None,
        user_scope: Callable[[str], AbstractAsyncContextManager[Any]] | None = None,
        stored_delegation: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.locks = locks
        self.events = events
        self.policy = policy
        self.on_finished = on_finished
        self.user_scope = user_scope
        self.stored_delegation = stored_delegation
        self.active: dict[str, ActiveTurn] = {}
        self._accepting = True

    async def start(self, turn_input: TurnInput) -> ActiveTurn:
        """Take the session's turn lock (waiting or refusing per policy) and start the turn.

        Raises:
            HTTPError: 409 when the policy is ``reject`` and a turn is running; 503 while
                shutting down.
        """
        if not self._accepting:
            raise HTTPError(503, "Server shutting down")
        hold = self.locks.hold(turn_input.session_id, wait=self.policy != "reject")
        try:
            await hold.__aenter__()
        except TurnBusy as exc:
            raise HTTPError(409, "A turn is already running for this session") from exc
        turn = ActiveTurn(
            session_id=turn_input.session_id,
            user_did=turn_input.auth.did,
            request_id=turn_input.request_id,
            stream=TurnStream(),
            abort_signal=AbortSignal(),
            message=turn_input.message,
            home_server=turn_input.auth.home_server,
            client=turn_input.client,
        )
        self.active[turn.session_id] = turn
        self.events.streams[turn.request_id] = turn.stream
        turn.task = asyncio.get_running_loop().create_task(
            self._run(turn, turn_input, hold), name=f"turn:{turn.session_id}"
        )
        return turn

    async def abort(self, user_did: str, session_id: str) -> bool:
        """Abort the caller's running turn in ``session_id``; ``False`` when there is none."""
        turn = self.active.get(session_id)
        if turn is None or turn.user_did != user_did or turn.task is None or turn.task.done():
            return False
        turn.abort_signal.abort("aborted by the user")
        turn.task.cancel()
        return True

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109 - a grace period, not a deadline
        """Stop accepting turns, let running ones finish for ``timeout``, then abort them."""
        self._accepting = False
        tasks = [t.task for t in self.active.values() if t.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            turn = next((t for t in self.active.values() if t.task is task), None)
            if turn is not None:
                turn.stream.push(
                    "error", {"error": "Server shutting down", "timestamp": timestamp()}
                )
                turn.abort_signal.abort("shutdown")
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def _run(
        self, turn: ActiveTurn, turn_input: TurnInput, hold: AbstractAsyncContextManager[None]
    ) -> None:
        stream = turn.stream
        base = {"sessionId": turn.session_id, "requestId": turn.request_id}
        try:
            stream.push(
                "reasoning",
                {
                    **base,
                    "reasoning": THINKING,
                    "reasoningDetails": [{"type": "thinking", "text": THINKING}],
                    "isComplete": False,
                    "timestamp": timestamp(),
                },
            )
            if self.user_scope is None:
                await self._execute(turn, turn_input, base)
            else:
                async with self.user_scope(turn.user_did):
                    await self._execute(turn, turn_input, base)
            stream.push(
                "reasoning",
                {**base, "reasoning": "", "isComplete": True, "timestamp": timestamp()},
            )
            turn.status = "finished"
        except asyncio.CancelledError:
            turn.status = "aborted"
        except Exception as exc:
            turn.status = "failed"
            turn.error = exc
            logger.exception("turn failed in session %s", turn.session_id)
            stream.push("error", {"error": public_error(exc), "timestamp": timestamp()})
        finally:
            stream.push("done", {"status": turn.status, "timestamp": timestamp()})
            stream.close()
            self.events.streams.pop(turn.request_id, None)
            if self.active.get(turn.session_id) is turn:
                del self.active[turn.session_id]
            with contextlib.suppress(Exception):
                await hold.__aexit__(None, None, None)
            if self.on_finished is not None:
                try:
                    result = self.on_finished(turn)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    logger.exception("post-turn bookkeeping failed")
            turn.done.set()

    async def _execute(
        self, turn: ActiveTurn, turn_input: TurnInput, base: Mapping[str, Any]
    ) -> None:
        auth = turn_input.auth
        delegation = auth.delegation.raw if auth.delegation else None
        if delegation is None and self.stored_delegation is not None:
            delegation = await self.stored_delegation(auth.did)
        user = UserInfo(
            did=auth.did,
            ucan_delegation=delegation,
            timezone=turn_input.timezone or auth.timezone,
        )
        session = SessionInfo(
            id=turn.session_id,
            client=turn_input.client,  # type: ignore[arg-type]
            request_id=turn.request_id,
        )
        built = await self.runtime.build_agent(
            TurnRequest(
                user=user,
                session=session,
                message=turn_input.message,
                state=turn_input.state,
                abort_signal=turn.abort_signal,
            )
        )
        stream = turn.stream
        reply: AIMessage | None = None
        async for mode, data in built.agent.astream(
            built.input,
            config=built.config,
            context=built.context,
            stream_mode=["messages", "updates"],
        ):
            if mode == "messages":
                chunk, metadata = data
                if isinstance(chunk, AIMessageChunk) and _is_main_model(metadata):
                    text = chunk.text
                    if text:
                        stream.push("message", {"content": text, "timestamp": timestamp()})
                continue
            for node, update in data.items():
                for message in _ai_messages(update):
                    for call in message.tool_calls:
                        args = dict(call["args"])
                        stream.push(
                            "tool_call",
                            {
                                **base,
                                "toolName": call["name"],
                                "args": {**args, "toolName": call["name"]},
                                "status": "isRunning",
                                "eventId": call.get("id"),
                            },
                        )
                    if not message.tool_calls:
                        reply = message
                if node == "tools" or node.endswith("tools"):
                    for result in _tool_messages(update):
                        stream.push(
                            "tool_call",
                            {
                                **base,
                                "toolName": result.name,
                                "args": {"toolName": result.name},
                                "status": "done",
                                "eventId": result.tool_call_id,
                                "output": str(result.content),
                            },
                        )
        turn.reply = reply


def public_error(exc: BaseException) -> str:
    """The error text sent to the client: type and message, nothing else."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def reply_body(turn: ActiveTurn) -> dict[str, Any]:
    """The non-stream answer of a finished turn (SRV-24)."""
    reply: BaseMessage | None = turn.reply
    content = str(reply.text) if reply is not None else ""
    return {
        "message": {
            "type": "ai",
            "content": content,
            "id": message_id(reply) if reply is not None else turn.request_id,
        },
        "sessionId": turn.session_id,
    }
