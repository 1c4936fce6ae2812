"""Reading a run as a response streams it: from an event on, live until ``done``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from oracle_server._http.sse import HEARTBEAT, HEARTBEAT_SECONDS, frame
from oracle_server._timestamps import timestamp
from oracle_server._turns.runlog.base import ACTIVE, RunGone, RunLog, RunStatus

__all__ = ["closing_frame", "follow"]

logger = logging.getLogger("oracle.server.runs")

# A read that fails (a Redis timeout while the event loop was busy, a dropped
# connection) is tried again; only after this many failures in a row does the response
# end, and the client rejoins.
READ_ATTEMPTS = 3


def closing_frame(status: RunStatus) -> bytes:
    """``done`` with the run's stored status, for a reader of an ended run that has no
    event left to read (its ``done`` already read, or never written)."""
    data: dict[str, Any] = {"status": status, "timestamp": timestamp()}
    if status != "finished":
        data[status] = True
    return frame("done", data)


async def follow(log: RunLog, run_id: str, after: int) -> AsyncIterator[bytes]:
    """SSE frames of a run after event ``after``, live until ``done``; heartbeats between.

    Each chunk holds whole frames: every event one read of the log returned, joined. They
    were all in the log when read, so joining them delays none, and the response makes one
    socket write where it would make one per frame (both SDK parsers take any grouping of
    whole frames per network read).

    The stream always ends with ``done`` while the run is known: when the run has ended
    and nothing is left after ``after``, one :func:`closing_frame` is sent.

    Check the run first (``await log.read(run_id, after, wait=0)`` raises
    :class:`RunGone`): once a response has started, a vanished run just ends the stream.
    """
    last = after
    failures = 0
    while True:
        try:
            events = await log.read(run_id, last, wait=HEARTBEAT_SECONDS)
        except RunGone:
            return
        except Exception as exc:
            failures += 1
            logger.warning("runs.read_failed: attempt %d: %s", failures, type(exc).__name__)
            if failures >= READ_ATTEMPTS:
                return
            await asyncio.sleep(0.1 * failures)
            continue
        failures = 0
        if not events:
            info = await log.info(run_id)
            if info is None:
                return
            if info.status not in ACTIVE:
                yield closing_frame(info.status)
                return
            yield HEARTBEAT
            continue
        frames: list[bytes] = []
        for event in events:
            frames.append(event.to_sse())
            last = event.seq
            if event.event == "done":
                yield b"".join(frames)
                return
        yield b"".join(frames)
