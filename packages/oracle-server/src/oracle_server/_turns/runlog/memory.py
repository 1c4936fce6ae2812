"""Runs of this process: the reference run log, bounded in events, bytes and retention."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from typing import Any

from oracle_server._turns.runlog.base import (
    ACTIVE,
    MAX_BYTES,
    MAX_EVENTS,
    MAX_TOMBSTONES,
    RUN_RETENTION_SECONDS,
    RUN_TOMBSTONE_SECONDS,
    RunEvent,
    RunGone,
    RunInfo,
    RunStatus,
)

__all__ = ["MemoryRunLog"]


@dataclass
class _MemoryRun:
    info: RunInfo
    events: deque[RunEvent] = field(default_factory=deque)
    size: int = 0
    dropped_upto: int = 0
    ended_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MemoryRunLog:
    """Runs of this process.

    Owners of past runs (see :meth:`owner`) are kept for a day, at most ``max_owners`` of
    them (the oldest go first): a few dozen bytes a run.
    """

    def __init__(self, *, clock: Any = time.monotonic, max_owners: int = MAX_TOMBSTONES) -> None:
        self.replica = secrets.token_hex(6)
        self._runs: dict[str, _MemoryRun] = {}
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._active: dict[str, str] = {}
        self._clock = clock
        self._max_owners = max_owners

    def _expire(self) -> None:
        now = self._clock()
        for run_id in [
            r for r, run in self._runs.items()
            if run.ended_at is not None and now - run.ended_at > RUN_RETENTION_SECONDS
        ]:  # fmt: skip
            del self._runs[run_id]
        while self._owners:
            run_id, (_, since) = next(iter(self._owners.items()))
            if len(self._owners) <= self._max_owners and now - since <= RUN_TOMBSTONE_SECONDS:
                break
            self._owners.popitem(last=False)

    async def create(self, info: RunInfo, *, replica: str | None = None) -> None:
        """Register a run as this log's replica's, or ``replica``'s when the log is
        shared by several (the workers' hub holds one for every worker)."""
        self._expire()
        self._runs[info.run_id] = _MemoryRun(replace(info, replica=replica or self.replica))
        self._owners[info.run_id] = (info.user_did, self._clock())
        self._active[info.session_id] = info.run_id

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        for event in events:
            kept = RunEvent(event.seq, event.event, {}, event.to_sse())
            run.events.append(kept)
            run.size += len(kept.encoded or b"")
        while len(run.events) > MAX_EVENTS or (run.size > MAX_BYTES and len(run.events) > 1):
            old = run.events.popleft()
            run.size -= len(old.encoded or b"")
            run.dropped_upto = old.seq
        run.changed.set()
        run.changed = asyncio.Event()

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        run.info = replace(run.info, status=status)
        if status not in ACTIVE:
            run.ended_at = self._clock()
            if self._active.get(run.info.session_id) == run_id:
                del self._active[run.info.session_id]
        run.changed.set()
        run.changed = asyncio.Event()

    async def info(self, run_id: str) -> RunInfo | None:
        self._expire()
        run = self._runs.get(run_id)
        return None if run is None else run.info

    async def owner(self, run_id: str) -> str | None:
        self._expire()
        kept = self._owners.get(run_id)
        return None if kept is None else kept[0]

    async def active_run(self, session_id: str) -> RunInfo | None:
        run_id = self._active.get(session_id)
        return None if run_id is None else await self.info(run_id)

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        run = self._runs.get(run_id)
        if run is None:
            raise RunGone(run_id)
        if after < run.dropped_upto:
            raise RunGone(run_id)
        fresh = [e for e in run.events if e.seq > after]
        if fresh or run.info.status not in ACTIVE:
            return fresh
        changed = run.changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await changed.wait()
        return [e for e in run.events if e.seq > after]

    def run_ids(self) -> list[str]:
        """Ids of the runs held (benchmarks, diagnostics)."""
        return list(self._runs)

    def event_count(self, run_id: str) -> int:
        """Events held for a run."""
        run = self._runs.get(run_id)
        return 0 if run is None else len(run.events)

    def payload_bytes(self, run_id: str) -> int:
        """Bytes of the SSE frames held for a run."""
        run = self._runs.get(run_id)
        return 0 if run is None else run.size

    async def aclose(self) -> None:
        self._runs.clear()
        self._active.clear()
        self._owners.clear()
