"""Plugin HTTP routes: the runtime context a route handler works with.

A ``get_routes`` handler receives only the Starlette request. ``route_context(request)``
gives it the same kind of ``RuntimeContext`` a tool handler gets: the oracle's config and
identity, the authenticated user, and the ambient services (Matrix, secrets, blob store,
UCAN, models) scoped to that user and to the plugin that owns the route.

The server that mounts the routes supplies two things, under documented names:

- ``app.state.oracle_runtime`` (``ROUTE_RUNTIME_APP_STATE``): the ``OracleRuntime``;
- ``request.scope["state"]["oracle_user"]`` (``ROUTE_USER_SCOPE_STATE``): the
  authenticated ``UserInfo``, set once the request passed authentication.

``oracle-server`` sets both; a host serving the routes from its own Starlette app sets
them the same way.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from oracle_core._context import RuntimeContext, SessionInfo, UserInfo
from oracle_core._errors import RouteContextError

if TYPE_CHECKING:
    from oracle_core._runtime import OracleRuntime

__all__ = ["ROUTE_RUNTIME_APP_STATE", "ROUTE_USER_SCOPE_STATE", "route_context"]

ROUTE_RUNTIME_APP_STATE = "oracle_runtime"
"""Attribute of the Starlette ``app.state`` holding the ``OracleRuntime``."""

ROUTE_USER_SCOPE_STATE = "oracle_user"
"""Key of ``request.scope["state"]`` (``request.state.oracle_user``) holding the
authenticated ``UserInfo``."""


class _HasScope(Protocol):
    """A Starlette ``Request`` or ``WebSocket`` (anything with an ASGI scope)."""

    @property
    def scope(self) -> MutableMapping[str, Any]: ...


def _runtime_of(scope: MutableMapping[str, Any]) -> OracleRuntime:
    app_state = getattr(scope.get("app"), "state", None)
    runtime = getattr(app_state, ROUTE_RUNTIME_APP_STATE, None)
    if runtime is None:
        raise RouteContextError(
            "the app serving this request exposes no oracle runtime",
            code="route.no_runtime",
            hint=f"serve plugin routes through oracle-server, or set "
            f"app.state.{ROUTE_RUNTIME_APP_STATE} to the OracleRuntime",
        )
    found: OracleRuntime = runtime
    return found


def _owner(runtime: OracleRuntime, scope: MutableMapping[str, Any]) -> str | None:
    """The plugin whose route matched, from what Starlette's router put in the scope."""
    matched, endpoint = scope.get("route"), scope.get("endpoint")
    for plugin, route in runtime.routes:
        if route is matched or (
            endpoint is not None
            and endpoint in (getattr(route, "endpoint", None), getattr(route, "app", None))
        ):
            return plugin
    return None


def route_context(request: _HasScope, *, authenticated: bool = True) -> RuntimeContext[Any]:
    """The runtime context for a plugin route handler.

    Call it inside the handler (not in ``get_routes``): it is built per request, like
    the context of a turn, and must not be kept. It is scoped to the plugin that owns
    the matched route (its ``logger`` and ``plugin_config``). There is no thread:
    ``history`` is empty and ``session.id`` is ``""``; ``session.request_id`` is the
    server's request id when it set one.

    Args:
        request: The Starlette request (or websocket) the handler received.
        authenticated: Require an authenticated user (the default: plugin routes are
            authenticated unless listed by ``get_auth_excluded_routes``). With
            ``False`` an unauthenticated request gets ``user.did == ""``.

    Returns:
        A ``RuntimeContext`` over the authenticated user.

    Raises:
        RouteContextError: ``route.no_runtime`` when the app exposes no runtime;
            ``route.unauthenticated`` when ``authenticated`` and no user was set
            (answer 401).
    """
    scope = request.scope
    runtime = _runtime_of(scope)
    state = scope.get("state") or {}
    user = state.get(ROUTE_USER_SCOPE_STATE)
    if not isinstance(user, UserInfo) or not user.did:
        if authenticated:
            raise RouteContextError(
                "this request has no authenticated user",
                code="route.unauthenticated",
                hint="answer 401; only auth-excluded routes should call "
                "route_context(request, authenticated=False)",
            )
        user = UserInfo(did="")
    request_id = state.get("request_id")
    session = SessionInfo(id="", request_id=request_id if isinstance(request_id, str) else None)
    return runtime.request_context(user, plugin=_owner(runtime, scope), session=session)
