"""A run's events, numbered and written to the run log in the order they were pushed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from oracle_server._timestamps import timestamp
from oracle_server._turns.runlog import ACTIVE, RunEvent, RunLog, RunStatus

__all__ = ["TurnStream"]

logger = logging.getLogger("oracle.server.turns")


class TurnStream:
    """The events of one run, numbered and written to the run log in order.

    ``push`` is synchronous (plugin events arrive from sync code); one writer task
    appends what was pushed to the log, so numbering, order and the final status stay
    consistent however fast events come. Responses read the log, not this object.
    """

    def __init__(self, log: RunLog, run_id: str) -> None:
        self.log = log
        self.run_id = run_id
        self.closed = False
        self._seq = 0
        self._text: list[str] = []
        self._queue: asyncio.Queue[RunEvent | RunStatus] = asyncio.Queue()
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def push(self, event: str, data: Any) -> None:
        """Number an event and queue it for the log (ignored once the run ended)."""
        if self.closed:
            return
        self._seq += 1
        if event == "message":
            self._text.append(str(data.get("content", "")))
        self._queue.put_nowait(RunEvent(self._seq, event, dict(data)))

    @property
    def text(self) -> str:
        """The reply text streamed so far."""
        return "".join(self._text)

    def set_status(self, status: RunStatus) -> None:
        """Record a status change once the events before it are written."""
        if not self.closed:
            self._queue.put_nowait(status)

    def finish(self, status: RunStatus) -> None:
        """Push ``done`` (with ``partialText`` unless finished) and end the run."""
        data: dict[str, Any] = {"status": status, "timestamp": timestamp()}
        if status != "finished":
            data[status] = True
            if self.text:
                data["partialText"] = self.text
        self.push("done", data)
        self.set_status(status)
        self.closed = True

    async def flushed(self) -> None:
        """Wait until every pushed event and status is in the log."""
        await asyncio.shield(self._writer)

    async def _write(self) -> None:
        while True:
            item = await self._queue.get()
            events: list[RunEvent] = []
            statuses: list[RunStatus] = []
            while True:
                if isinstance(item, RunEvent):
                    events.append(item)
                else:
                    statuses.append(item)
                if self._queue.empty():
                    break
                item = self._queue.get_nowait()
            try:
                if events:
                    await self.log.append(self.run_id, events)
                for status in statuses:
                    await self.log.set_status(self.run_id, status)
            except Exception as exc:
                logger.warning("runs.write_failed: %s", type(exc).__name__)
            if statuses and statuses[-1] not in ACTIVE:
                return
