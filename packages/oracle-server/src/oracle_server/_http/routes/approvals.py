"""``/approvals``: the caller's tool calls waiting for approval, and decisions on them
(plugins spec §20.2). A decision resumes the paused turn as a run of its own."""

from __future__ import annotations

from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import ApprovalAnswer
from oracle_server._errors import HTTPError
from oracle_server._http.dto import ApprovalDecisionDto
from oracle_server._http.routes.messages import reply_body, stream_run
from oracle_server._http.routing import LimitedRoute, RouteLimits
from oracle_server._http.state import auth_of, read_body, server_of
from oracle_server._persistence import ApprovalRecord, ApprovalStatus
from oracle_server._turns.approvals import TurnApprovals
from oracle_server._turns.failures import failure_of
from oracle_server._turns.runner import TurnInput

__all__ = [
    "APPROVAL_BAD_STATUS",
    "APPROVAL_DECIDED",
    "APPROVAL_EXPIRED",
    "APPROVAL_NOT_FOUND",
    "approval_routes",
]

APPROVAL_NOT_FOUND = "approval.not_found"
"""404: no such approval of the caller's (another user's id is unknown too)."""
APPROVAL_DECIDED = "approval.decided"
"""409: the approval was decided already (by another request, or a reply in the chat)."""
APPROVAL_EXPIRED = "approval.expired"
"""410: the approval expired before this decision; the call was not run."""
APPROVAL_BAD_STATUS = "approval.bad_status"
"""400: a ``status`` filter that is not a status."""
DECISION_BODY_BYTES = 256 * 1024
"""The largest body of ``POST /approvals/{id}``: edited arguments fit as a message does."""
STATUSES: tuple[str, ...] = get_args(ApprovalStatus)


def _approvals(request: Request) -> TurnApprovals:
    approvals = server_of(request).runner.approvals
    if approvals is None:
        raise HTTPError(404, "Approvals are not enabled", code=APPROVAL_NOT_FOUND)
    return approvals


async def list_approvals(request: Request) -> Response:
    """``GET /approvals?sessionId&status`` → ``{approvals}``, newest first (100 at most)."""
    auth = auth_of(request)
    approvals = _approvals(request)
    status = request.query_params.get("status") or None
    if status is not None and status not in STATUSES:
        raise HTTPError(
            400,
            f"Unknown status; use one of: {', '.join(STATUSES)}",
            code=APPROVAL_BAD_STATUS,
        )
    records = await approvals.store.find(
        auth.did,
        session_id=request.query_params.get("sessionId") or None,
        status=status,  # type: ignore[arg-type]
    )
    return JSONResponse({"approvals": [record.to_wire() for record in records]})


async def decide_approval(request: Request) -> Response:
    """``POST /approvals/{approvalId} {decision, editedArgs?, stream?}``: record the
    decision and resume the paused turn (JSON reply, or SSE with ``stream``)."""
    server, auth = server_of(request), auth_of(request)
    approvals = _approvals(request)
    dto = await read_body(request, ApprovalDecisionDto)
    record = await approvals.store.get(auth.did, request.path_params["approval_id"])
    if record is None:
        raise HTTPError(404, "Approval not found", code=APPROVAL_NOT_FOUND)
    if record.status != "pending" or record.resumed_at is not None:
        raise HTTPError(
            409, f"This approval was already answered ({record.status})", code=APPROVAL_DECIDED
        )
    expired = record.expired(approvals.store.now())
    status: ApprovalStatus = "expired" if expired else dto.decision
    answer = ApprovalAnswer(
        decision=status,
        edited_args=None if expired else dto.edited_args,
        decided_by=None if expired else auth.did,
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    decided = await approvals.decide(
        record, status, answer, via="api", edited_args=None if expired else dto.edited_args
    )
    if not decided:
        raise HTTPError(409, "This approval was already answered", code=APPROVAL_DECIDED)
    request_id = request.scope.get("state", {}).get("request_id") or record.approval_id
    # The decision is recorded: if this turn cannot start now (a turn is running and the
    # policy rejects), the session's next turn applies it.
    turn = await server.runner.start(
        TurnInput(
            auth=auth,
            session_id=record.session_id,
            message=f"[{status} {record.tool_name}]",
            request_id=request_id,
            resume=True,
        )
    )
    if expired:
        raise HTTPError(
            410,
            "This approval expired before the decision; the call was not run",
            code=APPROVAL_EXPIRED,
            runId=turn.run_id,
        )
    if dto.stream:
        return stream_run(request, server.runner.runs, turn.run_id, after=0)
    await turn.done.wait()
    if turn.status == "failed":
        failure = turn.failure or failure_of(RuntimeError())
        raise HTTPError(
            500, failure.message, code=failure.code, retryable=failure.retryable, runId=turn.run_id
        )
    if turn.status == "aborted":
        raise HTTPError(409, "The turn was aborted")
    return JSONResponse({**_decided(record, status, turn.run_id), **reply_body(turn)})


def _decided(record: ApprovalRecord, status: ApprovalStatus, run_id: str) -> dict[str, Any]:
    return {"approvalId": record.approval_id, "decision": status, "runId": run_id}


def approval_routes() -> list[BaseRoute]:
    """The approval routes."""
    return [
        Route("/approvals", list_approvals, methods=["GET"]),
        LimitedRoute(
            "/approvals/{approval_id}",
            decide_approval,
            methods=["POST"],
            limits=RouteLimits(max_body_bytes=DECISION_BODY_BYTES, throttle="turns"),
        ),
    ]
