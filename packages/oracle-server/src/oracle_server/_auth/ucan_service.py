"""``rt_ctx.ucan`` with ``ORACLE_BACKEND=ixo``: the user's delegation decides (UCAN-27 … 33).

Each turn carries the delegation adopted for its user (the request's own, else the one
stored with ``POST /delegation``). Capability checks read its grants; minting signs an
invocation for a downstream service with the oracle's key, proven by that delegation,
and caches it per (user, audience, resource, ability). Minting never raises into a turn:
it returns ``None`` and the plugin degrades; when the delegation is missing or expired,
the user is asked to re-authorise, at most once per throttle window.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from oracle_core import CapabilityDeniedError, UserInfo
from oracle_ucan import (
    Delegation,
    Ed25519Signer,
    InvocationMinter,
    TokenCache,
    UcanError,
    ability_covers,
    resolve_service_did,
    resource_covers,
)

__all__ = ["IxoUcanService"]

logger = logging.getLogger("oracle.server.ucan")

ReauthPrompt = Callable[[str], Coroutine[Any, Any, None]]


@functools.lru_cache(maxsize=1024)
def _parse(raw: str) -> Delegation | None:
    try:
        return Delegation.from_base64(raw)
    except UcanError:
        return None


class IxoUcanService:
    """Gives each user an accessor over their adopted delegation.

    Args:
        oracle_did: ``ORACLE_DID``: the audience of user delegations, the issuer of
            minted invocations.
        signer: The oracle's signing key, read at each mint (it may load after boot).
        reauth: Called (not awaited by the turn) when a mint finds no usable delegation.
        clock: Unix seconds.
    """

    def __init__(
        self,
        *,
        oracle_did: str,
        signer: Callable[[], Ed25519Signer | None],
        reauth: ReauthPrompt | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.oracle_did = oracle_did
        self.signer = signer
        self.clock = clock
        self.cache = TokenCache(clock=clock)
        self._reauth = reauth
        self._prompts: set[asyncio.Task[None]] = set()

    def for_user(self, user: UserInfo) -> IxoUcan:
        """The accessor for ``user``."""
        return IxoUcan(self, user)

    def ask_to_reauthorise(self, user_did: str) -> None:
        """Ask the user to re-authorise, in the background (the reauth hook throttles)."""
        if self._reauth is None:
            return
        task = asyncio.get_running_loop().create_task(self._reauth(user_did))
        self._prompts.add(task)
        task.add_done_callback(self._prompts.discard)


class IxoUcan:
    """One user's capabilities and minting."""

    def __init__(self, service: IxoUcanService, user: UserInfo) -> None:
        self._service = service
        self._user = user
        self._delegation = _parse(user.ucan_delegation) if user.ucan_delegation else None

    def _usable(self) -> Delegation | None:
        delegation = self._delegation
        if delegation is None or delegation.audience != self._service.oracle_did:
            return None
        if delegation.issuer != self._user.did:
            return None
        expiry = delegation.expiration
        if expiry is not None and expiry <= self._service.clock():
            return None
        return delegation

    def has_capability(self, resource: str, action: str) -> bool:
        """Whether the user's delegation grants ``action`` on ``resource``."""
        delegation = self._usable()
        if delegation is None:
            return False
        return any(
            resource_covers(str(c.get("with", "")), resource)
            and ability_covers(str(c.get("can", "")), action)
            for c in delegation.capabilities
        )

    def require_capability(self, resource: str, action: str) -> None:
        """Raise ``CapabilityDeniedError`` unless the delegation grants it."""
        if not self.has_capability(resource, action):
            raise CapabilityDeniedError(resource, action)

    def has_signing_key(self) -> bool:
        """Whether the oracle's key is loaded."""
        return self._service.signer() is not None

    def _minter(self) -> InvocationMinter:
        service = self._service
        return InvocationMinter(
            service.signer(),
            service.oracle_did,
            resolve_service_did=resolve_service_did,
            cache=service.cache,
        )

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str | None:
        """An invocation for service ``did`` on ``capability``, or ``None`` (degrade)."""
        delegation = self._usable()
        if delegation is None:
            self._service.ask_to_reauthorise(self._user.did)
            return None
        token = await self._minter().mint(
            self._user.did,
            delegation,
            audience=did,
            with_=capability,
            can=can,
            skip_cache=skip_cache,
        )
        if token is None:
            logger.info("ucan.mint_refused: the delegation does not grant %s", can)
        return token

    async def resolve_service_did(self, url: str) -> str:
        """The DID of the service at ``url`` (``did:web`` of its origin).

        Raises:
            LookupError: the service publishes no DID document.
        """
        did = await resolve_service_did(url)
        if did is None:
            raise LookupError(f"no DID document at {url}")
        return did

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
        can: str = "*",
    ) -> dict[str, str]:
        """``{"invocation"}`` claiming ``can`` on ``capability``, from a delegation passed
        in, or ``{"error"}`` to show."""
        # Single-use: each call gets a nonce, so two calls in one second differ.
        return await self._minter().create_invocation_from_delegation(
            car,
            service_url,
            {"with": capability, "can": can},
            max_ttl_seconds=max_ttl_seconds,
            skip_cache=True,
        )

    async def mint_oracle_invocation(
        self, service_url: str, can: str, *, with_: str | None = None
    ) -> str | None:
        """A single-use invocation on the oracle's own authority (``with`` its DID)."""
        return await self._minter().mint_own(service_url, can, with_=with_)
