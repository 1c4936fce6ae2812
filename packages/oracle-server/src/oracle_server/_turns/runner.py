"""Running turns: one at a time per session, each a run whose events go to the run log.

A turn runs in its own task, so a client that disconnects does not stop it (it finishes
and is checkpointed); only an abort or shutdown cancels it. Its events, plugin events for
its request included, are numbered and written to the run log, which responses stream
from and a reconnecting client replays (see :mod:`oracle_server._turns.runlog`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
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
from oracle_server._auth.authenticator import AuthData
from oracle_server._http.errors import HTTPError
from oracle_server._http.history import message_id
from oracle_server._http.sse import timestamp
from oracle_server._turns.locks import TurnBusy, TurnLocks
from oracle_server._turns.runlog import ACTIVE, MemoryRunLog, RunEvent, RunInfo, RunLog, RunStatus

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
    """Everything a turn needs from the request.

    ``model`` is a checked model id for the main agent (``None``: the default); see
    ``TurnRequest.model``.
    """

    auth: AuthData
    session_id: str
    message: str
    request_id: str
    client: str = "portal"
    state: Mapping[str, Any] = field(default_factory=dict)
    timezone: str | None = None
    model: str | None = None


class TurnStream:
    """The events of one run, numbered and written to the run log in order.

    ``push`` is synchronous (plugin events arrive from sync code); one writer task
    appends what was pushed to the log, so numbering, order and the final status stay
    consistent however fast events come. Responses read the log, not this object.
    """

    def __init__(self, log: RunLog, run_id: str) -> None:
        self.log = log
        self.run_id = run_id
        self.closed = False
        self._seq = 0
        self._text: list[str] = []
        self._queue: asyncio.Queue[RunEvent | RunStatus] = asyncio.Queue()
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def push(self, event: str, data: Any) -> None:
        """Number an event and queue it for the log (ignored once the run ended)."""
        if self.closed:
            return
        self._seq += 1
        if event == "message":
            self._text.append(str(data.get("content", "")))
        self._queue.put_nowait(RunEvent(self._seq, event, dict(data)))

    @property
    def text(self) -> str:
        """The reply text streamed so far."""
        return "".join(self._text)

    def set_status(self, status: RunStatus) -> None:
        """Record a status change once the events before it are written."""
        if not self.closed:
            self._queue.put_nowait(status)

    def finish(self, status: RunStatus) -> None:
        """Push ``done`` (with ``partialText`` unless finished) and end the run."""
        data: dict[str, Any] = {"status": status, "timestamp": timestamp()}
        if status != "finished":
            data[status] = True
            if self.text:
                data["partialText"] = self.text
        self.push("done", data)
        self.set_status(status)
        self.closed = True

    async def flushed(self) -> None:
        """Wait until every pushed event and status is in the log."""
        await asyncio.shield(self._writer)

    async def _write(self) -> None:
        while True:
            item = await self._queue.get()
            events: list[RunEvent] = []
            statuses: list[RunStatus] = []
            while True:
                if isinstance(item, RunEvent):
                    events.append(item)
                else:
                    statuses.append(item)
                if self._queue.empty():
                    break
                item = self._queue.get_nowait()
            try:
                if events:
                    await self.log.append(self.run_id, events)
                for status in statuses:
                    await self.log.set_status(self.run_id, status)
            except Exception as exc:
                logger.warning("runs.write_failed: %s", type(exc).__name__)
            if statuses and statuses[-1] not in ACTIVE:
                return


@dataclass
class ActiveTurn:
    """A running turn."""

    session_id: str
    user_did: str
    request_id: str
    stream: TurnStream
    abort_signal: AbortSignal
    run_id: str = ""
    message: str = ""
    home_server: str | None = None
    client: str = "portal"
    task: asyncio.Task[None] | None = None
    status: str = "queued"
    reply: AIMessage | None = None
    error: BaseException | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ServerEventSink:
    """Routes plugin events (``rt_ctx.emit``) to the turn's stream and to socket.io.

    Args:
        broadcast: Sends an event to the session's sockets (the socket.io gateway).
    """

    def __init__(self, broadcast: Callable[[OracleEvent], None] | None = None) -> None:
        self.streams: dict[str, TurnStream] = {}
        self.broadcast = broadcast

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
        runs: The run log (in memory by default).

    Attributes:
        abort_elsewhere: With several replicas (SRV-54), asks the others to abort the
            caller's turns of a session (``(user_did, session_id) -> aborted``); ``None``
            with one replica.
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
        runs: RunLog | None = None,
    ) -> None:
        self.runtime = runtime
        self.locks = locks
        self.events = events
        self.policy = policy
        self.on_finished = on_finished
        self.user_scope = user_scope
        self.stored_delegation = stored_delegation
        self.runs: RunLog = runs or MemoryRunLog()
        self.active: dict[str, list[ActiveTurn]] = {}
        self.abort_elsewhere: Callable[[str, str], Awaitable[bool]] | None = None
        # Every turn task until it has fully ended, post-turn work included: the
        # shutdown waits for these, not only for the turns still running.
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting = True

    async def start(self, turn_input: TurnInput) -> ActiveTurn:
        """Start a run for the turn; it waits for the session's running turn (``enqueue``,
        status ``queued`` meanwhile) or is refused at once (``reject``).

        Raises:
            HTTPError: 409 when the policy is ``reject`` and a turn is running; 503 while
                shutting down.
        """
        if not self._accepting:
            raise HTTPError(503, "Server shutting down")
        waiting = self.policy != "reject"
        hold = self.locks.hold(turn_input.session_id, wait=waiting)
        if not waiting:
            try:
                await hold.__aenter__()
            except TurnBusy as exc:
                raise HTTPError(409, "A turn is already running for this session") from exc
        run_id = uuid.uuid4().hex
        turn = ActiveTurn(
            session_id=turn_input.session_id,
            user_did=turn_input.auth.did,
            request_id=turn_input.request_id,
            stream=TurnStream(self.runs, run_id),
            abort_signal=AbortSignal(),
            run_id=run_id,
            message=turn_input.message,
            home_server=turn_input.auth.home_server,
            client=turn_input.client,
        )
        await self.runs.create(
            RunInfo(
                run_id=run_id,
                session_id=turn.session_id,
                user_did=turn.user_did,
                request_id=turn.request_id,
                status="queued",
            )
        )
        turn.stream.push("run", {"runId": run_id, "requestId": turn.request_id})
        self.active.setdefault(turn.session_id, []).append(turn)
        self.events.streams[turn.request_id] = turn.stream
        turn.task = asyncio.get_running_loop().create_task(
            self._run(turn, turn_input, hold, acquired=not waiting),
            name=f"turn:{turn.session_id}",
        )
        self._tasks.add(turn.task)
        turn.task.add_done_callback(self._tasks.discard)
        return turn

    def turns_of(self, session_id: str) -> list[ActiveTurn]:
        """The session's queued and running turns in this process, oldest first."""
        return list(self.active.get(session_id, []))

    async def abort(self, user_did: str, session_id: str) -> bool:
        """Abort the caller's turns in ``session_id`` (running and queued), here and, with
        several replicas, on the others; ``False`` when there is none."""
        aborted = await self.abort_here(user_did, session_id)
        if self.abort_elsewhere is not None:
            aborted = await self.abort_elsewhere(user_did, session_id) or aborted
        return aborted

    async def abort_here(self, user_did: str, session_id: str) -> bool:
        """Abort the caller's turns in ``session_id`` in this process; ``False`` when there
        is none."""
        aborted = False
        for turn in self.turns_of(session_id):
            if turn.user_did != user_did or turn.task is None or turn.task.done():
                continue
            turn.abort_signal.abort("aborted by the user")
            turn.task.cancel()
            aborted = True
        return aborted

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109 - a grace period, not a deadline
        """Stop accepting turns, let running ones finish for ``timeout``, then abort them."""
        self._accepting = False
        turns = [t for queue in self.active.values() for t in queue if t.task is not None]
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for turn in turns:
            if turn.task in pending:
                turn.stream.push(
                    "error", {"error": "Server shutting down", "timestamp": timestamp()}
                )
                turn.abort_signal.abort("shutdown")
                turn.task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def _run(
        self,
        turn: ActiveTurn,
        turn_input: TurnInput,
        hold: AbstractAsyncContextManager[None],
        *,
        acquired: bool,
    ) -> None:
        stream = turn.stream
        base = {"sessionId": turn.session_id, "requestId": turn.request_id}
        try:
            if not acquired:
                await hold.__aenter__()
                acquired = True
            turn.status = "running"
            stream.set_status("running")
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
            stream.finish(turn.status)  # type: ignore[arg-type]
            self.events.streams.pop(turn.request_id, None)
            queue = self.active.get(turn.session_id, [])
            if turn in queue:
                queue.remove(turn)
            if not queue:
                self.active.pop(turn.session_id, None)
            if acquired:
                with contextlib.suppress(Exception):
                    await hold.__aexit__(None, None, None)
            with contextlib.suppress(Exception):
                await stream.flushed()
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
                model=turn_input.model,
            )
        )
        stream = turn.stream
        reply: AIMessage | None = None
        call_args: dict[str, dict[str, Any]] = {}
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
                        if call.get("id"):
                            call_args[str(call["id"])] = args
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
                                # The client replaces the running call's message with
                                # this one: repeat the arguments.
                                "args": {
                                    **call_args.get(result.tool_call_id, {}),
                                    "toolName": result.name,
                                },
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
