"""Human approval of tool calls in the server (plugins spec §20.2).

A turn whose tool call needs approval ends paused: the checkpoint holds the call, and
:meth:`TurnApprovals.paused` gives each waiting call a row in the approval store (its id is
what the user decides by), emits ``tool_approval_request`` to the run's stream and the
session's sockets, and a ``message`` asking for a yes or no, which clients that know
nothing of approvals show as the oracle's words.

The next turn of a paused session resumes it, inside the session's turn lock, whatever
started it (:meth:`TurnApprovals.answers_for`):

- ``POST /approvals/{id}`` records the decision and starts a resume turn, which applies
  every decision recorded for the session;
- a plain yes or no as the next message approves or declines every waiting call;
- any other message supersedes them (the model is told the user moved on, then gets the
  message);
- a request past its expiry is answered ``expired``.

The checkpoint says what is still waiting, so a pending approval survives a restart and a
decision applies once: a second resume finds nothing waiting and ends quietly. The rows
say whether to look: a turn reads the checkpoint only while its session has a row not yet
resumed, so turns of sessions that never paused cost one indexed query.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from oracle_core import ApprovalAnswer, OracleEvent, OracleRuntime, classify_reply
from oracle_core import args_hash as hash_args
from oracle_server._persistence import ApprovalRecord, ApprovalStatus, ApprovalStore
from oracle_server._turns.events import ServerEventSink

__all__ = ["APPROVAL_EVENT", "TurnApprovals", "approval_prompt", "waiting_output"]

logger = logging.getLogger("oracle.server.approvals")

APPROVAL_EVENT = "tool_approval_request"
"""The client event announcing a call that waits for the user's approval."""


def waiting_output(approval_id: str) -> str:
    """What a client shows as the result of a call waiting for approval."""
    return f"Waiting for your approval ({approval_id})"


def approval_prompt(records: Sequence[ApprovalRecord]) -> str:
    """The words asking the user to decide, for clients that show only messages."""
    if len(records) == 1:
        record = records[0]
        return (
            f"Approval needed: I want to run `{record.tool_name}` ({record.reason}). "
            "Reply yes to run it or no to cancel."
        )
    names = ", ".join(f"`{record.tool_name}`" for record in records)
    return f"Approval needed: I want to run {names}. Reply yes to run them all or no to cancel."


class TurnApprovals:
    """The approvals of the server's turns.

    Args:
        runtime: The booted runtime (its checkpoints say which calls wait).
        store: The approval rows.
        events: Where ``tool_approval_request`` goes (the run's stream and sockets).
    """

    def __init__(
        self, runtime: OracleRuntime, store: ApprovalStore, events: ServerEventSink
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.events = events

    async def answers_for(
        self, user_did: str, session_id: str, run_id: str, message: str | None
    ) -> dict[str, Any] | None:
        """The answers a turn resumes the session with, by interrupt id.

        ``None`` when nothing waits (the turn runs ``message`` as usual). With ``message``
        ``None`` (a resume turn) only recorded decisions and expiries answer, and ``{}``
        means there is nothing to resume yet. With a message every waiting call is
        answered: the message is the answer, or supersedes the calls.
        """
        # The rows say cheaply whether the thread may be paused; its checkpoint says
        # which calls really wait (a restart or another replica may have resumed some).
        recorded = await self.store.open_in(user_did, session_id)
        if not recorded:
            return None
        pending = await self.runtime.pending_approvals(user_did, session_id)
        waiting = {request.interrupt_id for request in pending}
        await self.store.mark_resumed(
            user_did, [r.interrupt_id for r in recorded if r.interrupt_id not in waiting]
        )
        if not pending:
            return None
        verdict = classify_reply(message) if message is not None else None
        answers: dict[str, Any] = {}
        superseded: list[str] = []
        for request in pending:
            record = await self.store.record(user_did, session_id, run_id, request)
            answer = await self._answer(record, message, verdict)
            if answer is None:
                continue
            answers[request.interrupt_id] = answer
            if answer.get("decision") == "superseded":
                superseded.append(request.interrupt_id)
        if superseded and message:
            # The new message follows the last refusal, so the model answers it once.
            last = superseded[-1]
            answers[last] = {**answers[last], "message": message}
        return answers

    async def _answer(
        self,
        record: ApprovalRecord,
        message: str | None,
        verdict: Literal["approved", "declined"] | None,
    ) -> dict[str, Any] | None:
        """The answer for one waiting call, recording a decision the message makes."""
        if record.status != "pending":
            return dict(record.answer or {"decision": record.status})
        status: ApprovalStatus
        if record.expired(self.store.now()):
            status = "expired"
        elif message is None:
            return None
        else:
            status = verdict or "superseded"
        answer = ApprovalAnswer(
            decision=status,
            decided_by=record.user_did if status != "expired" else None,
        ).model_dump(mode="json", by_alias=True, exclude_none=True)
        via: Literal["api", "message"] = "message"
        if await self.decide(record, status, answer, via=via):
            return answer
        # Decided meanwhile (a racing POST): that decision stands.
        fresh = await self.store.get(record.user_did, record.approval_id)
        if fresh is None or fresh.status == "pending":
            return None
        return dict(fresh.answer or {"decision": fresh.status})

    async def decide(
        self,
        record: ApprovalRecord,
        status: ApprovalStatus,
        answer: Mapping[str, Any],
        *,
        via: Literal["api", "message"],
        edited_args: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record and audit a decision on a pending approval; ``False`` when it was
        decided already."""
        edited_hash = hash_args(edited_args) if edited_args is not None else None
        decided = await self.store.decide(
            record.user_did,
            record.approval_id,
            status=status,
            answer=answer,
            decided_by=record.user_did if status != "expired" else None,
            via=via,
            edited_args_hash=edited_hash,
        )
        if decided:
            # The audit line: ids, the tool and hashes, never the arguments or the user.
            logger.info(
                "approvals.decided: %s %s for %s via %s, args %s%s",
                record.approval_id,
                status,
                record.tool_name,
                via,
                record.args_hash,
                f", edited to {edited_hash}" if edited_hash else "",
            )
        return decided

    async def waiting(self, user_did: str, session_id: str) -> list[ApprovalRecord]:
        """The session's calls waiting for a decision (from the rows: one indexed query)."""
        return [r for r in await self.store.open_in(user_did, session_id) if r.status == "pending"]

    async def resumed(self, user_did: str, answers: Mapping[str, Any]) -> None:
        """After a turn that resumed with ``answers``: the thread is past those calls."""
        await self.store.mark_resumed(user_did, answers.keys())

    async def paused(
        self, user_did: str, session_id: str, run_id: str, request_id: str
    ) -> list[ApprovalRecord]:
        """After a turn that paused: record the waiting calls and tell the client."""
        pending = await self.runtime.pending_approvals(user_did, session_id)
        records = [
            await self.store.record(user_did, session_id, run_id, request) for request in pending
        ]
        waiting = [record for record in records if record.status == "pending"]
        for record in waiting:
            self.events.emit(
                OracleEvent(
                    name=APPROVAL_EVENT,
                    payload=record.to_wire(),
                    session_id=session_id,
                    request_id=request_id,
                    user_did=user_did,
                    run_id=run_id,
                )
            )
        return waiting
