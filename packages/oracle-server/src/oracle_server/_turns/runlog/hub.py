"""Runs kept by the workers' hub: one machine's workers share the in-memory run log.

The hub holds a :class:`~oracle_server._turns.runlog.memory.MemoryRunLog`, and every run
is there: a rejoin reaches the run whichever worker runs it, and the runs of a worker that
died are ended as ``interrupted`` by the hub. The worker running a run also keeps it in
a log of its own, and its responses read it there: the stream that started a turn
(nearly every read) costs no round trip. Its events go to the hub as casts, sent in
order and not waited for; the calls that decide something (a run's creation, its
status, the session's active run) wait for the hub.
"""

from __future__ import annotations

from typing import cast

from oracle_server._turns.runlog.base import RunEvent, RunGone, RunInfo, RunStatus
from oracle_server._turns.runlog.memory import MemoryRunLog
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
        # This worker's own runs, read here; the hub has them all.
        self._mine = MemoryRunLog()

    async def create(self, info: RunInfo) -> None:
        """Register a run (it becomes the session's active run)."""
        await self._hub.call("runs", "create", info)
        await self._mine.create(info, replica=self.replica)

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        """Add events (numbered by the writer, in order)."""
        await self._mine.append(run_id, events)
        self._hub.cast("runs", "append", run_id, events)

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        """Record the run's status; a final one starts the retention clock."""
        await self._mine.set_status(run_id, status)
        await self._hub.call("runs", "set_status", run_id, status)

    async def info(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` when unknown or expired."""
        mine = await self._mine.info(run_id)
        if mine is not None:
            return mine
        return cast(RunInfo | None, await self._hub.call("runs", "info", run_id))

    async def owner(self, run_id: str) -> str | None:
        """The DID of the user whose run this was, while the log remembers it ran."""
        mine = await self._mine.owner(run_id)
        if mine is not None:
            return mine
        return cast(str | None, await self._hub.call("runs", "owner", run_id))

    async def active_run(self, session_id: str) -> RunInfo | None:
        """The session's queued, running or recovering run, if any (on any worker)."""
        return cast(RunInfo | None, await self._hub.call("runs", "active_run", session_id))

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        """Events after ``after``, waiting up to ``wait`` seconds when there are none.

        Raises:
            RunGone: unknown run, or events after ``after`` were dropped.
        """
        if await self._mine.info(run_id) is not None:
            try:
                return await self._mine.read(run_id, after, wait=wait)
            except RunGone:
                pass  # the hub decides
        return cast(list[RunEvent], await self._hub.call("runs", "read", run_id, after, wait=wait))

    async def aclose(self) -> None:
        """Drop this worker's copies; the hub keeps the runs."""
        await self._mine.aclose()
