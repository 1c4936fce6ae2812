"""``/delegation``: store, inspect and revoke the user's delegation (SRV-34, 35)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_server._errors import HTTPError
from oracle_server._http.dto import StoreDelegationDto
from oracle_server._http.routing import LimitedRoute, RouteLimits
from oracle_server._http.state import auth_of, read_body, server_of
from oracle_server._persistence import StoredDelegation
from oracle_ucan import validate_delegation

__all__ = ["DELEGATION_BODY_BYTES", "delegation_routes"]

DELEGATION_BODY_BYTES = 64 * 1024
"""The largest body of ``POST /delegation``: a CAR of a few chained delegations fits."""


async def store_delegation(request: Request) -> Response:
    """``POST /delegation {raw, issuer?, audience?, expiration?}``."""
    server, auth = server_of(request), auth_of(request)
    dto = await read_body(request, StoreDelegationDto)
    result = await validate_delegation(
        dto.raw, audience=server.oracle_did, verifier=server.authenticator.verifier
    )
    if not result.ok or result.delegation is None:
        code = result.error.code if result.error else "INVALID_FORMAT"
        raise HTTPError(400, f"Invalid UCAN delegation: {code}")
    if result.invoker != auth.did:
        raise HTTPError(403, "The delegation was not issued by the authenticated user")
    delegation = result.delegation
    if dto.issuer is not None and dto.issuer != delegation.issuer:
        raise HTTPError(400, ["issuer does not match the delegation"])
    if dto.audience is not None and dto.audience != delegation.audience:
        raise HTTPError(400, ["audience does not match the delegation"])
    if dto.expiration is not None and int(dto.expiration) != result.expiration:
        raise HTTPError(400, ["expiration does not match the delegation"])
    # Revoked under the signed payload's key: a re-encoding of the same signed UCAN (an
    # empty nnc added, another CID) has another block CID, never another payload.
    cid = delegation.ucan.replay_key()
    if await server.storage.delegations.is_revoked(cid, str(delegation.cid)):
        raise HTTPError(400, "Invalid UCAN delegation: REVOKED")
    await server.storage.delegations.put(
        StoredDelegation(
            user_did=auth.did,
            raw=dto.raw,
            cid=cid,
            issuer=delegation.issuer,
            audience=delegation.audience,
            capabilities=[dict(c) for c in delegation.capabilities],
            expiration=result.expiration,
            stored_at=datetime.now(UTC),
        )
    )
    body: dict[str, object] = {"ok": True}
    if result.expiration is not None:
        body["expiration"] = result.expiration
    return JSONResponse(body)


async def get_delegation(request: Request) -> Response:
    """``GET /delegation`` → ``{authorized, expiration?}``."""
    server, auth = server_of(request), auth_of(request)
    stored = await server.storage.delegations.get(auth.did)
    authorized = (
        stored is not None
        and (stored.expiration is None or stored.expiration > time.time())
        and not await server.storage.delegations.is_revoked(stored.cid)
    )
    body: dict[str, object] = {"authorized": authorized}
    if authorized and stored is not None and stored.expiration is not None:
        body["expiration"] = stored.expiration
    return JSONResponse(body)


async def delete_delegation(request: Request) -> Response:
    """``DELETE /delegation``: remove it and never re-adopt the same CAR from headers."""
    server, auth = server_of(request), auth_of(request)
    removed = await server.storage.delegations.delete(auth.did)
    if removed is not None:
        await server.storage.delegations.revoke(removed.cid, auth.did)
    return JSONResponse({"ok": True})


def delegation_routes() -> list[BaseRoute]:
    """The delegation routes."""
    return [
        LimitedRoute(
            "/delegation",
            store_delegation,
            methods=["POST"],
            limits=RouteLimits(max_body_bytes=DELEGATION_BODY_BYTES),
        ),
        Route("/delegation", get_delegation, methods=["GET"]),
        Route("/delegation", delete_delegation, methods=["DELETE"]),
    ]
