"""Turn locks of one process: an ``asyncio.Lock`` per session, granted in FIFO order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from oracle_server._turns.locks.base import TurnBusy, wait_timeout

__all__ = ["InMemoryTurnLocks"]


@dataclass
class _SessionLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Holders plus waiters; the entry is dropped when this falls back to zero.
    users: int = 0


class InMemoryTurnLocks:
    """Per-session locks in this process, granted in FIFO order.

    An entry exists only while a turn holds or waits for it, so idle sessions cost nothing.
    """

    def __init__(self) -> None:
        self._locks: dict[str, _SessionLock] = {}

    @property
    def tracked_sessions(self) -> int:
        """The number of sessions with a turn holding or waiting."""
        return len(self._locks)

    def hold(
        self, session_id: str, *, wait: bool, timeout: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn for the duration of an ``async with`` block.

        Args:
            session_id: The session whose turn to take.
            wait: ``True`` queues behind the running turn (FIFO); ``False`` fails at once when
                the turn is taken or already has waiters.
            timeout: Seconds to wait for the turn; ``None`` waits for ever.

        Returns:
            An async context manager holding the turn inside its block.

        Raises:
            TurnBusy: On entry, when ``wait`` is ``False`` and the turn is taken.
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out.
        """
        # The timeout bounds only the wait on entry, not the block, so it is an argument
        # rather than an asyncio.timeout around the caller's `async with`.
        return self._held(session_id, wait=wait, patience=timeout)

    @contextlib.asynccontextmanager
    async def _held(
        self, session_id: str, *, wait: bool, patience: float | None
    ) -> AsyncIterator[None]:
        entry = self._locks.get(session_id)
        if entry is None:
            entry = self._locks[session_id] = _SessionLock()
        elif not wait:
            raise TurnBusy(session_id)
        entry.users += 1
        try:
            # asyncio.Lock wakes waiters in arrival order and never lets a newcomer jump ahead
            # of a woken waiter, which gives the FIFO guarantee.
            try:
                async with asyncio.timeout(patience):
                    await entry.lock.acquire()
            except TimeoutError:
                raise wait_timeout(session_id) from None
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[session_id]

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session in this process."""
        entry = self._locks.get(session_id)
        return entry is not None and entry.lock.locked()

    async def aclose(self) -> None:
        """Nothing to release: entries vanish with their turns."""
