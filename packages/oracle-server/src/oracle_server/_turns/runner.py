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

from langchain_core.messages import AIMessage

from oracle_core import (
    AbortSignal,
    OracleRuntime,
    SessionInfo,
    TurnRequest,
    UserInfo,
)
from oracle_server._auth.authenticator import AuthData
from oracle_server._errors import HTTPError
from oracle_server._timestamps import timestamp
from oracle_server._turns.events import ServerEventSink, stream_client_events
from oracle_server._turns.locks import TurnBusy, TurnLocks
from oracle_server._turns.runlog import MemoryRunLog, RunInfo, RunLog
from oracle_server._turns.stream import TurnStream

__all__ = ["ActiveTurn", "TurnInput", "TurnRunner", "public_error"]

logger = logging.getLogger("oracle.server.turns")

THINKING = "Thinking…"


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
        turn.reply = await stream_client_events(
            built.agent.astream(
                built.input,
                config=built.config,
                context=built.context,
                stream_mode=["messages", "updates"],
            ),
            turn.stream,
            base,
        )


def public_error(exc: BaseException) -> str:
    """The error text sent to the client: type and message, nothing else."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
