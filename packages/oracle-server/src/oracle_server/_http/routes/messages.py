"""``/messages``: send (JSON or SSE), history, abort (SRV-22 … 33); runs and rejoin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from oracle_core import AttachmentLimits, UserInfo
from oracle_server._errors import HTTPError
from oracle_server._http.attachments import IMAGE_MAX_BYTES, prepared_message
from oracle_server._http.dto import AbortDto, SendMessageDto
from oracle_server._http.history import message_id, session_history
from oracle_server._http.parsing import query_int
from oracle_server._http.routing import LimitedRoute, RouteLimits
from oracle_server._http.sse import SSE_HEADERS
from oracle_server._http.state import auth_of, read_body, server_of
from oracle_server._turns.failures import failure_of
from oracle_server._turns.runlog import RunGone, RunLog, follow
from oracle_server._turns.runner import ActiveTurn, TurnInput

__all__ = [
    "ABORT_BODY_BYTES",
    "MESSAGE_BODY_BYTES",
    "MODEL_UNKNOWN",
    "RUN_EVENTS_GONE",
    "RUN_EXPIRED",
    "RUN_NOT_FOUND",
    "message_routes",
    "selected_model",
]

MESSAGE_BODY_BYTES = 256 * 1024
"""The largest body of ``POST /messages/{id}``: a 100,000-character message with its
tools, actions and attachments fits."""
ABORT_BODY_BYTES = 4 * 1024
"""The largest body of ``POST /messages/abort``, which holds one session id."""

MODEL_UNKNOWN = "message.model_unknown"
"""The ``code`` of the 400 answering a ``model`` that ``GET /models`` does not list."""
RUN_NOT_FOUND = "run.not_found"
"""404 of a rejoin: no such run of the caller's."""
RUN_EXPIRED = "run.expired"
"""410 of a rejoin: the caller's run ended and its log expired (reload the history)."""
RUN_EVENTS_GONE = "run.events_gone"
"""404 of a rejoin: the events after ``after`` were dropped (the run's log bounds)."""


def selected_model(models: Sequence[Mapping[str, Any]], requested: str | None) -> str | None:
    """The model id a message selects for its turn's main agent; ``None`` runs the default.

    The default entry of ``models`` (for the hosted providers it names the provider, not a
    model) selects the default model. When no model is listed (no LLM configured) nothing
    can be selected, so any ``model`` is refused rather than silently ignored.

    Args:
        models: The entries ``GET /models`` lists.
        requested: The message's ``model``; ``None`` when absent.

    Raises:
        HTTPError: 400 with ``code`` ``message.model_unknown`` and the valid ids.
    """
    if requested is None:
        return None
    ids = [str(entry["id"]) for entry in models]
    shown = requested if len(requested) <= 100 else f"{requested[:100]}…"
    if not ids:
        raise HTTPError(
            400,
            f"Unknown model '{shown}': this oracle has no models configured; "
            "send the message without `model`",
            code=MODEL_UNKNOWN,
        )
    if requested not in ids:
        raise HTTPError(
            400,
            f"Unknown model '{shown}'; use one of: {', '.join(ids)} (GET /models), "
            "or send the message without `model` for the default",
            code=MODEL_UNKNOWN,
        )
    default = next((entry["id"] for entry in models if entry.get("isDefault")), None)
    return None if requested == default else requested


def _matrix_user_id(did: str, home_server: str | None) -> str | None:
    """The user's Matrix id on the homeserver they came from (IXO clients send it)."""
    if not home_server:
        return None
    # Imported here: the Matrix layer (matrix-nio) stays unloaded in local mode.
    from oracle_server._matrix.rooms import matrix_user_id

    return matrix_user_id(did, home_server)


