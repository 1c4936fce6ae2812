"""The server's error with a status, and error bodies in the shape the JavaScript client
reads: ``{statusCode, message, error, requestId}`` (SRV-1).

Raised wherever a request or a socket handshake is refused (authentication, turns, routes)
and rendered by the HTTP layer's handlers (``_http/errors.py``). The request id comes from
``current_request_id``, which the HTTP pipeline sets for the request being served, so every
error body of a request names it whichever stage refused the request.
``SERVICE_ERRORS`` are what the database and Redis raise when they are away or saturated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from http import HTTPStatus
from typing import Any

import sqlalchemy.exc
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.responses import JSONResponse

__all__ = [
    "SERVICE_ERRORS",
    "HTTPError",
    "current_request_id",
    "error_body",
    "error_response",
]

current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)
"""The id of the HTTP request being served (``X-Request-Id``); ``None`` outside one."""


def error_body(status: int, message: str | Sequence[str], **extra: Any) -> dict[str, Any]:
    """The NestJS-shaped error body (SRV-1); ``statusCode`` equals the HTTP status.

    ``requestId`` is the served request's id, when there is one (``extra`` may set it).
    """
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    body: dict[str, Any] = {
        "statusCode": status,
        "message": message if isinstance(message, str) else list(message),
        "error": reason,
    }
    request_id = current_request_id.get()
    if request_id is not None:
        body["requestId"] = request_id
    body.update(extra)
    return body


def error_response(
    status: int,
    message: str | Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A JSON error response."""
    return JSONResponse(error_body(status, message, **extra), status_code=status, headers=headers)


class HTTPError(Exception):
    """Raised by handlers and pipeline stages; rendered by ``handle_http_error``."""

    def __init__(
        self,
        status: int,
        message: str | Sequence[str],
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message if isinstance(message, str) else "; ".join(message))
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra

    def response(self) -> JSONResponse:
        """This error as a response."""
        return error_response(self.status, self.message, headers=self.headers, **self.extra)


def _service_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.InterfaceError,
        # The pool had no connection to hand out in time: the database is saturated.
        sqlalchemy.exc.TimeoutError,
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
dropped connection, a pool with no connection free in time): answered 503, and a turn
they fail ends retryable, as a moment later the same request may succeed."""
