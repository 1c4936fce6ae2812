"""Starlette's exception handlers for the server's errors: JSON bodies in the client's shape."""

from __future__ import annotations

import logging
import math

import sqlalchemy.exc
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.requests import Request
from starlette.responses import Response

from oracle_server._errors import HTTPError, error_response
from oracle_server._persistence import StorageUnavailableError

__all__ = [
    "SERVICE_ERRORS",
    "SERVICE_UNAVAILABLE",
    "STORAGE_UNAVAILABLE",
    "handle_http_error",
    "handle_method_not_allowed",
    "handle_not_found",
    "handle_service_unavailable",
    "handle_storage_unavailable",
    "service_unavailable_response",
]

logger = logging.getLogger("oracle.server.http")


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for ``HTTPError``."""
    assert isinstance(exc, HTTPError)
    return exc.response()


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


SERVICE_UNAVAILABLE = "A service the oracle depends on is unavailable; try again shortly"


def _service_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.InterfaceError,
        RedisConnectionError,
        RedisTimeoutError,
    ]
    try:  # the PostgreSQL extra: LangGraph's checkpointer raises psycopg's own errors
        import psycopg
    except ImportError:
        pass
    else:
        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    return tuple(errors)


SERVICE_ERRORS: tuple[type[Exception], ...] = _service_errors()
"""What the database or Redis raise when they cannot be reached (down, restarting, a
dropped connection): answered 503, as the request may succeed a moment later."""


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
