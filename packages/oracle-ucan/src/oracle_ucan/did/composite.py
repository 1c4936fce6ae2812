"""The resolver the validator uses: several methods behind one cache (UCAN-18).

Each DID is resolved by the first resolver that handles its method. Results are cached
for ``ttl_seconds`` (a key removed from a DID document stays trusted that long) and
failures for ``failure_ttl_seconds`` (so a flood of tokens naming an unresolvable DID
costs one lookup per interval). Concurrent resolutions of one DID share one lookup.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import httpx

from oracle_ucan.did.ixo import IxoResolver
from oracle_ucan.did.key import KeyResolver
from oracle_ucan.did.local import LocalResolver
from oracle_ucan.did.web import WebResolver
from oracle_ucan.errors import DidResolutionError, ErrorCode, NotHandled

__all__ = ["CompositeResolver", "DidResolver", "default_resolver"]

logger = logging.getLogger(__name__)


class DidResolver(Protocol):
    """Anything that resolves DIDs of some methods to ``did:key`` verification keys."""

    async def resolve(self, did: str) -> list[str]:
        """The DID's ``did:key`` strings in document order.

        Raises:
            NotHandled: the resolver does not handle the DID's method.
            DidResolutionError: the DID could not be resolved.
        """
        ...


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One cached resolution: keys, or what to raise again."""

    # The error is kept as text, not as the exception: its traceback would keep the
    # failed lookup's frames alive for the whole failure TTL.
    keys: tuple[str, ...]
    expires_at: float
    error: str | None = None
    error_code: ErrorCode = "UNAUTHORIZED"
    not_handled: bool = False

    def unwrap(self) -> list[str]:
        if self.error is None:
            return list(self.keys)
        error_type = NotHandled if self.not_handled else DidResolutionError
        raise error_type(self.error, code=self.error_code)


class CompositeResolver:
    """Tries resolvers in order, skipping those that raise ``NotHandled``; caches outcomes.

    Args:
        resolvers: Consulted in this order; the first that does not raise ``NotHandled``
            decides.
        ttl_seconds: How long a successful resolution is reused (``DID_CACHE_TTL_SECONDS``).
        failure_ttl_seconds: How long a failed resolution is reused before retrying.
        clock: Monotonic seconds; injectable for tests.
        max_entries: Cache size bound; the least recently used DID is dropped first.

    Raises:
        ValueError: a negative TTL or ``max_entries`` below 1.
    """

    def __init__(
        self,
        resolvers: Sequence[DidResolver],
        *,
        ttl_seconds: float = 300.0,
        failure_ttl_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        if ttl_seconds < 0 or failure_ttl_seconds < 0:
            raise ValueError("DID cache TTLs must not be negative")
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._resolvers = tuple(resolvers)
        self._ttl = ttl_seconds
        self._failure_ttl = failure_ttl_seconds
        self._clock = clock
        self._max_entries = max_entries
        self._cache: OrderedDict[str, _Outcome] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Outcome]] = {}

    @property
    def resolvers(self) -> tuple[DidResolver, ...]:
        """The resolvers, in the order they are consulted."""
        return self._resolvers

    async def resolve(self, did: str) -> list[str]:
        """The DID's ``did:key`` strings, from the cache or the first handling resolver.

        Raises:
            NotHandled: no resolver handles the DID's method.
            DidResolutionError: the handling resolver failed (possibly a cached failure).
        """
        outcome = self._cached(did)
        if outcome is None:
            task = self._inflight.get(did)
            # A lookup left pending by a closed event loop (one resolver shared by several
            # test loops) cannot be awaited here; start a fresh one instead.
            if task is None or task.get_loop() is not asyncio.get_running_loop():
                task = asyncio.create_task(self._resolve_and_store(did))
                self._inflight[did] = task
                task.add_done_callback(partial(self._settled, did))
            # Shielded: one caller giving up must not cancel the lookup the others await.
            outcome = await asyncio.shield(task)
        return outcome.unwrap()

    def invalidate(self, did: str | None = None) -> None:
        """Drop the cached outcome of ``did``, or of every DID when ``did`` is ``None``."""
        if did is None:
            self._cache.clear()
        else:
            self._cache.pop(did, None)

    def _cached(self, did: str) -> _Outcome | None:
        outcome = self._cache.get(did)
        if outcome is None:
            return None
        if outcome.expires_at <= self._clock():
            del self._cache[did]
            return None
        self._cache.move_to_end(did)
        return outcome

    async def _resolve_and_store(self, did: str) -> _Outcome:
        try:
            keys = await self._resolve_uncached(did)
        except DidResolutionError as exc:
            outcome = _Outcome(
                (),
                self._clock() + self._failure_ttl,
                error=exc.message,
                error_code=exc.code,
                not_handled=isinstance(exc, NotHandled),
            )
            ttl = self._failure_ttl
        else:
            outcome = _Outcome(keys, self._clock() + self._ttl)
            ttl = self._ttl
        if ttl > 0:
            self._cache[did] = outcome
            self._cache.move_to_end(did)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return outcome

    async def _resolve_uncached(self, did: str) -> tuple[str, ...]:
        for resolver in self._resolvers:
            try:
                keys: object = await resolver.resolve(did)
            except NotHandled:
                continue
            except DidResolutionError:
                raise
            except Exception as exc:
                # A third-party resolver's bug must not escape a validator, which never
                # raises (UCAN-23); the DID itself stays out of the log.
                logger.warning(
                    "DID resolver %s raised %s", type(resolver).__name__, type(exc).__name__
                )
                raise DidResolutionError(
                    f"DID resolver {type(resolver).__name__} failed ({type(exc).__name__})"
                ) from exc
            if not (
                isinstance(keys, list)
                and keys
                and all(isinstance(key, str) and key.startswith("did:key:") for key in keys)
            ):
                raise DidResolutionError(
                    f"DID resolver {type(resolver).__name__} returned no did:key"
                )
            return tuple(keys)
        method = ":".join(did.split(":", 2)[:2]) if did.startswith("did:") else "non-DID"
        raise NotHandled(f"no resolver handles {method[:40]}")

    def _settled(self, did: str, task: asyncio.Task[_Outcome]) -> None:
        if self._inflight.get(did) is task:
            del self._inflight[did]


def default_resolver(
    *,
    blocksync_graphql_url: str | None = None,
    local: LocalResolver | None = None,
    client: httpx.AsyncClient | None = None,
    ttl_seconds: float = 300.0,
) -> CompositeResolver:
    """The standard chain: local, ``did:key``, ``did:ixo`` (when a URL is given), ``did:web``.

    Args:
        blocksync_graphql_url: ``BLOCKSYNC_GRAPHQL_URL``; without it ``did:ixo`` is not
            handled.
        local: The local table to consult first; a new empty one by default.
        client: Shared HTTP client for the network resolvers.
        ttl_seconds: Success cache TTL (``DID_CACHE_TTL_SECONDS``).
    """
    resolvers: list[DidResolver] = [local if local is not None else LocalResolver()]
    resolvers.append(KeyResolver())
    if blocksync_graphql_url:
        resolvers.append(IxoResolver(blocksync_graphql_url, client=client))
    resolvers.append(WebResolver(client=client))
    return CompositeResolver(resolvers, ttl_seconds=ttl_seconds)
