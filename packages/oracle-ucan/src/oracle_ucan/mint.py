"""Minting downstream invocations from a user's delegation to the oracle (UCAN-29 … 33)."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oracle_ucan.capability import ability_covers, resource_covers
from oracle_ucan.delegation import Delegation, invoke
from oracle_ucan.errors import UcanError
from oracle_ucan.principal import Ed25519Signer

__all__ = [
    "DEFAULT_INVOCATION_TTL",
    "InvocationMinter",
    "MintError",
    "TokenCache",
    "mint_invocation",
]

DEFAULT_INVOCATION_TTL = 3600
OWN_INVOCATION_TTL = 300
"""Seconds an invocation on the oracle's own authority lives: it is minted per call."""
CACHE_MARGIN_SECONDS = 60

NOT_FOUND = "Delegated capability not found"
NO_KEY = "Oracle signing key not provisioned"
NO_SERVICE_DID = "Could not resolve service DID"


class MintError(UcanError):
    """An invocation could not be minted; ``message`` is fit to show verbatim."""

    code = "UNAUTHORIZED"


def _earliest_expiry(delegation: Delegation) -> int | None:
    expiries = [d.expiration for d in delegation.chain() if d.expiration is not None]
    return min(expiries) if expiries else None


def _covers(delegation: Delegation, with_: str, can: str) -> bool:
    return any(
        ability_covers(str(c["can"]), can) and resource_covers(str(c["with"]), with_)
        for c in delegation.capabilities
    )


def mint_invocation(
    signer: Ed25519Signer,
    delegation: Delegation,
    *,
    oracle_did: str,
    audience: str,
    with_: str,
    can: str = "*",
    nonce: str | None = None,
    now: int | None = None,
    ttl_seconds: int = DEFAULT_INVOCATION_TTL,
) -> Delegation:
    """An invocation from the oracle to ``audience`` proven by the user's ``delegation``.

    ``iss`` is ``oracle_did`` signed with ``signer``'s key, ``att`` is ``[{with, can}]``,
    ``prf`` is the delegation (its blocks embedded), ``exp`` is the earlier of
    ``now + ttl_seconds`` and the delegation chain's first expiry; no ``nbf`` or ``fct``.

    Raises:
        MintError: the delegation grants no capability covering ``can`` on ``with_``, or
            it has already expired.
    """
    now = int(time.time()) if now is None else now
    if not _covers(delegation, with_, can):
        raise MintError(NOT_FOUND)
    expiry = now + ttl_seconds
    earliest = _earliest_expiry(delegation)
    if earliest is not None:
        if earliest <= now:
            raise MintError("The delegation has expired; ask the user to re-authorise")
        expiry = min(expiry, earliest)
    issuer = signer if signer.did() == oracle_did else signer.with_did(oracle_did)
    return invoke(
        issuer,
        audience=audience,
        capability={"with": with_, "can": can},
        expiration=expiry,
        proofs=[delegation],
        nonce=nonce,
    )


@dataclass(frozen=True)
class _Entry:
    token: str
    expires: int


