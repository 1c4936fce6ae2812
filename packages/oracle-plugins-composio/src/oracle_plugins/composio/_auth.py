"""The ``x-ucan-invocation`` of one worker request, minted from the user's delegation.

The audience is the worker's ``did:web`` (``COMPOSIO_BASE_URL/.well-known/did.json``,
resolved by ``rt_ctx.ucan.resolve_service_did``), the proof the user→oracle delegation.
As in the TypeScript runtime the claim is ``sandbox/*`` on ``ixo:sandbox`` (the worker
rides on the sandbox grant the user gives the oracle), minted with ``skip_cache``: the
worker keeps invocations single-use, so a cached one would be refused as a replay.

Auth is UCAN-only: when no invocation can be minted the caller gets an
``Unauthorised`` (its reason names no user data) and Composio is simply absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oracle_core import RuntimeContext

__all__ = ["COMPOSIO_ABILITY", "COMPOSIO_CAPABILITY", "Unauthorised", "mint_worker_invocation"]

COMPOSIO_CAPABILITY = "ixo:sandbox"
COMPOSIO_ABILITY = "sandbox/*"


@dataclass(frozen=True)
class Unauthorised:
    """Why no invocation could be minted (safe to log)."""

    reason: str


async def mint_worker_invocation(rt_ctx: RuntimeContext[Any], base_url: str) -> str | Unauthorised:
    """A fresh invocation for the worker at ``base_url``, or why there is none."""
    if not rt_ctx.user.did:
        return Unauthorised("no user DID on this request")
    ucan = rt_ctx.ucan
    if ucan is None:
        return Unauthorised("no UCAN service")
    try:
        audience = await ucan.resolve_service_did(base_url)
    except Exception as exc:  # unreachable worker, no document, no minting backend
        return Unauthorised(f"worker DID not resolved ({type(exc).__name__})")
    if not audience:
        return Unauthorised("worker DID not resolved")
    try:
        token = await ucan.mint_invocation(
            audience, COMPOSIO_CAPABILITY, can=COMPOSIO_ABILITY, skip_cache=True
        )
    except Exception as exc:
        return Unauthorised(f"invocation not minted ({type(exc).__name__})")
    if not token:
        return Unauthorised(
            f"no usable delegation granting {COMPOSIO_ABILITY} on {COMPOSIO_CAPABILITY}"
        )
    return token
