"""Decisions on tool approvals (plugins spec §20.2): the ``tool_approvals`` table.

The paused thread's checkpoint says which calls wait for the user; this table gives each
of them a stable id to decide by, shared by every replica, and keeps the audit: who
decided, when, how, and a hash of the arguments (never the arguments the model sent; the
ones shown to the user went through the tool's redaction hook). A decision is taken once:
the update applies only to a row still ``pending``, so two racing decisions cannot both
win.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import RowMapping, delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_core import ApprovalRequest
from oracle_server._persistence.sessions import to_js_iso
from oracle_server._persistence.tables import insert_for, tool_approvals

__all__ = ["ApprovalRecord", "ApprovalStatus", "ApprovalStore"]

ApprovalStatus = Literal["pending", "approved", "declined", "expired", "superseded"]


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval request and, once decided, its decision.

    Attributes:
        approval_id: The id the user decides by (``apr_…``).
        user_did: Who may decide; every read is scoped to it.
        session_id: The paused session.
        run_id: The run that paused.
        interrupt_id: LangGraph's id of the interrupt (what the thread resumes by).
        tool_call_id: The model's id of the call.
        tool_name: The tool as bound.
        args: The arguments as shown to the user (redacted).
        args_hash: Hash of the model's arguments, unredacted.
        reason: The policy rule that asked for approval.
        requested_at: When the call paused.
        expires_at: When an unanswered request counts as declined.
        status: ``pending`` or the decision.
        decided_by: The DID that decided (``None`` for an expiry).
        decided_at: When it was decided.
        decided_via: ``api`` (``POST /approvals``) or ``message`` (a reply in the chat).
        edited_args_hash: Hash of the arguments the user approved instead, if edited.
        answer: The ``ApprovalAnswer`` the thread resumes with, as plain data.
        resumed_at: When the thread was found past the call (``None``: it may still
            wait on it).
    """

    approval_id: str
    user_did: str
    session_id: str
    run_id: str
    interrupt_id: str
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    args_hash: str
    reason: str
    requested_at: datetime
    expires_at: datetime
    status: ApprovalStatus
    decided_by: str | None = None
    decided_at: datetime | None = None
    decided_via: str | None = None
    edited_args_hash: str | None = None
    answer: dict[str, Any] | None = None
    resumed_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the request has passed its expiry."""
        return now >= self.expires_at

    def to_wire(self) -> dict[str, Any]:
        """The ``tool_approval_request`` payload and ``GET /approvals`` item."""
        wire: dict[str, Any] = {
            "approvalId": self.approval_id,
            "sessionId": self.session_id,
            "runId": self.run_id,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "args": self.args,
            "reason": self.reason,
            "requestedAt": to_js_iso(self.requested_at),
            "expiresAt": to_js_iso(self.expires_at),
            "status": self.status,
        }
        if self.status == "pending" and self.expired(datetime.now(UTC)):
            wire["status"] = "expired"
        if self.decided_at is not None:
            wire["decidedAt"] = to_js_iso(self.decided_at)
            wire["decidedVia"] = self.decided_via
        return wire


class ApprovalStore:
    """The ``tool_approvals`` table.

    Args:
        engine: The server database.
        clock: Unix time in seconds.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    def now(self) -> datetime:
        """The store's clock as an aware UTC datetime."""
        return datetime.fromtimestamp(self._clock(), UTC)

    async def record(
        self, user_did: str, session_id: str, run_id: str, request: ApprovalRequest
    ) -> ApprovalRecord:
        """The row of a paused call, created on first sight (an interrupt is recorded once
        whichever turn sees it first)."""
        statement = (
            insert_for(self._engine.dialect.name, tool_approvals)
            .values(
                approval_id=f"apr_{secrets.token_hex(12)}",
                user_did=user_did,
                session_id=session_id,
                run_id=run_id,
                interrupt_id=request.interrupt_id,
                tool_call_id=request.tool_call_id,
                tool_name=request.tool_name,
                args=dict(request.args),
                args_hash=request.args_hash,
                reason=request.reason,
                requested_at=request.requested_at,
                expires_at=request.expires_at,
                status="pending",
            )
            .on_conflict_do_nothing(
                index_elements=[tool_approvals.c.user_did, tool_approvals.c.interrupt_id]
            )
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)
            row = (
                (
                    await conn.execute(
                        select(tool_approvals).where(
                            tool_approvals.c.user_did == user_did,
                            tool_approvals.c.interrupt_id == request.interrupt_id,
                        )
                    )
                )
                .mappings()
                .one()
            )
        return _record(row)

    async def get(self, user_did: str, approval_id: str) -> ApprovalRecord | None:
        """The user's approval ``approval_id``; ``None`` for an unknown id or another
        user's."""
        query = select(tool_approvals).where(
            tool_approvals.c.user_did == user_did, tool_approvals.c.approval_id == approval_id
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else _record(row)

    async def by_interrupt(self, user_did: str, interrupt_id: str) -> ApprovalRecord | None:
        """The row of interrupt ``interrupt_id`` of the user's, if recorded."""
        query = select(tool_approvals).where(
            tool_approvals.c.user_did == user_did, tool_approvals.c.interrupt_id == interrupt_id
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else _record(row)

    async def open_in(self, user_did: str, session_id: str) -> list[ApprovalRecord]:
        """The session's approvals its thread may still be paused on, oldest first: one
        indexed query, empty for nearly every turn."""
        query = (
            select(tool_approvals)
            .where(
                tool_approvals.c.user_did == user_did,
                tool_approvals.c.session_id == session_id,
                tool_approvals.c.resumed_at.is_(None),
            )
            .order_by(tool_approvals.c.requested_at)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [_record(row) for row in rows]

    async def mark_resumed(self, user_did: str, interrupt_ids: Iterable[str]) -> None:
        """Note that the thread is past these calls (resumed, or no longer paused)."""
        ids = list(interrupt_ids)
        if not ids:
            return
        statement = (
            update(tool_approvals)
            .where(
                tool_approvals.c.user_did == user_did,
                tool_approvals.c.interrupt_id.in_(ids),
                tool_approvals.c.resumed_at.is_(None),
            )
            .values(resumed_at=self.now())
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def find(
        self,
        user_did: str,
        *,
        session_id: str | None = None,
        status: ApprovalStatus | None = None,
        limit: int = 100,
    ) -> list[ApprovalRecord]:
        """The user's approvals, newest first, optionally of one session or status."""
        query = select(tool_approvals).where(tool_approvals.c.user_did == user_did)
        if session_id is not None:
            query = query.where(tool_approvals.c.session_id == session_id)
        if status is not None:
            query = query.where(tool_approvals.c.status == status)
        query = query.order_by(tool_approvals.c.requested_at.desc()).limit(limit)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [_record(row) for row in rows]

    async def decide(
        self,
        user_did: str,
        approval_id: str,
        *,
        status: ApprovalStatus,
        answer: Mapping[str, Any],
        decided_by: str | None,
        via: Literal["api", "message"],
        edited_args_hash: str | None = None,
    ) -> bool:
        """Record the decision on a pending approval; ``False`` when it was decided
        already (by a racing request, or a reply) and nothing changed."""
        statement = (
            update(tool_approvals)
            .where(
                tool_approvals.c.user_did == user_did,
                tool_approvals.c.approval_id == approval_id,
                tool_approvals.c.status == "pending",
            )
            .values(
                status=status,
                answer=dict(answer),
                decided_by=decided_by,
                decided_at=self.now(),
                decided_via=via,
                edited_args_hash=edited_args_hash,
            )
        )
        async with self._engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def delete_session(self, user_did: str, session_id: str) -> int:
        """Forget a deleted session's approvals; returns how many went."""
        statement = delete(tool_approvals).where(
            tool_approvals.c.user_did == user_did, tool_approvals.c.session_id == session_id
        )
        async with self._engine.begin() as conn:
            result = await conn.execute(statement)
        return int(result.rowcount)


def _record(row: RowMapping) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=row["approval_id"],
        user_did=row["user_did"],
        session_id=row["session_id"],
        run_id=row["run_id"],
        interrupt_id=row["interrupt_id"],
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        args=dict(row["args"] or {}),
        args_hash=row["args_hash"],
        reason=row["reason"],
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        status=row["status"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        decided_via=row["decided_via"],
        edited_args_hash=row["edited_args_hash"],
        answer=dict(row["answer"]) if row["answer"] is not None else None,
        resumed_at=row["resumed_at"],
    )
