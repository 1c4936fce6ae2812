"""UCAN authentication of requests (SRV-41 … 44).

1. ``X-Auth-Type: ucan`` with ``Authorization: Bearer <invocation>`` → the invocation's
   issuer, validated as an auth invocation; no fallback when it fails.
2. Else ``x-ucan-delegation`` → the delegation's issuer (migration fallback).
3. Else 401.

Results are cached by the SHA-256 of the exact header value until the token expires.
A token that makes validation fail in any unexpected way (a decoder bug, a resolver's own
exception) is refused like any invalid token, with 401, and logged with the stable code
``auth.ucan.unexpected`` and the exception's type only: never the token.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oracle_server._errors import HTTPError
from oracle_ucan import (
    ChainVerifier,
    ValidateResult,
    validate_auth_invocation,
    validate_delegation,
)

__all__ = ["AuthData", "Authenticator", "DelegationInfo"]

MISSING_AUTH = (
    "Missing UCAN authentication: provide Authorization: Bearer <invocation> with "
    "X-Auth-Type: ucan, or an x-ucan-delegation header"
)
DELEGATION_CACHE_SECONDS = 180
CACHE_ENTRIES = 10_000
UNEXPECTED_CODE = "auth.ucan.unexpected"

logger = logging.getLogger("oracle.server.auth")


@dataclass(frozen=True)
class DelegationInfo:
    """A validated delegation from the user to the oracle."""

    raw: str
    cid: str
    """The key it is revoked under: its signed payload's CID (``Ucan.replay_key``)."""
    issuer: str
    audience: str
    capabilities: tuple[Mapping[str, Any], ...]
    expiration: int | None
    block_cid: str = ""
    """Its root block's CID (revocations stored before were keyed by it)."""


@dataclass(frozen=True)
class AuthData:
    """Who made a request, as handlers see it (SRV-44)."""

    did: str
    delegation: DelegationInfo | None = None
    timezone: str | None = None
    home_server: str | None = None
    request_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Cached:
    value: Any
    expires: float


class _TokenCache:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._entries: OrderedDict[str, _Cached] = OrderedDict()
        self._clock = clock

    def get(self, key: str) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry.value

    def put(self, key: str, value: Any, expires: float) -> None:
        self._entries[key] = _Cached(value, expires)
        self._entries.move_to_end(key)
        while len(self._entries) > CACHE_ENTRIES:
            self._entries.popitem(last=False)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _refused_unexpectedly(kind: str, exc: Exception) -> ValidateResult:
    # The type only: a message may quote the token or a document a resolver fetched.
    logger.warning("%s: the %s was refused after %s", UNEXPECTED_CODE, kind, type(exc).__name__)
    return ValidateResult.fail("INVALID_FORMAT", f"validation failed ({UNEXPECTED_CODE})")


class Authenticator:
    """Validates the UCAN headers of a request.

    Args:
        oracle_did: ``ORACLE_DID``, the audience every token must name.
        max_ttl: ``UCAN_AUTH_MAX_TTL_SECONDS``.
        verifier: Resolves and verifies issuers (did:key only in local mode).
        is_revoked: ``async (*keys) -> bool`` for delegations the user deleted.
        clock: Wall clock (seconds).
    """

    def __init__(
        self,
        *,
        oracle_did: str,
        max_ttl: int,
        verifier: ChainVerifier,
        is_revoked: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.oracle_did = oracle_did
        self.max_ttl = max_ttl
        self.verifier = verifier
        self._is_revoked = is_revoked
        self._clock = clock
        self._cache = _TokenCache(clock)

    async def _invocation_did(self, token: str) -> str | None:
        key = "inv:" + _digest(token)
        cached = self._cache.get(key)
        if cached is not None:
            return str(cached)
        try:
            result = await validate_auth_invocation(
                token,
                audience=self.oracle_did,
                max_ttl=self.max_ttl,
                now=int(self._clock()),
                verifier=self.verifier,
            )
        except Exception as exc:  # a refusal like any other, never a 500
            result = _refused_unexpectedly("invocation", exc)
        if not result.ok or result.invoker is None:
            return None
        self._cache.put(key, result.invoker, float(result.expiration or self._clock()))
        return result.invoker

    async def delegation(self, token: str) -> DelegationInfo | None:
        """The delegation in ``token`` when it is valid and not revoked, else ``None``."""
        key = "del:" + _digest(token)
        cached = self._cache.get(key)
        if cached is None:
            try:
                result = await validate_delegation(
                    token, audience=self.oracle_did, now=int(self._clock()), verifier=self.verifier
                )
            except Exception as exc:  # a refusal like any other, never a 500
                result = _refused_unexpectedly("delegation", exc)
            if not result.ok or result.delegation is None or result.invoker is None:
                return None
            delegation = result.delegation
            cached = DelegationInfo(
                raw=token,
                cid=delegation.ucan.replay_key(),
                block_cid=str(delegation.cid),
                issuer=result.invoker,
                audience=delegation.audience,
                capabilities=tuple(dict(c) for c in delegation.capabilities),
                expiration=result.expiration,
            )
            now = self._clock()
            expires = now + DELEGATION_CACHE_SECONDS
            if result.expiration is not None:
                expires = min(float(result.expiration), expires)
            self._cache.put(key, cached, expires)
        assert isinstance(cached, DelegationInfo)
        if self._is_revoked is not None and await self._is_revoked(cached.cid, cached.block_cid):
            return None
        return cached

    async def authenticate(
        self, headers: Mapping[str, str], *, request_id: str | None = None
    ) -> AuthData:
        """The caller, or ``HTTPError(401)``.

        Args:
            headers: Request headers, lower-case names.
            request_id: The request's id, copied into ``AuthData``.
        """
        timezone = headers.get("x-timezone") or None
        home_server = headers.get("x-matrix-homeserver") or None
        auth_type = headers.get("x-auth-type", "").strip().lower()
        authorization = headers.get("authorization", "")
        delegation_header = headers.get("x-ucan-delegation", "").strip()
        if auth_type == "ucan" and authorization[:7].lower() == "bearer ":
            did = await self._invocation_did(authorization[7:].strip())
            if did is None:
                raise HTTPError(401, "Invalid UCAN invocation")
            delegation = None
            if delegation_header:
                # Adopted for downstream minting only when it is the same user's.
                candidate = await self.delegation(delegation_header)
                if candidate is not None and candidate.issuer == did:
                    delegation = candidate
            return AuthData(did, delegation, timezone, home_server, request_id)
        if delegation_header:
            delegation = await self.delegation(delegation_header)
            if delegation is None:
                raise HTTPError(401, "Invalid UCAN delegation")
            return AuthData(delegation.issuer, delegation, timezone, home_server, request_id)
        raise HTTPError(401, MISSING_AUTH)
