"""Error bodies in the shape the JavaScript client reads: ``{statusCode, message, error}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for ``HTTPError``."""
    assert isinstance(exc, HTTPError)
    return exc.response()


STORAGE_UNAVAILABLE = "Conversation storage temporarily unavailable"


async def handle_storage_unavailable(request: Request, exc: Exception) -> Response:
    """A user's database is being restored from a backup that is unreachable (SRV-63)."""
    return error_response(503, STORAGE_UNAVAILABLE, headers={"Retry-After": "5"})


async def handle_not_found(request: Request, exc: Exception) -> Response:
    """Unknown routes answer JSON (SRV-2): the client calls ``response.json()`` on errors."""
    return error_response(404, f"Cannot {request.method} {request.url.path}")


async def handle_method_not_allowed(request: Request, exc: Exception) -> Response:
    """Wrong methods answer JSON (SRV-2)."""
    return error_response(405, f"Cannot {request.method} {request.url.path}")
