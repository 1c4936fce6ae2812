"""The DID of a service, read from ``<origin>/.well-known/did.json`` (UCAN-22).

Minted invocations are addressed to this DID. Answers are cached per origin: found DIDs
for an hour, failures for 30 s, so an unreachable service is not asked on every mint
but is retried soon after it comes back.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import httpx

from oracle_ucan.did.web import fetch_json
from oracle_ucan.errors import DidResolutionError

__all__ = ["ServiceDidResolver", "clear_service_did_cache", "resolve_service_did"]

_MAX_DID_LENGTH = 2048


class ServiceDidResolver:
    """Finds and caches service DIDs per origin.

    Args:
        client: Client to send with; ``None`` opens one per lookup.
        timeout: Overall deadline of one lookup, in seconds.
        ttl_seconds: How long a found DID is reused.
        failure_ttl_seconds: How long a failed lookup (``None``) is reused.
        clock: Monotonic seconds; injectable for tests.
        max_entries: Cache size bound; the least recently used origin is dropped first.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        ttl_seconds: float = 3600.0,
        failure_ttl_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 1024,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._ttl = ttl_seconds
        self._failure_ttl = failure_ttl_seconds
        self._clock = clock
        self._max_entries = max(1, max_entries)
        self._cache: OrderedDict[str, tuple[float, str | None]] = OrderedDict()

    async def resolve(self, url: str, *, client: httpx.AsyncClient | None = None) -> str | None:
        """The ``id`` of the DID document at the origin of ``url``.

        Args:
            url: Any http(s) URL of the service; only its origin is used.
            client: Client for this lookup, instead of the resolver's own.

        Returns:
            The DID, or ``None`` when the URL is not http(s), the document cannot be
            fetched, or it has no string ``id`` starting with ``did:``.
        """
        origin = _origin(url)
        if origin is None:
            return None
        cached = self._cache.get(origin)
        if cached is not None:
            if cached[0] > self._clock():
                self._cache.move_to_end(origin)
                return cached[1]
            del self._cache[origin]
        did = await self._fetch(origin + "/.well-known/did.json", client or self._client)
        ttl = self._ttl if did is not None else self._failure_ttl
        if ttl > 0:
            self._cache[origin] = (self._clock() + ttl, did)
            self._cache.move_to_end(origin)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return did

    def clear(self) -> None:
        """Forget every cached answer."""
        self._cache.clear()

    async def _fetch(self, url: str, client: httpx.AsyncClient | None) -> str | None:
        try:
            document = await fetch_json(
                "GET",
                url,
                client=client,
                deadline=self._timeout,
                what="service",
                follow_redirects=True,
            )
        except DidResolutionError:
            return None
        did = document.get("id") if isinstance(document, dict) else None
        if isinstance(did, str) and did.startswith("did:") and len(did) <= _MAX_DID_LENGTH:
            return did
        return None


def _origin(url: str) -> str | None:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return None
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        return None
    # Rebuilt from parts: drops userinfo, path, query and fragment, normalises default ports.
    return str(httpx.URL(scheme=parsed.scheme, host=parsed.host, port=parsed.port))


_shared = ServiceDidResolver()


async def resolve_service_did(url: str, *, client: httpx.AsyncClient | None = None) -> str | None:
    """The DID of the service at ``url``, via a process-wide cache (UCAN-22).

    Args:
        url: Any http(s) URL of the service; only its origin is used.
        client: Client for the lookup; ``None`` opens one.

    Returns:
        The ``id`` of ``<origin>/.well-known/did.json``, or ``None`` on any failure.
    """
    return await _shared.resolve(url, client=client)


def clear_service_did_cache() -> None:
    """Empty the process-wide cache behind :func:`resolve_service_did` (for tests)."""
    _shared.clear()
