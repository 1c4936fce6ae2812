"""The request pipeline as pure ASGI middleware (SRV-13 … 16, SRV-39 … 46).

Outermost first: request id → CORS (Starlette's) → security headers → unhandled errors →
body limit → protection (exclusions, readiness, authentication, subscription gate,
throttle) → routes. Pure ASGI keeps streaming bodies and context variables intact. The
body limit and the throttle class of a request are its route's (``routing.py``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oracle_core import ROUTE_USER_SCOPE_STATE, AuthExcludedRoute, UserInfo
from oracle_server._auth.authenticator import AuthData, Authenticator
from oracle_server._errors import HTTPError, current_request_id, error_response
from oracle_server._http.parsing import BAD_NUMBER
from oracle_server._http.ratelimit import RateLimiter
from oracle_server._http.routing import RouteTable, ThrottleClass

__all__ = [
    "BodyLimitMiddleware",
    "ExclusionMatcher",
    "ProtectionMiddleware",
    "RequestIdMiddleware",
    "SecurityHeadersMiddleware",
]

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
NOT_READY = "Oracle not ready: Matrix initialisation or signing key pending"
NOT_READY_CODE = "server.not_ready"
TOO_LARGE = "request entity too large"
TOO_LARGE_CODE = "request.too_large"
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
        # Every error body of this request names it (``error_body``).
        token = current_request_id.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                # A route may answer for another request: a run rejoin names the turn's.
                if "x-request-id" not in headers:
                    headers["X-Request-Id"] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)


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
    """Refuses request bodies over the route's limit with 413, before the handler reads
    them: by ``Content-Length`` up front, and by counting while a chunked body streams in.

    An answer sent before its request's body was read in full (this 413, a 401 or 429 of
    the stages after it, a handler that ignores the body) carries ``Connection: close``
    on HTTP/1: the server closes such a connection, and a client told so opens a new one
    for its next request instead of losing it on the closed one.

    Args:
        app: The next ASGI app.
        max_bytes: The limit of routes that declare none (``MAX_BODY_BYTES``).
        routes: Where each request's route and its declared limit are found.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, routes: RouteTable | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = routes or RouteTable()

    def _limit(self, scope: Scope) -> int:
        limits = self.routes.limits(scope)
        declared = limits.max_body_bytes if limits is not None else None
        return self.max_bytes if declared is None else declared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        body_read = declared is None and "transfer-encoding" not in headers
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received, body_read
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
                body_read = body_read or not message.get("more_body", False)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not body_read and scope.get("http_version") in ("1.0", "1.1"):
                    MutableHeaders(scope=message)["Connection"] = "close"
            await send(message)

        if declared is not None:
            declared = declared.strip()
            body_read = declared == "0"
            if not (declared.isascii() and declared.isdigit()):
                refused = HTTPError(400, ["content-length must be a byte count"], code=BAD_NUMBER)
                await refused.response()(scope, receive, tracking_send)
                return
            # Compared by length first: a thousand-digit header is never converted.
            if len(declared) > len(str(limit)) or int(declared) > limit:
                await _too_large(limit)(scope, receive, tracking_send)
                return
        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await _too_large(limit)(scope, receive, tracking_send)


def _too_large(limit: int) -> ASGIApp:
    return error_response(413, TOO_LARGE, code=TOO_LARGE_CODE, limitBytes=limit)


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
    """What ``ProtectionMiddleware`` needs; fields may be replaced while serving.

    Attributes:
        namespace: Prefixes every throttle key (the oracle's DID), so oracles sharing a
            Redis keep apart budgets.
        turn_limit: Turns per ``throttle_window`` per user (``THROTTLE_TURN_LIMIT``).
        read_limit: Other protected requests per window per user (``THROTTLE_READ_LIMIT``).
        throttle_window: The moving window, in seconds (``THROTTLE_TTL_SECONDS``).
    """

    authenticator: Authenticator
    exclusions: ExclusionMatcher
    rate_limiter: RateLimiter
    namespace: str
    turn_limit: int
    read_limit: int
    throttle_window: int
    is_ready: Callable[[], bool] = lambda: True
    subscription_check: SubscriptionCheck | None = None

    def limit_of(self, throttle: ThrottleClass) -> int:
        """The per-user limit of a throttle class."""
        return self.turn_limit if throttle == "turns" else self.read_limit


class ProtectionMiddleware:
    """Exclusions → readiness → authentication → subscription → throttle (SRV-39)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        protection: Protection,
        routes: RouteTable | None = None,
    ) -> None:
        self.app = app
        self.protection = protection
        self.routes = routes or RouteTable()

    async def _throttle(self, key: str, limit: int) -> None:
        decision = await self.protection.rate_limiter.hit(
            f"{self.protection.namespace}:{key}",
            limit=limit,
            window_seconds=self.protection.throttle_window,
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
        limits = self.routes.limits(scope)
        if limits is None:
            # No route answers the path: the router's JSON 404, not a 401 (SRV-2).
            await self.app(scope, receive, send)
            return
        try:
            if protection.exclusions.matches(method, path):
                if path == "/":
                    await self._throttle(f"root:ip:{ip}", ROOT_LIMIT)
                await self.app(scope, receive, send)
                return
            if not protection.is_ready():
                # 503, not 401: a 401 makes the client renew its credentials.
                raise HTTPError(503, NOT_READY, headers={"Retry-After": "5"}, code=NOT_READY_CODE)
            headers = dict(Headers(scope=scope).items())
            state = scope.setdefault("state", {})
            auth = await protection.authenticator.authenticate(
                headers, request_id=state.get("request_id")
            )
            if protection.subscription_check is not None:
                await protection.subscription_check(auth)
            if not path.startswith(THROTTLE_EXEMPT):
                await self._throttle(
                    f"{limits.throttle}:did:{auth.did}", protection.limit_of(limits.throttle)
                )
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
        await self.app(scope, receive, send)
