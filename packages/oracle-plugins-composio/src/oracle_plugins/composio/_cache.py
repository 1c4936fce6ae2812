"""Each user's Tool Router session, kept briefly (five minutes, as the anchor keeps its
tool definitions) so that most turns cost no session round trips."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from oracle_plugins.composio._client import WorkerSession

__all__ = ["SessionCache", "SessionKey"]


@dataclass(frozen=True)
class SessionKey:
    """Whose session: the worker, the oracle (and its key) and the user."""

    base_url: str
    api_key_id: str
    oracle: str
    user: str


class SessionCache:
    """Sessions by ``SessionKey`` for ``ttl`` seconds; one opening at a time per key.

    Concurrent turns of one user share the opening in flight (a turn that goes away does
    not cancel it for the others); a failed opening is not kept, so the next turn tries
    again.
    """

    def __init__(
        self,
        ttl: float = 300.0,
        max_entries: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[SessionKey, tuple[float, WorkerSession]] = OrderedDict()
        self._opening: dict[SessionKey, asyncio.Task[WorkerSession]] = {}

    def get(self, key: SessionKey) -> WorkerSession | None:
        """The kept session, when still fresh."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[key]
            return None
        return entry[1]

    async def get_or_open(
        self, key: SessionKey, open_session: Callable[[], Awaitable[WorkerSession]]
    ) -> WorkerSession:
        """The kept session, else the one ``open_session`` makes (its error propagates)."""
        kept = self.get(key)
        if kept is not None:
            return kept
        task = self._opening.get(key)
        if task is None:
            task = asyncio.ensure_future(self._open(key, open_session))
            task.add_done_callback(_retrieve)
            self._opening[key] = task
        return await asyncio.shield(task)

    def drop(self, key: SessionKey) -> None:
        """Forget the user's session (its tool set may have changed)."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every session."""
        self._entries.clear()
        for task in self._opening.values():
            task.cancel()
        self._opening.clear()

    def __len__(self) -> int:
        return len(self._entries)

    async def _open(
        self, key: SessionKey, open_session: Callable[[], Awaitable[WorkerSession]]
    ) -> WorkerSession:
        try:
            session = await open_session()
        finally:
            self._opening.pop(key, None)
        self._entries[key] = (self._clock() + self._ttl, session)
        self._entries.move_to_end(key)
        self._prune()
        return session

    def _prune(self) -> None:
        now = self._clock()
        for key in [k for k, (expiry, _) in self._entries.items() if expiry <= now]:
            del self._entries[key]
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


def _retrieve(task: asyncio.Task[WorkerSession]) -> None:
    # A failure every waiter left behind is still read, so it is never reported as
    # "exception was never retrieved"; the waiters themselves get it through shield().
    if not task.cancelled():
        task.exception()