class TokenCache:
    """Minted tokens per (user, audience, resource, ability), reused until 60 s before expiry."""

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self._entries: OrderedDict[tuple[str, str, str, str], _Entry] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    def get(self, key: tuple[str, str, str, str]) -> str | None:
        """A cached token still valid for more than the margin, or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires - CACHE_MARGIN_SECONDS <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry.token

    def put(self, key: tuple[str, str, str, str], token: str, expires: int) -> None:
        """Remember a token."""
        self._entries[key] = _Entry(token, expires)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


ServiceResolver = Callable[[str], Awaitable[str | None]]


class InvocationMinter:
    """Mints invocations for downstream services on behalf of users.

    Args:
        signer: The oracle's Ed25519 key (from the signing mnemonic), or ``None`` when no
            key is provisioned.
        oracle_did: ``ORACLE_DID``, written as the issuer.
        resolve_service_did: ``async (url) -> did | None`` (UCAN-22).
        cache: Token cache (a new one by default).
    """

    def __init__(
        self,
        signer: Ed25519Signer | None,
        oracle_did: str,
        *,
        resolve_service_did: ServiceResolver | None = None,
        cache: TokenCache | None = None,
    ) -> None:
        self.signer = signer
        self.oracle_did = oracle_did
        self._resolve_service_did = resolve_service_did
        self.cache = cache or TokenCache()

    def has_signing_key(self) -> bool:
        """Whether the oracle can sign invocations."""
        return self.signer is not None

    async def mint(
        self,
        user_did: str,
        delegation: Delegation | str | None,
        *,
        audience: str,
        with_: str,
        can: str = "*",
        skip_cache: bool = False,
        now: int | None = None,
    ) -> str | None:
        """A base64 invocation for ``audience``, or ``None`` when it cannot be made.

        ``None`` means no key, no usable delegation or a capability it does not grant;
        callers degrade (UCAN-32). ``skip_cache`` mints a fresh token with a random nonce
        (single-use services) and neither reads nor fills the cache.
        """
        if self.signer is None or delegation is None:
            return None
        key = (user_did, audience, with_, can)
        if not skip_cache:
            cached = self.cache.get(key)
            if cached is not None:
                return cached
        try:
            proof = (
                delegation
                if isinstance(delegation, Delegation)
                else Delegation.from_base64(delegation)
            )
            invocation = mint_invocation(
                self.signer,
                proof,
                oracle_did=self.oracle_did,
                audience=audience,
                with_=with_,
                can=can,
                nonce=secrets.token_hex(8) if skip_cache else None,
                now=now,
            )
        except UcanError:
            return None
        token = invocation.to_base64()
        if not skip_cache and invocation.expiration is not None:
            self.cache.put(key, token, invocation.expiration)
        return token

    async def mint_own(
        self,
        service_url: str,
        can: str,
        *,
        with_: str | None = None,
        ttl_seconds: int = OWN_INVOCATION_TTL,
        now: int | None = None,
    ) -> str | None:
        """A single-use invocation on the oracle's own authority (no proofs), or ``None``.

        ``with`` defaults to the oracle's DID: a principal may invoke any ability on its
        own DID, so a service that serves the oracle itself (a UCAN store listing the
        delegations addressed to it) needs no grant from a user. The audience is the
        ``did:web`` of ``service_url``; ``None`` without a key or a service DID.
        """
        if self.signer is None:
            return None
        service_did = (
            await self._resolve_service_did(service_url) if self._resolve_service_did else None
        )
        if not service_did:
            return None
        now = int(time.time()) if now is None else now
        issuer = (
            self.signer
            if self.signer.did() == self.oracle_did
            else self.signer.with_did(self.oracle_did)
        )
        invocation = invoke(
            issuer,
            audience=service_did,
            capability={"with": with_ or self.oracle_did, "can": can},
            expiration=now + ttl_seconds,
            nonce=secrets.token_hex(8),
        )
        return invocation.to_base64()

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: Mapping[str, Any],
        *,
        skip_cache: bool = False,
        max_ttl_seconds: int | None = None,
        now: int | None = None,
    ) -> dict[str, str]:
        """``{"invocation": token}`` or ``{"error": text}`` for a delegation passed in.

        The delegation must be addressed to the oracle; the service DID is resolved from
        ``service_url``. Error texts are fit to show verbatim.
        """
        if self.signer is None:
            return {"error": NO_KEY}
        try:
            delegation = Delegation.from_base64(car)
        except UcanError as exc:
            return {"error": f"Invalid delegation: {exc.message}"}
        if delegation.audience != self.oracle_did:
            return {
                "error": f"Delegation audience {delegation.audience} does not match the "
                f"oracle DID {self.oracle_did}"
            }
        service_did = (
            await self._resolve_service_did(service_url) if self._resolve_service_did else None
        )
        if not service_did:
            return {"error": NO_SERVICE_DID}
        try:
            invocation = mint_invocation(
                self.signer,
                delegation,
                oracle_did=self.oracle_did,
                audience=service_did,
                with_=str(capability["with"]),
                can=str(capability.get("can", "*")),
                nonce=secrets.token_hex(8) if skip_cache else None,
                now=now,
                ttl_seconds=max_ttl_seconds or DEFAULT_INVOCATION_TTL,
            )
        except MintError as exc:
            return {"error": exc.message}
        return {"invocation": invocation.to_base64()}
