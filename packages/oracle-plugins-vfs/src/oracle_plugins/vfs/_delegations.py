"""Hop 1 of the two-hop UCAN: the user's delegation to the oracle, from the UCAN Store.

Wire (03-plugins §17.4; the query and answer shapes are this plugin's choice, and
``oracle_plugins.vfs.testing.UcanStoreDouble`` follows them)::

    GET {store}/api/delegations?audience=<ORACLE_DID>&issuer=<user DID>&with=ixo:filesystem
    Authorization: Bearer <invocation>      X-Auth-Type: ucan
    200 {"delegations": [{"cid": str, "delegation": <base64 CAR>,
                          "issuer": str, "audience": str, "expiration": int | null}]}

The bearer is an invocation on the oracle's own authority
(``rt_ctx.ucan.mint_oracle_invocation(store, "store/get")``: ``with`` the oracle's DID,
no proofs, single-use), minted per request. An empty list (or ``404``) means the user
granted nothing. The first delegation that is not about to expire is used, and kept per
user until a minute before it expires, at most ``ttl`` seconds; "nothing granted" is
kept ``miss_ttl`` seconds so a user without a grant does not cost a lookup per turn.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from oracle_core import UcanAccessor
from oracle_plugins.vfs._backend import VfsError

__all__ = ["STORE_ABILITY", "VFS_CAPABILITY", "DelegationCache", "StoredDelegation"]

VFS_CAPABILITY = "ixo:filesystem"
"""The resource (``with``) the user grants the oracle and every VFS invocation claims."""

STORE_ABILITY = "store/get"
"""What the oracle's own invocation to the UCAN Store claims."""

_EXPIRY_MARGIN = 60


@dataclass(frozen=True)
class StoredDelegation:
    """A user's delegation to the oracle: the base64 CAR and its expiry (Unix seconds)."""

    car: str
    expiration: int | None


class DelegationCache:
    """Fetches and keeps each user's delegation to the oracle.

    Args:
        http: The plugin's shared client.
        store_url: The UCAN Store's base URL.
        oracle_did: ``ORACLE_DID``: the audience the store is asked for.
        timeout_seconds: Per-request timeout.
        ttl: Seconds a delegation is kept at most.
        miss_ttl: Seconds "nothing granted" is kept.
        clock: Unix seconds.
        logger: Where lookups are logged (kinds and statuses only, never a token).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        store_url: str,
        *,
        oracle_did: str,
        timeout_seconds: float,
        ttl: float = 300.0,
        miss_ttl: float = 30.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.time,
        logger: logging.Logger | None = None,
    ) -> None:
        self._http = http
        self.store_url = store_url.rstrip("/")
        self.oracle_did = oracle_did
        self._timeout = timeout_seconds
        self._ttl = ttl
        self._miss_ttl = miss_ttl
        self._max = max_entries
        self._clock = clock
        self._logger = logger or logging.getLogger("oracle.plugin.vfs")
        self._entries: OrderedDict[str, tuple[float, StoredDelegation | None]] = OrderedDict()

    def forget(self, user_did: str) -> None:
        """Drop what is kept for ``user_did`` (its delegation stopped working)."""
        self._entries.pop(user_did, None)

    async def get(self, ucan: UcanAccessor, user_did: str) -> StoredDelegation | None:
        """The user's delegation, or ``None`` when they granted the oracle nothing.

        Raises:
            VfsError: ``unavailable`` when the store cannot be asked or refuses the
                oracle, ``busy`` when it rate-limits.
        """
        now = self._clock()
        entry = self._entries.get(user_did)
        if entry is not None and entry[0] > now:
            return entry[1]
        found = await self._fetch(ucan, user_did)
        if found is None:
            keep_until = now + self._miss_ttl
        else:
            keep_until = now + self._ttl
            if found.expiration is not None:
                keep_until = min(keep_until, found.expiration - _EXPIRY_MARGIN)
        self._entries[user_did] = (keep_until, found)
        self._entries.move_to_end(user_did)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return found

    async def _fetch(self, ucan: UcanAccessor, user_did: str) -> StoredDelegation | None:
        params = {"audience": self.oracle_did, "issuer": user_did, "with": VFS_CAPABILITY}
        url = f"{self.store_url}/api/delegations"
        for attempt in (1, 2):
            token = await self._invocation(ucan)
            try:
                response = await self._http.get(
                    url,
                    params=params,
                    headers={"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"},
                    timeout=self._timeout,
                )
            except httpx.TransportError as exc:
                if attempt == 1:
                    continue
                self._logger.warning("vfs: UCAN store unreachable (%s)", type(exc).__name__)
                raise VfsError("unavailable", "the UCAN store is unreachable") from exc
            status = response.status_code
            if status == 200:
                return self._pick(response)
            if status == 404:
                return None
            # Once more on 401 (a fresh invocation) and on a transient failure: the
            # lookup is a GET.
            if attempt == 1 and (status in (401, 429) or status >= 500):
                continue
            self._logger.warning("vfs: UCAN store answered %s", status)
            if status == 429:
                raise VfsError("busy", "the UCAN store is busy")
            raise VfsError("unavailable", f"the UCAN store answered {status}")
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _invocation(self, ucan: UcanAccessor) -> str:
        try:
            token = await ucan.mint_oracle_invocation(self.store_url, STORE_ABILITY)
        except Exception as exc:  # no minting backend, no DID document: never into a turn
            self._logger.warning("vfs: store invocation not minted (%s)", type(exc).__name__)
            raise VfsError(
                "unavailable", "the oracle cannot authenticate to the UCAN store"
            ) from exc
        if not token:
            raise VfsError("unavailable", "the oracle cannot authenticate to the UCAN store")
        return token

    def _pick(self, response: httpx.Response) -> StoredDelegation | None:
        try:
            body = response.json()
        except ValueError as exc:
            raise VfsError("unavailable", "the UCAN store sent an unreadable answer") from exc
        rows = body.get("delegations") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise VfsError("unavailable", "the UCAN store sent an unreadable answer")
        now = self._clock()
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("delegation"), str):
                continue
            expiration = row.get("expiration")
            expiry = int(expiration) if isinstance(expiration, int | float) else None
            if expiry is not None and expiry <= now + _EXPIRY_MARGIN:
                continue
            return StoredDelegation(car=row["delegation"], expiration=expiry)
        return None
