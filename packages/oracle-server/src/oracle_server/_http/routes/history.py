"""``GET /sessions/{id}/messages``: the thread's messages in pages, newest page first.

A thread only grows, so a position in its message list is a stable cursor. ``before=C``
pages back from ``C``; ``after=C`` catches up from ``C``; neither gives the newest page.
``prevCursor`` (for ``before``) and ``nextCursor`` (for ``after``) are always set, so a
client can ask for what arrived after the newest page it holds.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_server._errors import HTTPError
from oracle_server._http.history import session_history
from oracle_server._http.parsing import bounded_int, query_int
from oracle_server._http.state import auth_of, server_of

__all__ = ["history_routes", "page"]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_CURSOR = 999_999_999
_PREFIX = "m"


def encode_cursor(position: int) -> str:
    """The cursor of a position in the message list."""
    return f"{_PREFIX}{position}"


def decode_cursor(cursor: str, total: int) -> int:
    """The position of ``cursor``, clamped to the list.

    Raises:
        HTTPError: 400 for a cursor this server did not make.
    """
    digits = cursor.removeprefix(_PREFIX)
    if not cursor.startswith(_PREFIX):
        raise HTTPError(400, ["cursor is not valid"])
    return min(bounded_int(digits, "cursor", maximum=MAX_CURSOR), total)


def page(
    items: list[dict[str, object]],
    *,
    limit: int,
    before: int | None = None,
    after: int | None = None,
) -> dict[str, object]:
    """One page of ``items`` with its cursors."""
    total = len(items)
    if after is not None:
        start, end = after, min(after + limit, total)
    else:
        end = total if before is None else before
        start = max(end - limit, 0)
    return {
        "messages": items[start:end],
        "prevCursor": encode_cursor(start),
        "nextCursor": encode_cursor(end),
        "hasOlder": start > 0,
        "hasNewer": end < total,
    }


def _limit(request: Request) -> int:
    return query_int(
        request.query_params, "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT
    )


async def session_messages(request: Request) -> Response:
    """``GET /sessions/{sessionId}/messages?limit=&before=|after=``."""
    server, auth = server_of(request), auth_of(request)
    session_id = request.path_params["session_id"]
    limit = _limit(request)
    before, after = request.query_params.get("before"), request.query_params.get("after")
    if before and after:
        raise HTTPError(400, ["give before or after, not both"])
    if await server.sessions.get(auth.did, session_id) is None:
        raise HTTPError(404, "Session not found")
    items = await session_history(server, auth.did, session_id)
    body = page(
        items,
        limit=limit,
        before=decode_cursor(before, len(items)) if before else None,
        after=decode_cursor(after, len(items)) if after else None,
    )
    return JSONResponse(body)


def history_routes() -> list[BaseRoute]:
    """The paged history route."""
    return [Route("/sessions/{session_id}/messages", session_messages, methods=["GET"])]
