"""The oracle's Starlette app: routes, the middleware pipeline, error handlers, API docs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from oracle_core import ROUTE_RUNTIME_APP_STATE, AuthExcludedRoute, RouteContextError, RouteError
from oracle_server._errors import SERVICE_ERRORS, HTTPError, error_response
from oracle_server._http.docs_ui import mount_api_docs
from oracle_server._http.errors import (
    UnhandledErrorMiddleware,
    handle_http_error,
    handle_method_not_allowed,
    handle_not_found,
    handle_route_context_error,
    handle_route_error,
    handle_service_unavailable,
    handle_storage_unavailable,
)
from oracle_server._http.pipeline import (
    BUILTIN_EXCLUSIONS,
    BodyLimitMiddleware,
    ExclusionMatcher,
    Protection,
    ProtectionMiddleware,
    RequestIdMiddleware,
    SecurityHeadersMiddleware,
    SubscriptionCheck,
)
from oracle_server._http.routes import (
    approval_routes,
    attachment_routes,
    delegation_routes,
    history_routes,
    message_routes,
    secret_routes,
    session_routes,
    system_routes,
)
from oracle_server._http.routing import RouteTable
from oracle_server._http.state import ServerState
from oracle_server._persistence import StorageUnavailableError

__all__ = ["CORS_ALLOW_HEADERS", "CORS_EXPOSE", "CORS_METHODS", "build_http_app"]

CORS_ALLOW_HEADERS = [
    "Content-Type",
    "Authorization",
    "x-ucan-delegation",
    "x-matrix-access-token",
    "x-matrix-homeserver",
    "x-did",
    "x-request-id",
    "x-auth-type",
    "x-timezone",
]
CORS_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
CORS_EXPOSE = ["X-Request-Id", "X-Run-Id"]


def build_http_app(
    state: ServerState,
    *,
    host_routes: Sequence[BaseRoute] = (),
    server_routes: Sequence[BaseRoute] = (),
    auth_excluded_routes: Sequence[AuthExcludedRoute] = (),
    subscription_check: SubscriptionCheck | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """The Starlette app serving ``state``: built-in, host and plugin routes behind the
    pipeline (SRV-13 … 16, 39 … 46), the OpenAPI document and Swagger UI last (SRV-36).

    Args:
        state: The booted server.
        host_routes: Routes the host mounts next to the built-in ones.
        server_routes: The server's optional routes (``/mcp`` when exposed).
        auth_excluded_routes: Host routes the pipeline serves without authentication.
        subscription_check: Gates every protected route after authentication.
        lifespan: The app's lifespan (the Matrix layer starts there).
    """
    settings, runtime = state.settings, state.runtime
    exclusions = ExclusionMatcher(
        [*BUILTIN_EXCLUSIONS, *auth_excluded_routes, *runtime.auth_excluded_routes]
    )
    protection = Protection(
        authenticator=state.authenticator,
        exclusions=exclusions,
        rate_limiter=state.limiter,
        namespace=state.oracle_did,
        turn_limit=settings.turn_limit,
        read_limit=settings.read_limit,
        throttle_window=settings.throttle_ttl_seconds,
        is_ready=lambda: state.ready,
        subscription_check=subscription_check,
    )
    routes = RouteTable(_routes_of(lambda: app))
    origins = settings.cors_origins()
    any_origin = origins == ["*"]
    app = Starlette(
        routes=[
            *system_routes(),
            *session_routes(),
            *secret_routes(),
            *attachment_routes(settings.attachment_max_bytes),
            *history_routes(),
            *message_routes(),
            *approval_routes(),
            *delegation_routes(),
            *server_routes,
            *host_routes,
            *(route for _, route in runtime.routes),
        ],
        middleware=[
            Middleware(RequestIdMiddleware),
            Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_credentials=not any_origin,
                allow_methods=CORS_METHODS,
                allow_headers=CORS_ALLOW_HEADERS,
                expose_headers=CORS_EXPOSE,
            ),
            Middleware(SecurityHeadersMiddleware),
            Middleware(UnhandledErrorMiddleware),
            Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, routes=routes),
            Middleware(ProtectionMiddleware, protection=protection, routes=routes),
        ],
        lifespan=lifespan,
        exception_handlers={
            HTTPError: handle_http_error,
            RouteError: handle_route_error,
            RouteContextError: handle_route_context_error,
            StorageUnavailableError: handle_storage_unavailable,
            **dict.fromkeys(SERVICE_ERRORS, handle_service_unavailable),
            404: handle_not_found,
            405: handle_method_not_allowed,
            HTTPException: _starlette_http_error,
        },
    )
    app.state.oracle = state
    # Plugin route handlers reach the runtime through core's route_context(request).
    setattr(app.state, ROUTE_RUNTIME_APP_STATE, runtime)
    # Last: the document is built from every route the app has by now.
    mount_api_docs(
        app,
        title=runtime.identity.name,
        description=runtime.identity.description,
        exclusions=exclusions,
        extra_routes=[*(("host", route) for route in host_routes), *runtime.routes],
        asset_base_url=settings.docs_asset_base_url,
        tool_policy=runtime.tool_policy_report(),
    )
    return app


def _routes_of(app: Callable[[], Starlette]) -> Callable[[], list[BaseRoute]]:
    """The app's route list, read when a request arrives (routes are added after wiring)."""
    return lambda: app().router.routes


async def _starlette_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return await handle_not_found(request, exc)
    if exc.status_code == 405:
        return await handle_method_not_allowed(request, exc)
    return error_response(exc.status_code, str(exc.detail), headers=exc.headers)
