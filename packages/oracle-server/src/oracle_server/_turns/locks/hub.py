"""Turn locks held by the workers' hub: one running turn per session across one machine.

The hub holds an :class:`~oracle_server._turns.locks.memory.InMemoryTurnLocks`, so the
FIFO order and ``reject`` rule are that of one process, across every worker. A turn is
given back when its block exits, or at once when its worker's connection ends: no lease
has to run out after a crash.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import cast

from oracle_server._workers.connection import HubConnection

__all__ = ["HubTurnLocks"]


class HubTurnLocks:
    """Per-session turn locks shared by one machine's workers through their hub."""

    def __init__(self, hub: HubConnection) -> None:
        self._hub = hub

    def hold(
        self, session_id: str, *, wait: bool, timeout: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn for the duration of an ``async with`` block.

        Args:
            session_id: The session whose turn to take.
            wait: ``True`` queues behind the running turn (FIFO across the workers);
                ``False`` fails at once when the turn is taken or already has waiters.
            timeout: Seconds to wait for the turn; ``None`` waits for ever.

        Returns:
            An async context manager holding the turn inside its block.

        Raises:
            TurnBusy: On entry, when ``wait`` is ``False`` and the turn is taken.
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out.
        """
        return self._held(session_id, wait=wait, patience=timeout)

    @contextlib.asynccontextmanager
    async def _held(
        self, session_id: str, *, wait: bool, patience: float | None
    ) -> AsyncIterator[None]:
        hold_id = await self._hub.hold(session_id, wait=wait, patience=patience)
        try:
            yield
        finally:
            self._hub.release(hold_id)

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session on any worker."""
        return cast(bool, await self._hub.call("locks", "is_held", session_id))

    async def aclose(self) -> None:
        """Nothing to close here: the hub gives back what this worker held when it goes."""
