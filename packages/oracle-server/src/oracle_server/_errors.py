"""The server's error with a status, and error bodies in the shape the JavaScript client
reads: ``{statusCode, message, error}`` (SRV-1).

Raised wherever a request or a socket handshake is refused (authentication, turns, routes)
and rendered by the HTTP layer's handlers (``_http/errors.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

__all__ = ["HTTPError", "error_body", "error_response"]


def error_body(status: int, message: str | Sequence[str], **extra: Any) -> dict[str, Any]:
    """The NestJS-shaped error body (SRV-1); ``statusCode`` equals the HTTP status."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    body: dict[str, Any] = {
        "statusCode": status,
        "message": message if isinstance(message, str) else list(message),
        "error": reason,
    }
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
