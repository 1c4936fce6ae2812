"""Socket connections and handshakes counted per client IP, before any is authenticated.

A handshake costs a UCAN check and a session lookup, which opens the caller's storage:
each IP gets ``SOCKET_HANDSHAKE_LIMIT`` of them per ``SOCKET_HANDSHAKE_WINDOW_SECONDS``,
refused ones included, on the server's rate limiter (in memory, or in Redis). Over the
limit a handshake gets the protocol's connect error.

A new Engine.IO connection (a websocket upgrade, or a polling open) comes before its
handshake and holds server state even if no handshake follows: an IP gets twice the
handshake limit of them, so a client that goes on to its handshake meets that limit (and
its connect error) first, while connections that never shake hands are cut off with 429.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import socketio  # type: ignore[import-untyped]
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_server._errors import error_body, error_response
from oracle_server._http.ratelimit import RateDecision, RateLimiter
from oracle_server._settings import ServerSettings

__all__ = ["THROTTLED", "HandshakeThrottle", "UpgradeThrottle", "client_ip"]

logger = logging.getLogger("oracle.server.ws")

THROTTLED = "Too Many Requests"


def client_ip(environ: Mapping[str, Any]) -> str:
    """The client's IP from the ASGI scope behind a python-socketio ``environ``."""
    # python-socketio's ASGI environ always says REMOTE_ADDR 127.0.0.1; the scope knows.
    scope = environ.get("asgi.scope")
    client = scope.get("client") if isinstance(scope, Mapping) else None
    return str(client[0]) if client else "unknown"


class HandshakeThrottle:
    """Refuses a handshake beyond its IP's limit with the protocol's connect error.

    Args:
        limiter: The server's rate limiter.
        settings: ``SOCKET_HANDSHAKE_LIMIT`` and ``SOCKET_HANDSHAKE_WINDOW_SECONDS``.
    """

    def __init__(self, limiter: RateLimiter, settings: ServerSettings) -> None:
        self.limiter = limiter
        self.limit = settings.socket_handshake_limit
        self.window_seconds = settings.socket_handshake_window_seconds

    async def hit(self, kind: str, ip: str, limit: int) -> RateDecision | None:
        """Count one ``kind`` of ``ip``; ``None`` when the limiter failed (not counted)."""
        try:
            return await self.limiter.hit(
                f"ws:{kind}:{ip}", limit=limit, window_seconds=self.window_seconds
            )
        except Exception as exc:
            # A rate-limit store that is down must not lock every client out.
            logger.warning("socket %s not throttled: the rate limiter failed: %r", kind, exc)
            return None

    async def check(self, environ: Mapping[str, Any]) -> None:
        """Count one handshake of ``environ``'s IP.

        Raises:
            socketio.exceptions.ConnectionRefusedError: over the limit: ``Too Many
                Requests`` with ``{code: "ws.throttled", retryAfter: <seconds>}``.
        """
        ip = client_ip(environ)
        decision = await self.hit("handshake", ip, self.limit)
        if decision is not None and not decision.allowed:
            logger.info("socket refused: too many handshakes from %s", ip)
            raise socketio.exceptions.ConnectionRefusedError(
                THROTTLED, {"code": "ws.throttled", "retryAfter": decision.retry_after}
            )


class UpgradeThrottle:
    """Pure ASGI: new Engine.IO connections of an IP beyond twice the handshake limit
    are answered 429 ``ws.throttled`` (a websocket upgrade is denied, with that answer
    where the server supports the denial response); every other request passes.

    Args:
        app: The socket.io ASGI app.
        throttle: The gateway's handshake throttle (its limiter, limit and window).
    """

    def __init__(self, app: ASGIApp, throttle: HandshakeThrottle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not _opens_connection(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        ip = str(client[0]) if client else "unknown"
        decision = await self.throttle.hit("upgrade", ip, 2 * self.throttle.limit)
        if decision is None or decision.allowed:
            await self.app(scope, receive, send)
            return
        logger.info("socket connection refused: too many from %s", ip)
        headers = {"Retry-After": str(decision.retry_after)}
        if scope["type"] == "http":
            response = error_response(429, THROTTLED, headers=headers, code="ws.throttled")
            await response(scope, receive, send)
        elif "websocket.http.response" in scope.get("extensions", {}):
            body = json.dumps(error_body(429, THROTTLED, code="ws.throttled")).encode()
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"retry-after", headers["Retry-After"].encode()),
                    ],
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})


def _opens_connection(scope: Scope) -> bool:
    """Whether a request to ``/socket.io/`` opens a new Engine.IO connection (no ``sid``)."""
    if not str(scope.get("path", "")).startswith("/socket.io"):
        return False
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    return not query.get("sid")