async def send_message(request: Request) -> Response:
    """``POST /messages/{sessionId}``: run a turn; JSON reply, or SSE with ``stream``."""
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    dto = await read_body(request, SendMessageDto)
    # Checked before anything is queued or stored: a bad model loses nothing.
    model = selected_model(server.models, dto.model)
    record = await server.sessions.get(auth.did, session_id)
    if record is None:
        raise HTTPError(404, "Session not found")
    request_id = request.scope.get("state", {}).get("request_id") or session_id
    # Resolved here from the row already read: the runner need not read it again.
    strategy = (
        dto.multitask_strategy or record.multitask_strategy or server.settings.session_concurrency
    )
    matrix_id = _matrix_user_id(auth.did, auth.home_server)
    prepared = None
    if dto.attachments:
        # Fetched and converted before the turn: a refused file answers 422, runs nothing.
        settings = server.settings
        prepared = await prepared_message(
            dto.message,
            dto.attachments,
            matrix=server.runtime.ambient.matrix.for_user(
                UserInfo(did=auth.did, matrix_user_id=matrix_id)
            ),
            room_id=record.room_id,
            vision=None if settings.main_model_vision else server.runtime.ambient.llm.get("vision"),
            limits=AttachmentLimits(
                max_file_bytes=settings.attachment_max_bytes,
                max_image_bytes=min(settings.attachment_max_bytes, IMAGE_MAX_BYTES),
            ),
        )
    turn = await server.runner.start(
        TurnInput(
            auth=auth,
            session_id=session_id,
            message=dto.message,
            request_id=request_id,
            state=dto.turn_state(),
            timezone=dto.timezone,
            model=model,
            mcp_invocations=dto.mcp_invocations or {},
            strategy=strategy,
            room_id=record.room_id,
            matrix_user_id=matrix_id,
            prepared=prepared,
        )
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
    body = reply_body(turn)
    if dto.return_all_messages:
        body["messages"] = await session_history(server, auth.did, session_id)
    return JSONResponse(body)


def reply_body(turn: ActiveTurn) -> dict[str, Any]:
    """The non-stream answer of a finished turn (SRV-24)."""
    reply = turn.reply
    return {
        "message": {
            "type": "ai",
            "content": str(reply.text) if reply is not None else "",
            "id": message_id(reply) if reply is not None else turn.request_id,
        },
        "sessionId": turn.session_id,
        **({"approvals": [r.to_wire() for r in turn.approvals]} if turn.approvals else {}),
    }


def stream_run(
    request: Request, runs: RunLog, run_id: str, *, after: int, request_id: str | None = None
) -> Response:
    """The run's events after ``after`` as SSE, with ``X-Run-Id`` (and, for a rejoin, the
    ``X-Request-Id`` of the turn, which the client files the reply under)."""
    headers = {**SSE_HEADERS, "X-Run-Id": run_id}
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    if request.scope.get("http_version") == "1.1":
        headers["Connection"] = "keep-alive"
    return StreamingResponse(follow(runs, run_id, after), headers=headers)


async def rejoin_run(request: Request) -> Response:
    """``GET /runs/{runId}?after=N``: the run's events after ``N``, then live to ``done``."""
    server, auth = server_of(request), auth_of(request)
    run_id = request.path_params["run_id"]
    after = query_int(request.query_params, "after", default=0)
    runs = server.runner.runs
    info = await runs.info(run_id)
    if info is None or info.user_did != auth.did:
        if info is None and await runs.owner(run_id) == auth.did:
            raise HTTPError(410, "This run has ended and its events have expired", code=RUN_EXPIRED)
        raise HTTPError(404, "Run not found", code=RUN_NOT_FOUND)
    try:
        await runs.read(run_id, after, wait=0)
    except RunGone as exc:
        raise HTTPError(404, "Run events are no longer available", code=RUN_EVENTS_GONE) from exc
    return stream_run(request, runs, run_id, after=after, request_id=info.request_id)


async def session_run(request: Request) -> Response:
    """``GET /sessions/{sessionId}/run`` → ``{run: {runId, status} | null}``."""
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    if await server.sessions.get(auth.did, session_id) is None:
        raise HTTPError(404, "Session not found")
    info = await server.runner.runs.active_run(session_id)
    if info is None or info.user_did != auth.did:
        return JSONResponse({"run": None})
    return JSONResponse({"run": info.to_wire()})


async def history(request: Request) -> Response:
    """``GET /messages/{sessionId}`` → ``{messages: [MessageDto]}`` from the checkpoint."""
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    if await server.sessions.get(auth.did, session_id) is None:
        raise HTTPError(404, "Session not found")
    return JSONResponse({"messages": await session_history(server, auth.did, session_id)})


async def abort(request: Request) -> Response:
    """``POST /messages/abort {sessionId}`` → ``{success}`` (own sessions only)."""
    server, auth = server_of(request), auth_of(request)
    dto = await read_body(request, AbortDto)
    return JSONResponse({"success": await server.runner.abort(auth.did, dto.session_id)})


def message_routes() -> list[BaseRoute]:
    """The message routes; abort is matched before ``/messages/{sessionId}``."""
    return [
        LimitedRoute(
            "/messages/abort",
            abort,
            methods=["POST"],
            limits=RouteLimits(max_body_bytes=ABORT_BODY_BYTES),
        ),
        LimitedRoute(
            "/messages/{session_id}",
            send_message,
            methods=["POST"],
            limits=RouteLimits(max_body_bytes=MESSAGE_BODY_BYTES, throttle="turns"),
        ),
        Route("/messages/{session_id}", history, methods=["GET"]),
        Route("/runs/{run_id}", rejoin_run, methods=["GET"]),
        Route("/sessions/{session_id}/run", session_run, methods=["GET"]),
    ]
