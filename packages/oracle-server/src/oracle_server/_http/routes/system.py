"""Public routes: root, liveness, readiness, models."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import CoreEnv
from oracle_server._http.state import server_of
from oracle_server._timestamps import timestamp

__all__ = ["listed_models", "system_routes"]


def listed_models(core: CoreEnv) -> list[dict[str, Any]]:
    """``GET /models``: the default first (what the main agent runs), then the others."""
    if core.llm_provider == "openai-compatible" and core.openai_compatible_model:
        roles = core.role_models()
        # The default is what the main agent runs: the ``main`` role's model when set.
        ids = [roles.get("main", core.openai_compatible_model), *roles.values()]
        ids.append(core.openai_compatible_model)
    else:
        ids = [core.llm_provider]
    unique = list(dict.fromkeys(ids))
    return [{"id": model, "isDefault": index == 0} for index, model in enumerate(unique)]


async def root(request: Request) -> Response:
    """``GET /``."""
    server = server_of(request)
    return JSONResponse(
        {"status": "ok", "message": f"{server.oracle_name} is running", "timestamp": timestamp()}
    )


async def health(request: Request) -> Response:
    """``GET /health``: liveness, whatever the Matrix layer does (SRV-11); under
    ``oracle serve --workers`` also which worker answered."""
    body: dict[str, object] = {"status": "ok", "timestamp": timestamp()}
    settings = server_of(request).settings
    if settings.worker_hub_fd is not None:
        body["worker"] = settings.worker_index
    return JSONResponse(body)


async def ready(request: Request) -> Response:
    """``GET /ready``: 200 when protected routes can be served, else 503 (SRV-11)."""
    server = server_of(request)
    body = {
        "status": "ready" if server.ready else "starting",
        "matrix": server.matrix_state,
        "signingKey": server.signer is not None,
        "timestamp": timestamp(),
    }
    return JSONResponse(body, status_code=200 if server.ready else 503)


async def models(request: Request) -> Response:
    """``GET /models`` (public): the models a message may select."""
    server = server_of(request)
    default = next((m["id"] for m in server.models if m.get("isDefault")), None)
    return JSONResponse({"models": server.models, "default": default})


def system_routes() -> list[BaseRoute]:
    """Root, health, ready and models."""
    return [
        Route("/", root, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
    ]
