"""``/secrets``: the caller's own secrets — names listed, values written, never read back.

Values reach tools (``rt_ctx.secrets.get_values``) and never an HTTP response, a log or
the prompt. Where they live is the runtime's secrets service: the user's Matrix room in
IXO mode, the local encrypted store with ``ORACLE_BACKEND=local``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import (
    NotConfiguredError,
    SecretsAccessor,
    SecretsError,
    ServiceUnavailableError,
    UserInfo,
)
from oracle_server._errors import HTTPError
from oracle_server._http.dto import SecretValueDto
from oracle_server._http.state import auth_of, read_body, server_of

__all__ = ["secret_routes"]

_STATUS = {
    "secrets.bad_name": 400,
    "secrets.too_large": 400,
    "secrets.too_many": 409,
    "secrets.forbidden": 409,
    "secrets.unavailable": 409,
}


def _secrets(request: Request) -> SecretsAccessor:
    server, auth = server_of(request), auth_of(request)
    return server.runtime.ambient.secrets.for_user(UserInfo(did=auth.did))


def _refused(exc: Exception) -> HTTPError:
    if isinstance(exc, SecretsError):
        return HTTPError(_STATUS.get(exc.code, 400), str(exc), code=exc.code)
    if isinstance(exc, NotConfiguredError):
        return HTTPError(
            409, "This oracle's secrets cannot be written here", code="secrets.read_only"
        )
    return HTTPError(503, "Secrets are unavailable right now", code="service.unavailable")


async def list_secrets(request: Request) -> Response:
    """``GET /secrets`` → ``{secrets: [{name, updatedAt?}]}``, names only."""
    index = await _secrets(request).get_index()
    return JSONResponse(
        {
            "secrets": [
                {"name": e.name, **({"updatedAt": e.updated_at} if e.updated_at else {})}
                for e in index
            ]
        }
    )


async def put_secret(request: Request) -> Response:
    """``PUT /secrets/{name}`` ``{value}`` → ``{name}``: set or replace one."""
    name = request.path_params["name"]
    body = await read_body(request, SecretValueDto)
    try:
        await _secrets(request).put(name, body.value)
    except (SecretsError, NotConfiguredError, ServiceUnavailableError) as exc:
        raise _refused(exc) from exc
    return JSONResponse({"name": name})


async def delete_secret(request: Request) -> Response:
    """``DELETE /secrets/{name}`` → ``{deleted: true}``; 404 when there is none."""
    name = request.path_params["name"]
    try:
        deleted = await _secrets(request).delete(name)
    except (SecretsError, NotConfiguredError, ServiceUnavailableError) as exc:
        raise _refused(exc) from exc
    if not deleted:
        raise HTTPError(404, "Secret not found")
    return JSONResponse({"deleted": True})


def secret_routes() -> list[BaseRoute]:
    """The caller's secrets."""
    return [
        Route("/secrets", list_secrets, methods=["GET"]),
        Route("/secrets/{name}", put_secret, methods=["PUT"]),
        Route("/secrets/{name}", delete_secret, methods=["DELETE"]),
    ]
