"""Running turns: one at a time per session, each a run whose events go to the run log.

A turn runs in its own task, so a client that disconnects does not stop it (it finishes
and is checkpointed); only an abort, a session's deletion or shutdown cancels it. Its
events, plugin events of its run included, are numbered and written to the run log,
which responses stream from and a reconnecting client replays (see
:mod:`oracle_server._turns.runlog`).

Liveness: a turn whose agent sends nothing for ``idle_timeout`` while no tool runs (a
model stalled before its first token, or between two) and any turn still running at
``deadline`` end as ``failed`` with an ``error`` frame (``turn.model_timeout``,
``turn.deadline``); the session's lock is released as after any other end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from oracle_core import (
    AbortSignal,
    OracleRuntime,
    SessionInfo,
    TurnRequest,
    UserInfo,
)
from oracle_server._auth.authenticator import AuthData
from oracle_server._errors import HTTPError
from oracle_server._persistence import ApprovalRecord
from oracle_server._timestamps import timestamp
from oracle_server._turns.admission import FEWEST, TurnAdmission
from oracle_server._turns.approvals import TurnApprovals, approval_prompt, waiting_output
from oracle_server._turns.events import ServerEventSink, TurnProgress, stream_client_events
from oracle_server._turns.failures import TurnDeadline, TurnFailure, failure_of
from oracle_server._turns.locks import TurnBusy, TurnLocks
from oracle_server._turns.runlog import MemoryRunLog, RunInfo, RunLog
from oracle_server._turns.stream import TurnStream

__all__ = ["ActiveTurn", "TurnInput", "TurnRunner"]

logger = logging.getLogger("oracle.server.turns")

THINKING = "Thinking…"
IDLE_TIMEOUT_SECONDS = 90.0
DEADLINE_SECONDS = 900.0
ABORT_WAIT_SECONDS = 10.0
ABORT_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class TurnInput:
    """Everything a turn needs from the request.

    ``model`` is a checked model id for the main agent (``None``: the default); see
    ``TurnRequest.model``. ``resume`` marks a turn that only applies recorded approval
    decisions (``message`` is ignored): it ends at once when nothing is left to resume.
    """

    auth: AuthData
    session_id: str
    message: str
    request_id: str
    client: str = "portal"
    state: Mapping[str, Any] = field(default_factory=dict)
    timezone: str | None = None
    model: str | None = None
    resume: bool = False
    mcp_invocations: Mapping[str, str] = field(default_factory=dict)
    """The request's ``mcpInvocations`` (UCAN-28), given to the turn's user."""
    room_id: str | None = None
    """The Matrix room the turn belongs to (``rt_ctx.session.room_id``)."""
    ws_id: str | None = None
    """The socket that sent the turn, when known: frontend calls go to it first."""
    matrix_user_id: str | None = None
    """The user's Matrix id (``rt_ctx.user.matrix_user_id``)."""
    prepared: BaseMessage | None = None
    """The message as the model takes it (with its attachments); ``message`` stays the
    text the user typed."""
    strategy: str | None = None
    """What to do when the session already runs a turn (``enqueue``, ``reject``,
    ``interrupt``, ``rollback``); ``None`` takes the session's, else the deployment's."""


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
    failure: TurnFailure | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    progress: TurnProgress = field(default_factory=TurnProgress)
    approvals: list[ApprovalRecord] = field(default_factory=list)


