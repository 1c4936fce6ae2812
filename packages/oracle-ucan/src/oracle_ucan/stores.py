"""Single-use bookkeeping of invocations (UCAN-34)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["InMemoryInvocationStore", "InvocationStore"]

DEFAULT_TTL_SECONDS = 24 * 3600
CLEANUP_EVERY_SECONDS = 3600


class InvocationStore(Protocol):
    """Remembers invocation CIDs already used."""

    async def has(self, cid: str) -> bool:
        """Whether ``cid`` was used and has not expired."""
        ...

    async def add(self, cid: str, ttl_seconds: int) -> None:
        """Record ``cid`` as used for ``ttl_seconds``."""
        ...

    async def claim(self, cid: str, ttl_seconds: int) -> bool:
        """Record ``cid`` unless it is already recorded, atomically; ``False`` if it was.

        Two concurrent uses of one invocation must not both succeed (a SQL store does this
        with ``INSERT … ON CONFLICT DO NOTHING``).
        """
        ...


class InMemoryInvocationStore:
    """Process-local store; an hourly sweep drops expired entries.

    Single-use across replicas needs a shared store (the server keeps one in SQL).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._expiry: dict[str, float] = {}
        self._clock = clock
        self._next_cleanup = clock() + CLEANUP_EVERY_SECONDS

    async def has(self, cid: str) -> bool:
        expires = self._expiry.get(cid)
        return expires is not None and expires > self._clock()

    async def claim(self, cid: str, ttl_seconds: int) -> bool:
        # No await between the check and the write: atomic on one event loop.
        expires = self._expiry.get(cid)
        if expires is not None and expires > self._clock():
            return False
        await self.add(cid, ttl_seconds)
        return True

    async def add(self, cid: str, ttl_seconds: int) -> None:
        now = self._clock()
        self._expiry[cid] = now + max(1, min(ttl_seconds, DEFAULT_TTL_SECONDS))
        if now >= self._next_cleanup:
            await self.cleanup()

    async def cleanup(self) -> None:
        """Drop expired entries."""
        now = self._clock()
        self._expiry = {cid: exp for cid, exp in self._expiry.items() if exp > now}
        self._next_cleanup = now + CLEANUP_EVERY_SECONDS

    def __len__(self) -> int:
        return len(self._expiry)
