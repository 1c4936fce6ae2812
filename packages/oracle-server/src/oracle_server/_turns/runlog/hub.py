"""Runs kept by the workers' hub: one machine's workers share the in-memory run log.

The hub holds a :class:`~oracle_server._turns.runlog.memory.MemoryRunLog`; every call here
is that log's, one round trip away. A rejoin reaches the run whichever worker runs it,
and the runs of a worker that died are ended as ``interrupted`` by the hub.
"""

from __future__ import annotations

from typing import cast

from oracle_server._turns.runlog.base import RunEvent, RunInfo, RunStatus
from oracle_server._workers.connection import HubConnection

__all__ = ["HubRunLog"]


class HubRunLog:
    """The run log of one machine's workers, held by their hub.

    Attributes:
        replica: This worker's name.
    """

    def __init__(self, hub: HubConnection) -> None:
        self.replica = hub.worker
        self._hub = hub

    async def create(self, info: RunInfo) -> None:
        """Register a run (it becomes the session's active run)."""
        await self._hub.call("runs", "create", info)

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        """Add events (numbered by the writer, in order)."""
        await self._hub.call("runs", "append", run_id, events)

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        """Record the run's status; a final one starts the retention clock."""
        await self._hub.call("runs", "set_status", run_id, status)

    async def info(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` when unknown or expired."""
        return cast(RunInfo | None, await self._hub.call("runs", "info", run_id))

    async def owner(self, run_id: str) -> str | None:
        """The DID of the user whose run this was, while the log remembers it ran."""
        return cast(str | None, await self._hub.call("runs", "owner", run_id))

    async def active_run(self, session_id: str) -> RunInfo | None:
        """The session's queued, running or recovering run, if any."""
        return cast(RunInfo | None, await self._hub.call("runs", "active_run", session_id))

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        """Events after ``after``, waiting up to ``wait`` seconds when there are none.

        Raises:
            RunGone: unknown run, or events after ``after`` were dropped.
        """
        return cast(list[RunEvent], await self._hub.call("runs", "read", run_id, after, wait=wait))

    async def aclose(self) -> None:
        """Nothing to close here: the hub keeps the runs."""
