"""Starlette's exception handlers for the server's errors: JSON bodies in the client's shape."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from oracle_server._errors import HTTPError, error_response

__all__ = [
    "STORAGE_UNAVAILABLE",
    "handle_http_error",
    "handle_method_not_allowed",
    "handle_not_found",
    "handle_storage_unavailable",
]


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
