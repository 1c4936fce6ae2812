"""The request pipeline as pure ASGI middleware (SRV-13 … 16, SRV-39 … 46).

Outermost first: request id → CORS (Starlette's) → security headers → body limit →
protection (exclusions, readiness, authentication, subscription gate, throttle) → routes.
Pure ASGI keeps streaming bodies and context variables intact.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oracle_core import ROUTE_USER_SCOPE_STATE, AuthExcludedRoute, UserInfo
from oracle_server._auth.authenticator import AuthData, Authenticator
from oracle_server._errors import HTTPError, error_response
from oracle_server._http.errors import SERVICE_ERRORS, service_unavailable_response
from oracle_server._http.ratelimit import RateLimiter

__all__ = [
    "BodyLimitMiddleware",
    "ExclusionMatcher",
    "ProtectionMiddleware",
    "RequestIdMiddleware",
    "SecurityHeadersMiddleware",
]

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
NOT_READY = "Oracle not ready: Matrix initialisation or signing key pending"
BUILTIN_EXCLUSIONS = (
    AuthExcludedRoute("/"),
    AuthExcludedRoute("/health"),
    AuthExcludedRoute("/ready"),
    AuthExcludedRoute("/docs"),
    AuthExcludedRoute("/docs/(.*)"),
    AuthExcludedRoute("/openapi.json"),
    AuthExcludedRoute("/models"),
)
THROTTLE_EXEMPT = ("/health", "/ready", "/docs", "/openapi.json")
ROOT_LIMIT = 30


class RequestIdMiddleware:
    """Gives every request an id (``x-request-id`` if valid, else a UUIDv4) and echoes it,
    unless the route set the header itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("x-request-id", "")
        request_id = given if REQUEST_ID_RE.fullmatch(given) else str(uuid.uuid4())
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                # A route may answer for another request: a run rejoin names the turn's.
                if "x-request-id" not in headers:
                    headers["X-Request-Id"] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


class SecurityHeadersMiddleware:
    """The headers helmet adds in the TypeScript runtime (SRV-16)."""

    HEADERS = (
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "SAMEORIGIN"),
        ("Referrer-Policy", "no-referrer"),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.HEADERS:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Refuses request bodies over ``max_bytes`` with 413, before the handler reads them."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(413, "request entity too large")(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await error_response(413, "request entity too large")(scope, receive, send)


def _compile(route: AuthExcludedRoute) -> re.Pattern[str]:
    path = route.path
    tail = ""
    if path.endswith("(.*)"):
        path, tail = path[: -len("(.*)")], ".*"
    elif path.endswith("*"):
        path, tail = path[:-1], ".*"
    parts = [
        "[^/]+" if segment.startswith(":") else re.escape(segment) for segment in path.split("/")
    ]
    return re.compile("^" + "/".join(parts) + tail + "/?$")


class ExclusionMatcher:
    """Routes served without authentication (SRV-40)."""

    def __init__(self, routes: Iterable[AuthExcludedRoute]) -> None:
        self._rules = [(_compile(r), r.method) for r in routes]

    def matches(self, method: str, path: str) -> bool:
        """Whether ``method path`` is excluded."""
        method = method.upper()
        return any(
            pattern.match(path) and (allowed is None or allowed in (method, "ALL"))
            for pattern, allowed in self._rules
        )


SubscriptionCheck = Callable[[AuthData], Awaitable[None]]
"""Raises ``HTTPError(402, …)`` when the user may not use the oracle (credits plugin)."""


@dataclass
class Protection:
    """What ``ProtectionMiddleware`` needs; fields may be replaced while serving."""

    authenticator: Authenticator
    exclusions: ExclusionMatcher
    rate_limiter: RateLimiter
    throttle_limit: int
    throttle_window: int
    is_ready: Callable[[], bool] = lambda: True
    subscription_check: SubscriptionCheck | None = None


class ProtectionMiddleware:
    """Exclusions → readiness → authentication → subscription → throttle (SRV-39)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        protection: Protection,
        routes: Callable[[], Sequence[BaseRoute]] | None = None,
    ) -> None:
        self.app = app
        self.protection = protection
        self._routes = routes

    def _routed(self, scope: Scope) -> bool:
        """Whether a route answers this path (any method): unknown paths get a JSON 404
        from the router, not a 401 (SRV-2)."""
        if self._routes is None:
            return True
        return any(route.matches(scope)[0] != Match.NONE for route in self._routes())

    async def _throttle(self, key: str, limit: int) -> None:
        decision = await self.protection.rate_limiter.hit(
            key, limit=limit, window_seconds=self.protection.throttle_window
        )
        if not decision.allowed:
            raise HTTPError(
                429,
                "ThrottlerException: Too Many Requests",
                headers={"Retry-After": str(decision.retry_after)},
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        protection = self.protection
        path, method = scope["path"], scope["method"]
        client = scope.get("client")
        ip = client[0] if client else "unknown"
        if not self._routed(scope):
            await self.app(scope, receive, send)
            return
        try:
            if protection.exclusions.matches(method, path):
                if path == "/":
                    await self._throttle(f"ip:{ip}:root", ROOT_LIMIT)
                await self.app(scope, receive, send)
                return
            if not protection.is_ready():
                raise HTTPError(401, NOT_READY, headers={"Retry-After": "5"})
            headers = dict(Headers(scope=scope).items())
            state = scope.setdefault("state", {})
            auth = await protection.authenticator.authenticate(
                headers, request_id=state.get("request_id")
            )
            if protection.subscription_check is not None:
                await protection.subscription_check(auth)
            if not path.startswith(THROTTLE_EXEMPT):
                await self._throttle(f"did:{auth.did}", protection.throttle_limit)
            state["auth"] = auth
            # What core's route_context(request) reads for plugin route handlers.
            state[ROUTE_USER_SCOPE_STATE] = UserInfo(
                did=auth.did,
                ucan_delegation=auth.delegation.raw if auth.delegation else None,
                timezone=auth.timezone,
            )
        except HTTPError as error:
            await error.response()(scope, receive, send)
            return
        except SERVICE_ERRORS as exc:  # the rate limits' Redis, the delegations' database
            response = service_unavailable_response(exc)
            assert response is not None
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def json_body_errors(errors: Sequence[Any]) -> list[str]:
    """pydantic errors as the flat message list the client shows (SRV-15)."""
    messages = []
    for err in errors:
        field = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        messages.append(f"{field} {err.get('msg', 'is invalid')}".strip())
    return messages


def parse_json(body: bytes) -> Any:
    """Decode a JSON request body or raise ``HTTPError(400)``."""
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, ["body must be valid JSON"]) from exc
