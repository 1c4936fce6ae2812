"""Handshakes counted per client IP, before any of them is authenticated.

A handshake costs a UCAN check and a session lookup, which opens the caller's storage:
each IP gets ``SOCKET_HANDSHAKE_LIMIT`` of them per ``SOCKET_HANDSHAKE_WINDOW_SECONDS``,
refused ones included, on the server's rate limiter (in memory, or in Redis).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import socketio  # type: ignore[import-untyped]

from oracle_server._http.ratelimit import RateLimiter
from oracle_server._settings import ServerSettings

__all__ = ["THROTTLED", "HandshakeThrottle", "client_ip"]

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

    async def check(self, environ: Mapping[str, Any]) -> None:
        """Count one handshake of ``environ``'s IP.

        Raises:
            socketio.exceptions.ConnectionRefusedError: over the limit: ``Too Many
                Requests`` with ``{code: "ws.throttled", retryAfter: <seconds>}``.
        """
        ip = client_ip(environ)
        try:
            decision = await self.limiter.hit(
                f"ws:handshake:{ip}", limit=self.limit, window_seconds=self.window_seconds
            )
        except Exception as exc:
            # A rate-limit store that is down must not lock every client out.
            logger.warning("socket handshake not throttled: the rate limiter failed: %r", exc)
            return
        if not decision.allowed:
            logger.info("socket refused: too many handshakes from %s", ip)
            raise socketio.exceptions.ConnectionRefusedError(
                THROTTLED, {"code": "ws.throttled", "retryAfter": decision.retry_after}
            )
