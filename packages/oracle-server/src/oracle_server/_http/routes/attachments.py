"""``POST /attachments``: a file uploaded for a message, by clients without Matrix.

The body is the file itself (``Content-Type`` its type, ``?filename=`` its name). It is
stored as media through the runtime's Matrix service (the homeserver in IXO mode, the
local store with ``ORACLE_BACKEND=local``) and answered with what a message's
``attachments`` entry takes. Each user may upload ``ATTACHMENT_UPLOAD_MB_PER_DAY``
megabytes a day (a moving window, counted across replicas with Redis), files of up to
``ATTACHMENT_MAX_BYTES``; types the oracle cannot read are refused before anything is
stored.
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from oracle_core import (
    MatrixRequestError,
    NotConfiguredError,
    ServiceUnavailableError,
    UserInfo,
    attachment_kind,
)
from oracle_server._errors import HTTPError
from oracle_server._http.routing import LimitedRoute, RouteLimits
from oracle_server._http.state import auth_of, server_of

__all__ = ["attachment_routes"]

MEGABYTE = 1024 * 1024
DAY_SECONDS = 86_400
MAX_FILENAME = 255


async def upload_attachment(request: Request) -> Response:
    """``POST /attachments?filename=…`` with the file as the body → 201
    ``{mxcUri, filename, mimetype, size}``."""
    server, auth = server_of(request), auth_of(request)
    settings = server.settings
    filename = request.query_params.get("filename", "").strip()
    if not filename or len(filename) > MAX_FILENAME or "/" in filename or "\x00" in filename:
        raise HTTPError(
            400, "filename must be 1 to 255 characters, without '/'", code="attachment.bad_name"
        )
    mimetype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if attachment_kind(mimetype or "application/octet-stream", filename) is None:
        raise HTTPError(
            422,
            f"Attachment {filename!r}: {mimetype or 'no type'} is not a type this oracle "
            "reads: send text, PDF or PNG/JPEG/GIF/WebP images",
            code="attachment.unsupported",
        )
    data = await request.body()
    if not data:
        raise HTTPError(400, "the body is the file, and it is empty", code="attachment.empty")
    quota = settings.attachment_upload_mb_per_day
    cost = min(quota, max(1, math.ceil(len(data) / MEGABYTE)))
    decision = await server.limiter.hit(
        f"uploads:{auth.did}", limit=quota, window_seconds=DAY_SECONDS, cost=cost
    )
    if not decision.allowed:
        raise HTTPError(
            429,
            f"Upload quota reached: {quota} MB a day",
            headers={"Retry-After": str(decision.retry_after)},
            code="attachment.quota_exceeded",
        )
    matrix = server.runtime.ambient.matrix.for_user(UserInfo(did=auth.did))
    try:
        mxc = await matrix.upload(
            data, content_type=mimetype or "application/octet-stream", filename=filename
        )
    except (MatrixRequestError, NotConfiguredError) as exc:
        raise HTTPError(
            409, "This oracle has nowhere to keep uploads", code="attachment.no_store"
        ) from exc
    except ServiceUnavailableError as exc:
        raise HTTPError(
            503, "Uploads are unavailable right now", code="service.unavailable"
        ) from exc
    return JSONResponse(
        {
            "mxcUri": mxc,
            "filename": filename,
            "mimetype": mimetype or "application/octet-stream",
            "size": len(data),
        },
        status_code=201,
    )


def attachment_routes(max_bytes: int) -> list[BaseRoute]:
    """The upload route, its body capped at ``max_bytes`` (``ATTACHMENT_MAX_BYTES``)."""
    return [
        LimitedRoute(
            "/attachments",
            upload_attachment,
            methods=["POST"],
            limits=RouteLimits(max_body_bytes=max_bytes, throttle="turns"),
        )
    ]
