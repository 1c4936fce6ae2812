"""The server's errors as responses: Starlette's exception handlers, and the catch-all
middleware for the rest; every body in the client's JSON shape."""

from __future__ import annotations

import logging
import math

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oracle_core import RouteContextError, RouteError
from oracle_server._errors import SERVICE_ERRORS, HTTPError, error_response
from oracle_server._persistence import StorageUnavailableError

__all__ = [
    "INTERNAL_ERROR",
    "SERVICE_UNAVAILABLE",
    "STORAGE_UNAVAILABLE",
    "UNHANDLED_CODE",
    "UnhandledErrorMiddleware",
    "handle_http_error",
    "handle_method_not_allowed",
    "handle_not_found",
    "handle_route_context_error",
    "handle_route_error",
    "handle_service_unavailable",
    "handle_storage_unavailable",
    "service_unavailable_response",
]


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for ``HTTPError``."""
    assert isinstance(exc, HTTPError)
    return exc.response()


async def handle_route_error(request: Request, exc: Exception) -> Response:
    """A plugin route refused the request (``RouteError``): its status, message, code and
    headers in the client's error shape."""
    assert isinstance(exc, RouteError)
    return error_response(exc.status, exc.message, headers=exc.headers, code=exc.code)


async def handle_route_context_error(request: Request, exc: Exception) -> Response:
    """A plugin route asked ``route_context`` for a user the request does not have (401), or
    the app exposes no runtime (500, a deployment error)."""
    assert isinstance(exc, RouteContextError)
    if exc.code == "route.unauthenticated":
        return error_response(401, "Missing UCAN authentication", code=exc.code)
    logger.error("%s: %s %s", exc.code, request.method, request.url.path)
    return error_response(500, INTERNAL_ERROR, code=exc.code)


STORAGE_UNAVAILABLE = "Conversation storage temporarily unavailable"


async def handle_storage_unavailable(request: Request, exc: Exception) -> Response:
    """A user's database cannot be restored from its backup now (SRV-63): 503 with the
    error's stable ``code`` (``storage.restore_failed``…) and when to retry."""
    assert isinstance(exc, StorageUnavailableError)
    retry_after = max(1, math.ceil(exc.retry_after))
    return error_response(
        503, STORAGE_UNAVAILABLE, headers={"Retry-After": str(retry_after)}, code=exc.code
    )


async def handle_not_found(request: Request, exc: Exception) -> Response:
    """Unknown routes answer JSON (SRV-2): the client calls ``response.json()`` on errors."""
    return error_response(404, f"Cannot {request.method} {request.url.path}")


async def handle_method_not_allowed(request: Request, exc: Exception) -> Response:
    """Wrong methods answer JSON (SRV-2)."""
    return error_response(405, f"Cannot {request.method} {request.url.path}")


INTERNAL_ERROR = "Internal server error"
UNHANDLED_CODE = "http.unhandled"
"""The code logged, and answered, for an exception no handler took."""

logger = logging.getLogger("oracle_server.http")


class UnhandledErrorMiddleware:
    """Answers an exception that no handler took with a JSON 500, its details in the log.

    Starlette's own catch-all (``ServerErrorMiddleware``) sits outside every middleware, so
    its plain-text 500 has neither the request id nor the CORS and security headers; this
    one sits inside them. An exception after the response started is logged and raised on,
    so that the server ends the connection and the client sees a cut body, not a whole one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            unavailable = None if started else service_unavailable_response(exc)
            if unavailable is not None:  # the database or Redis away, raised in a middleware
                await unavailable(scope, receive, send)
                return
            request_id = scope.get("state", {}).get("request_id")
            logger.error(
                "%s: %s %s raised %s (request %s)%s",
                UNHANDLED_CODE,
                scope["method"],
                scope["path"],
                type(exc).__name__,
                request_id,
                "; the response had started" if started else "; answered 500",
                exc_info=exc,
            )
            if started:
                raise
            await error_response(500, INTERNAL_ERROR, code=UNHANDLED_CODE)(scope, receive, send)


SERVICE_UNAVAILABLE = "A service the oracle depends on is unavailable; try again shortly"


def service_unavailable_response(exc: BaseException) -> Response | None:
    """503 ``service.database_unavailable`` / ``service.redis_unavailable`` for an error of
    `SERVICE_ERRORS`, else ``None``. The exception is logged by type only: its text may
    hold connection parameters."""
    if not isinstance(exc, SERVICE_ERRORS):
        return None
    service = "redis" if isinstance(exc, RedisConnectionError | RedisTimeoutError) else "database"
    code = f"service.{service}_unavailable"
    logger.warning("%s: %s", code, type(exc).__name__)
    return error_response(503, SERVICE_UNAVAILABLE, headers={"Retry-After": "2"}, code=code)


async def handle_service_unavailable(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for `SERVICE_ERRORS`."""
    response = service_unavailable_response(exc)
    assert response is not None
    return response
