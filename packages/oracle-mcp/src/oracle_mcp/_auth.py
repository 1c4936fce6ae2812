"""Per-user headers for an MCP server: a fresh UCAN invocation for every request.

``Authorization: Bearer <invocation>`` is minted from the user's delegation for the
server's capability (``with``) and ability (``can``), addressed to the server's
``did:web`` (resolved from its URL), with ``X-Auth-Type: ucan``. Nothing here raises into
a turn: a failure is an ``AuthFailure`` whose reason names no user data, and the caller
degrades.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oracle_core import RuntimeContext

__all__ = ["AuthFailure", "HeaderSource", "UcanInvocationAuth", "no_auth"]


@dataclass(frozen=True)
class AuthFailure:
    """Why no headers could be made (safe to log)."""

    reason: str


HeaderSource = Callable[[RuntimeContext[Any]], Awaitable[Mapping[str, str] | AuthFailure]]
"""``(rt_ctx) -> headers | AuthFailure``: what a request to the server carries for this user."""


def no_auth(static: Mapping[str, str] | None = None) -> HeaderSource:
    """Headers that are the same for every user (``static``, or none)."""
    fixed = dict(static or {})

    async def headers(rt_ctx: RuntimeContext[Any]) -> Mapping[str, str] | AuthFailure:
        return fixed

    return headers


class UcanInvocationAuth:
    """Mints ``Authorization`` for one request from the user's delegation.

    Args:
        did_url: Where the server's ``did:web`` document is served (its MCP URL will do:
            the document is looked up at that host).
        capability: The resource (``with``), e.g. ``ixo:memory``.
        ability: The ability (``can``), e.g. ``memory/*``.
        static: Headers sent along with the invocation.
    """

    def __init__(
        self,
        did_url: str,
        capability: str,
        ability: str,
        *,
        static: Mapping[str, str] | None = None,
    ) -> None:
        self.did_url = did_url
        self.capability = capability
        self.ability = ability
        self._static = dict(static or {})

    async def __call__(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str] | AuthFailure:
        """The headers, or why there are none."""
        if not rt_ctx.user.did:
            return AuthFailure("no user DID on this request")
        ucan = rt_ctx.ucan
        if ucan is None:
            return AuthFailure("no UCAN service")
        try:
            audience = await ucan.resolve_service_did(self.did_url)
        except Exception as exc:
            return AuthFailure(f"service DID not resolved ({type(exc).__name__})")
        try:
            token = await ucan.mint_invocation(audience, self.capability, can=self.ability)
        except Exception as exc:
            return AuthFailure(f"invocation not minted ({type(exc).__name__})")
        if not token:
            return AuthFailure(
                f"the user's delegation does not grant {self.ability} on {self.capability}"
            )
        return {**self._static, "Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}
