"""The socket.io protocol as the client SDK speaks it (SRV-47 … 50): the events each side
sends, how a plugin event travels, and the handshake's credentials as HTTP headers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oracle_core import OracleEvent
from oracle_server._auth.authenticator import AuthData
from oracle_server._turns.events import EVENT_NAMES

__all__ = [
    "BARE_EVENTS",
    "CLIENT_EVENTS",
    "SERVER_EVENTS",
    "BoundSocket",
    "handshake_headers",
    "socket_message",
]

# What `list-events` advertises, verbatim (SRV-49): the router event is listed as
# `router_update` although it travels as `router.update`, the only name the SDK parses.
CLIENT_EVENTS = ("ping", "status", "subscribe", "list-events", "tool_result", "action_call_result")
SERVER_EVENTS = (
    "connected",
    "pong",
    "status",
    "subscribed",
    "available-events",
    "render_component",
    "tool_call",
    "action_call",
    "browser_tool_call",
    "router_update",
    "message_cache_invalidation",
)
# Sent with the payload itself as the argument; every other event travels in the
# `{eventName, payload}` envelope, the only form the SDK's catch-all handler reads (SRV-50).
BARE_EVENTS = frozenset({"action_call", "browser_tool_call"})


@dataclass(frozen=True)
class BoundSocket:
    """A connected socket: the session it joined and who opened it."""

    session_id: str
    auth: AuthData

    @property
    def did(self) -> str:
        """The authenticated DID."""
        return self.auth.did


def handshake_headers(auth: Any) -> dict[str, str]:
    """The HTTP auth headers equivalent to a handshake's ``auth`` object (SRV-48).

    ``auth.invocation`` becomes ``Authorization: Bearer …`` with ``X-Auth-Type: ucan``;
    ``auth.ucanDelegation`` becomes ``x-ucan-delegation``.
    """
    fields: Mapping[str, Any] = auth if isinstance(auth, Mapping) else {}
    headers: dict[str, str] = {}
    invocation = fields.get("invocation")
    if isinstance(invocation, str) and invocation.strip():
        headers["authorization"] = f"Bearer {invocation.strip()}"
        headers["x-auth-type"] = "ucan"
    delegation = fields.get("ucanDelegation")
    if isinstance(delegation, str) and delegation.strip():
        headers["x-ucan-delegation"] = delegation.strip()
    return headers


def socket_message(event: OracleEvent) -> tuple[str, dict[str, Any]]:
    """The socket.io event name and argument for a plugin event (SRV-50)."""
    name = EVENT_NAMES.get(event.name, event.name)
    payload = {"sessionId": event.session_id, "requestId": event.request_id, **event.payload}
    if name in BARE_EVENTS:
        return name, payload
    return name, {"eventName": name, "payload": payload}