class TurnRunner:
    """Starts turns, one per session at a time, and aborts them.

    Args:
        runtime: The booted core runtime.
        locks: Per-session turn locks (in memory, or Redis across replicas).
        events: The runtime's event sink, to attach streams to.
        policy: What a message does while its session runs a turn (double texting):
            ``enqueue`` (wait for it), ``reject`` (409), ``interrupt`` (cancel it,
            keeping what it checkpointed, then run) or ``rollback`` (cancel it, discard
            its progress, then run). A turn's own ``TurnInput.strategy`` wins.
        on_finished: Called after a turn ends (session bookkeeping).
        user_scope: Held around each turn for its user (keeps the user's database open).
        stored_delegation: The user's stored delegation (raw), adopted for the turn when
            the request brought none (SRV-42).
        runs: The run log (in memory by default).
        idle_timeout: Seconds the agent may send nothing while no tool runs
            (``TURN_IDLE_TIMEOUT_SECONDS``).
        deadline: Seconds a turn may run, from when it takes the session's lock
            (``TURN_DEADLINE_SECONDS``).
        concurrency: How many turns run at once on this replica at most
            (``TURN_CONCURRENCY``; fewer while the event loop is behind, see
            :class:`TurnAdmission`); the rest stay ``queued``, in arrival order, holding
            nothing but their session's lock. ``None`` for no bound.
        adaptive: Admit fewer than ``concurrency`` while the loop thread is saturated
            (``TURN_ADMISSION=adaptive``); otherwise the bound is the limit.
        approvals: Resumes sessions paused for a tool approval and records new pauses;
            ``None`` leaves paused threads to the caller.
        session_strategy: ``(user_did, session_id) -> policy``: the session's own
            double-texting policy, read for turns whose ``TurnInput.strategy`` is unset.

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
        idle_timeout: float = IDLE_TIMEOUT_SECONDS,
        deadline: float = DEADLINE_SECONDS,
        concurrency: int | None = None,
        adaptive: bool = False,
        approvals: TurnApprovals | None = None,
        session_strategy: Callable[[str, str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.session_strategy = session_strategy
        self.runtime = runtime
        self.locks = locks
        self.events = events
        self.policy = policy
        self.on_finished = on_finished
        self.user_scope = user_scope
        self.stored_delegation = stored_delegation
        self.runs: RunLog = runs or MemoryRunLog()
        self.idle_timeout = idle_timeout
        self.deadline = deadline
        self.approvals = approvals
        # Past what the replica can serve, more turns at once only lengthen every await
        # of all of them until pool waits time out; beyond the bound, turns wait their
        # turn instead of failing. Fewer are admitted while the loop falls behind.
        self.admission = (
            TurnAdmission(concurrency, fewest=FEWEST if adaptive else concurrency)
            if concurrency
            else None
        )
        self.active: dict[str, list[ActiveTurn]] = {}
        self.abort_elsewhere: Callable[[str, str], Awaitable[bool]] | None = None
        # Every turn task until it has fully ended, post-turn work included: the
        # shutdown waits for these, not only for the turns still running.
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting = True
        # Sessions being deleted: no turn starts in them meanwhile.
        self._closing: set[str] = set()

    async def start(self, turn_input: TurnInput) -> ActiveTurn:
        """Start a run for the turn; it waits for the session's running turn (``enqueue``,
        status ``queued`` meanwhile) or is refused at once (``reject``).

        Raises:
            HTTPError: 409 when the policy is ``reject`` and a turn is running, or while
                the session is being deleted; 503 while shutting down.
        """
        if not self._accepting:
            raise HTTPError(503, "Server shutting down")
        if turn_input.session_id in self._closing:
            raise HTTPError(409, "The session is being deleted", code="session.deleting")
        strategy = turn_input.strategy
        if strategy is None and self.session_strategy is not None:
            strategy = await self.session_strategy(turn_input.auth.did, turn_input.session_id)
        strategy = strategy or self.policy
        if strategy in ("interrupt", "rollback"):
            await self._cancel_running(turn_input, rollback=strategy == "rollback")
        waiting = strategy != "reject"
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
        self.events.streams[run_id] = turn.stream
        turn.task = asyncio.get_running_loop().create_task(
            self._run(turn, turn_input, hold, acquired=not waiting),
            name=f"turn:{turn.session_id}",
        )
        self._tasks.add(turn.task)
        turn.task.add_done_callback(self._tasks.discard)
        return turn

    async def _cancel_running(self, turn_input: TurnInput, *, rollback: bool) -> None:
        """Stop the session's turns for a message that takes their place (``interrupt``,
        ``rollback``), here and on other replicas; with ``rollback``, a turn that had
        started running leaves the thread as it was before it."""
        did, session_id = turn_input.auth.did, turn_input.session_id
        active = await self.runs.active_run(session_id)
        started = active is not None and active.status == "running"
        if not await self.abort(did, session_id):
            return
        if rollback and started:
            await self.runtime.rollback_last_turn(did, session_id)

    def turns_of(self, session_id: str) -> list[ActiveTurn]:
        """The session's queued and running turns in this process, oldest first."""
        return list(self.active.get(session_id, []))

    async def delegation_for(self, user_did: str, given: str | None) -> str | None:
        """The delegation a turn of ``user_did`` adopts: the request's (``given``), else
        the stored one (SRV-42)."""
        if given is None and self.stored_delegation is not None:
            return await self.stored_delegation(user_did)
        return given

    async def abort(self, user_did: str, session_id: str) -> bool:
        """Abort the caller's turns in ``session_id`` (running and queued), here and, with
        several replicas, on the others; ``False`` when there is none."""
        aborted = await self.abort_here(user_did, session_id)
        if self.abort_elsewhere is not None and await self.abort_elsewhere(user_did, session_id):
            # The other replica answered once it had stopped its turn, not once the turn
            # had ended (that can outlast the bus's reply timeout): the run log, shared by
            # every replica, tells when ``done`` is written.
            await self._run_ended(session_id)
            aborted = True
        return aborted

    async def abort_for_replica(self, user_did: str, session_id: str) -> bool:
        """Another replica's abort: stop the caller's turns here and answer at once
        (the asker waits for their end in the run log)."""
        return await self.abort_here(user_did, session_id, wait=False)

    async def _run_ended(self, session_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ABORT_WAIT_SECONDS
        while await self.runs.active_run(session_id) is not None:
            if loop.time() >= deadline:
                logger.warning("turns.abort_slow: a run on another replica had not ended")
                return
            await asyncio.sleep(ABORT_POLL_SECONDS)

    async def abort_here(self, user_did: str, session_id: str, *, wait: bool = True) -> bool:
        """Abort the caller's turns in ``session_id`` in this process and (with ``wait``)
        wait until they have ended (``done`` written, post-turn work finished; up to
        ``ABORT_WAIT_SECONDS``); ``False`` when there is none."""
        ending: list[ActiveTurn] = []
        for turn in self.turns_of(session_id):
            if turn.user_did != user_did or turn.task is None or turn.task.done():
                continue
            if turn.status not in ("queued", "running"):
                # Ending already: cancelling its post-turn work would only cut it short.
                ending.append(turn)
                continue
            turn.abort_signal.abort("aborted by the user")
            turn.task.cancel()
            ending.append(turn)
        if ending and wait:
            waits = [asyncio.ensure_future(turn.done.wait()) for turn in ending]
            _, pending = await asyncio.wait(waits, timeout=ABORT_WAIT_SECONDS)
            for waiter in pending:
                waiter.cancel()
            if pending:
                logger.warning("turns.abort_slow: %d turns had not ended", len(pending))
        return bool(ending)

    @contextlib.asynccontextmanager
    async def closing(self, session_id: str) -> AsyncIterator[None]:
        """While held, no turn starts in ``session_id`` (its deletion holds it)."""
        self._closing.add(session_id)
        try:
            yield
        finally:
            self._closing.discard(session_id)

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
        slotted = False
        try:
            if not acquired:
                await hold.__aenter__()
                acquired = True
            if self.admission is not None:
                await self.admission.acquire()
                slotted = True
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
            await self._execute_in_time(turn, turn_input, base)
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
            turn.failure = failure_of(exc, in_tool=bool(turn.progress.running_tools))
            # The exception's text may quote the user's data: its class, the code and
            # where it was raised, never its message.
            logger.error(
                "turns.failed: %s in session %s: %s raised at\n%s",
                turn.failure.code,
                turn.session_id,
                type(exc).__name__,
                "".join(traceback.format_list(traceback.extract_tb(exc.__traceback__)[-8:])),
            )
            stream.push(
                "error", {**turn.failure.to_frame(), "runId": turn.run_id, "timestamp": timestamp()}
            )
        finally:
            try:
                await self._end(turn, hold, acquired=acquired)
            finally:
                # Held through the post-turn bookkeeping too: it writes to the database.
                if slotted and self.admission is not None:
                    self.admission.release()

    async def _end(
        self, turn: ActiveTurn, hold: AbstractAsyncContextManager[None], *, acquired: bool
    ) -> None:
        """``done``, the lock released, the log flushed, the post-turn work done."""
        stream = turn.stream
        try:
            stream.finish(turn.status)  # type: ignore[arg-type]
            self.events.streams.pop(turn.run_id, None)
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
        finally:
            turn.done.set()

    async def _execute_in_time(
        self, turn: ActiveTurn, turn_input: TurnInput, base: Mapping[str, Any]
    ) -> None:
        deadline = asyncio.timeout(self.deadline)
        try:
            async with deadline:
                if self.user_scope is None:
                    await self._execute(turn, turn_input, base)
                else:
                    async with self.user_scope(turn.user_did):
                        await self._execute(turn, turn_input, base)
        except TimeoutError as exc:
            if deadline.expired():
                raise TurnDeadline(f"past {self.deadline} s") from exc
            raise

    async def _execute(
        self, turn: ActiveTurn, turn_input: TurnInput, base: Mapping[str, Any]
    ) -> None:
        auth = turn_input.auth
        delegation = await self.delegation_for(
            auth.did, auth.delegation.raw if auth.delegation else None
        )
        user = UserInfo(
            did=auth.did,
            matrix_user_id=turn_input.matrix_user_id,
            ucan_delegation=delegation,
            timezone=turn_input.timezone or auth.timezone,
            mcp_invocations=turn_input.mcp_invocations,
        )
        session = SessionInfo(
            id=turn.session_id,
            client=turn_input.client,  # type: ignore[arg-type]
            ws_id=turn_input.ws_id,
            request_id=turn.request_id,
            room_id=turn_input.room_id,
            run_id=turn.run_id,
        )
        resume: dict[str, Any] | None = None
        if self.approvals is not None:
            # Inside the session's lock: no other turn resumes the same calls meanwhile.
            message = None if turn_input.resume else turn_input.message
            resume = await self.approvals.answers_for(
                auth.did, turn.session_id, turn.run_id, message
            )
        if turn_input.resume and not resume:
            return  # nothing decided is waiting: applied already, or still undecided
        built = await self.runtime.build_agent(
            TurnRequest(
                user=user,
                session=session,
                message=None if resume else (turn_input.prepared or turn_input.message),
                state=turn_input.state,
                abort_signal=turn.abort_signal,
                model=turn_input.model,
                resume=resume or None,
            )
        )
        turn.reply = await stream_client_events(
            built.agent.astream(
                built.input,
                config=built.config,
                context=built.context,
                stream_mode=["messages", "updates"],
            ),
            turn.stream,
            base,
            idle_timeout=self.idle_timeout,
            progress=turn.progress,
        )
        if self.approvals is not None and resume:
            await self.approvals.resumed(auth.did, resume)
        if turn.progress.interrupted and self.approvals is not None:
            await self._paused(turn, base)

    async def _paused(self, turn: ActiveTurn, base: Mapping[str, Any]) -> None:
        """The turn ended waiting for the user's approval: tell the client."""
        assert self.approvals is not None
        turn.approvals = await self.approvals.paused(
            turn.user_did, turn.session_id, turn.run_id, turn.request_id
        )
        if not turn.approvals:
            return
        for record in turn.approvals:
            # The call's running indicator ends here; the resume runs it in a new run.
            turn.stream.push(
                "tool_call",
                {
                    **base,
                    "toolName": record.tool_name,
                    "args": {**record.args, "toolName": record.tool_name},
                    "status": "done",
                    "eventId": record.tool_call_id,
                    "output": waiting_output(record.approval_id),
                    "approvalId": record.approval_id,
                },
            )
        prompt = approval_prompt(turn.approvals)
        turn.stream.push("message", {"content": prompt, "timestamp": timestamp()})
        # The turn's answer is the question: the JSON reply, Matrix and the chat log say it.
        turn.reply = AIMessage(content=prompt, id=f"approval-{turn.run_id}")
