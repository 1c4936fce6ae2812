"""A run's events, numbered and written to the run log in the order they were pushed."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from oracle_server._http.sse import json_text
from oracle_server._timestamps import timestamp
from oracle_server._turns.runlog import ACTIVE, RunEvent, RunLog, RunStatus

__all__ = ["EVENT_UNENCODABLE", "EVENT_UNWRITABLE", "TurnStream"]

EVENT_UNENCODABLE = "turn.event_unencodable"
EVENT_UNWRITABLE = "turn.event_unwritable"

logger = logging.getLogger("oracle.server.turns")


class TurnStream:
    """The events of one run, numbered and written to the run log in order.

    ``push`` is synchronous (plugin events arrive from sync code); one writer task
    appends what was pushed to the log, so numbering, order and the final status stay
    consistent however fast events come. Responses read the log, not this object.

    Every event is delivered under its number: its data is made plain JSON when pushed
    (strings UTF-8 cannot hold are repaired, see :func:`~oracle_server._http.sse.json_text`;
    data that is no JSON at all becomes an ``error`` event), and a batch the log refuses
    is written again one event at a time, so one bad event never takes the others with
    it. ``done`` is the last event: nothing is pushed after it.
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
        try:
            plain = json.loads(json_text(data))
        except (TypeError, ValueError, RecursionError):
            logger.warning("runs.event_unencodable: a %s event was replaced", event)
            event, plain = (
                "error",
                {
                    "error": "An event of this turn could not be encoded",
                    "code": EVENT_UNENCODABLE,
                    "timestamp": timestamp(),
                },
            )
        if event == "message":
            self._text.append(str(plain.get("content", "")))
        self._queue.put_nowait(RunEvent(self._seq, event, plain))

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
            if events:
                await self._append(events)
            try:
                for status in statuses:
                    await self.log.set_status(self.run_id, status)
            except Exception as exc:
                logger.warning("runs.write_failed: status: %s", type(exc).__name__)
            if statuses and statuses[-1] not in ACTIVE:
                return

    async def _append(self, events: list[RunEvent]) -> None:
        try:
            await self.log.append(self.run_id, events)
            return
        except Exception as exc:
            if len(events) > 1:
                # One at a time, in order: what the log takes is kept whatever the rest do.
                for event in events:
                    await self._append([event])
                return
            refused = events[0]
            logger.warning("runs.write_failed: %s event: %s", refused.event, type(exc).__name__)
        if refused.event == "error" and refused.data.get("code") == EVENT_UNWRITABLE:
            return
        # Its number still gets a frame, so a reader sees no gap (and ``done`` stays last).
        stand_in = RunEvent(
            refused.seq,
            "error",
            {
                "error": "An event of this turn could not be stored",
                "code": EVENT_UNWRITABLE,
                "timestamp": timestamp(),
            },
        )
        await self._append([stand_in])
