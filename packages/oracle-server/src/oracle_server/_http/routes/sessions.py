"""``/sessions``: create, list, change settings, delete (SRV-18 … 20)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import SessionEvent
from oracle_server._errors import HTTPError
from oracle_server._http.dto import SessionSettingsDto
from oracle_server._http.parsing import query_int
from oracle_server._http.state import auth_of, read_body, server_of

__all__ = ["session_routes"]

MAX_PAGE = 100
MAX_OFFSET = 2**31 - 1


async def create_session(request: Request) -> Response:
    """``POST /sessions`` → 201 ``ChatSession``."""
    server, auth = server_of(request), auth_of(request)
    try:
        created = await server.new_session(auth.did)
    except Exception as exc:
        raise HTTPError(400, f"Session creation failed: {type(exc).__name__}") from exc
    return JSONResponse(created.to_wire(), status_code=201)


async def list_sessions(request: Request) -> Response:
    """``GET /sessions?limit&offset`` → ``{sessions, total}``, newest first."""
    server, auth = server_of(request), auth_of(request)
    # A limit over the page size is served as a full page, as before.
    limit = min(query_int(request.query_params, "limit", default=20, minimum=1), MAX_PAGE)
    offset = query_int(request.query_params, "offset", default=0, maximum=MAX_OFFSET)
    records, total = await server.sessions.list(auth.did, limit=limit, offset=offset)
    return JSONResponse({"sessions": [r.to_wire() for r in records], "total": total})


async def update_session(request: Request) -> Response:
    """``PATCH /sessions/{sessionId}`` ``{multitaskStrategy}`` → the ``ChatSession``."""
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    settings = await read_body(request, SessionSettingsDto)
    if await server.sessions.get(auth.did, session_id) is None:
        raise HTTPError(404, "Session not found")
    await server.sessions.set_multitask_strategy(auth.did, session_id, settings.multitask_strategy)
    record = await server.sessions.get(auth.did, session_id)
    if record is None:  # deleted meanwhile
        raise HTTPError(404, "Session not found")
    return JSONResponse(record.to_wire())


async def delete_session(request: Request) -> Response:
    """``DELETE /sessions/{sessionId}``: the row and every checkpoint of the thread.

    The session's running and queued turns are aborted first, and the rows go only once
    they have ended (``done`` written, post-turn work finished), here and on the other
    replicas: no turn writes to the session after it is deleted. No turn starts in it
    meanwhile.
    """
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    if await server.sessions.get(auth.did, session_id) is None:
        raise HTTPError(404, "Session not found")
    async with server.runner.closing(session_id):
        await server.runner.abort(auth.did, session_id)
        try:
            # Read before the delete: plugins (memory) get the history that is going.
            history = tuple(await server.runtime.thread_messages(auth.did, session_id))
            # Every sub-agent's thread goes too, request-time ones (the Portal Agent's)
            # included: they are the threads named "{session_id}_…".
            await server.checkpointers.delete_session_threads(auth.did, session_id)
            await server.sessions.delete(auth.did, session_id)
            await server.storage.approvals.delete_session(auth.did, session_id)
        except Exception as exc:
            raise HTTPError(400, f"Failed to delete session: {type(exc).__name__}") from exc
    await server.announce_session(
        SessionEvent("session.deleted", session_id, auth.did, messages=history)
    )
    return JSONResponse({"message": "Session deleted successfully"})


def session_routes() -> list[BaseRoute]:
    """The session routes."""
    return [
        Route("/sessions", create_session, methods=["POST"]),
        Route("/sessions", list_sessions, methods=["GET"]),
        Route("/sessions/{session_id}", update_session, methods=["PATCH"]),
        Route("/sessions/{session_id}", delete_session, methods=["DELETE"]),
    ]
