"""The ``ixo:skills`` invocation that lets the registry show the caller's private skills.

Minted per call from the user's delegation (capability ``ixo:skills``, ability
``skills/*``), addressed to the registry's ``did:web``. Every failure — no user, no UCAN
service, no signing key (local mode), no DID document, a delegation that does not grant
it — yields ``None``: the caller goes on public-only and nothing raises into a turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oracle_core import NotConfiguredError, RuntimeContext

__all__ = ["SKILLS_ABILITY", "SKILLS_CAPABILITY", "registry_headers", "skills_invocation"]

SKILLS_CAPABILITY = "ixo:skills"
"""The resource (``with``) of the invocation."""

SKILLS_ABILITY = "skills/*"
"""The ability (``can``) it claims: what a user's registry grant carries."""


async def skills_invocation(rt_ctx: RuntimeContext[Any], base_url: str) -> str | None:
    """An ``ixo:skills`` invocation for the registry at ``base_url``, or ``None``.

    The sandbox plugin sends it as ``X-Skills-Invocation`` so the sandbox can fetch the
    caller's private capsules; the skills tools send it as ``Authorization: Bearer``.
    It never raises: without an invocation the registry answers public rows only.
    Logs name the failure's type, never a token or a DID.

    Args:
        rt_ctx: The request's context (its user and ``rt_ctx.ucan``).
        base_url: The registry, e.g. ``https://capsules.skills.ixo.earth`` (the audience
            is the ``did:web`` served at its origin, ``/.well-known/did.json``).

    Returns:
        The invocation (base64 CAR), or ``None`` when there is no user DID, no UCAN
        service, no signing key, no DID document at the registry, or the user's
        delegation does not grant ``skills/*`` on ``ixo:skills``.
    """
    ucan = rt_ctx.ucan
    if ucan is None or not rt_ctx.user.did:
        return None
    try:
        if not ucan.has_signing_key():
            rt_ctx.logger.debug("skills registry: no signing key, public skills only")
            return None
        audience = await ucan.resolve_service_did(base_url)
    except Exception as exc:
        rt_ctx.logger.warning(
            "skills registry DID not resolved (%s); public skills only", type(exc).__name__
        )
        return None
    if not audience:
        return None
    try:
        token = await ucan.mint_invocation(audience, SKILLS_CAPABILITY, can=SKILLS_ABILITY)
    except NotConfiguredError:
        rt_ctx.logger.debug("skills registry: UCAN minting not configured, public skills only")
        return None
    except Exception as exc:
        rt_ctx.logger.warning(
            "skills invocation not minted (%s); public skills only", type(exc).__name__
        )
        return None
    if not token:
        rt_ctx.logger.info(
            "skills invocation refused: the delegation does not grant %s on %s; public skills only",
            SKILLS_ABILITY,
            SKILLS_CAPABILITY,
        )
        return None
    return token


def registry_headers(network: str, invocation: str | None) -> Mapping[str, str]:
    """Headers of a registry request: the network, and the invocation when there is one."""
    headers = {"X-IXO-Network": network}
    if invocation:
        headers["Authorization"] = f"Bearer {invocation}"
        headers["X-Auth-Type"] = "ucan"
    return headers
