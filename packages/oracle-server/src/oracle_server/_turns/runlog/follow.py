"""Reading a run as a response streams it: from an event on, live until ``done``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from oracle_server._http.sse import HEARTBEAT, HEARTBEAT_SECONDS
from oracle_server._turns.runlog.base import ACTIVE, RunGone, RunLog

__all__ = ["follow"]


async def follow(log: RunLog, run_id: str, after: int) -> AsyncIterator[bytes]:
    """SSE frames of a run after event ``after``, live until ``done``; heartbeats between.

    Each chunk holds whole frames: every event one read of the log returned, joined. They
    were all in the log when read, so joining them delays none, and the response makes one
    socket write where it would make one per frame (both SDK parsers take any grouping of
    whole frames per network read).

    Check the run first (``await log.read(run_id, after, wait=0)`` raises
    :class:`RunGone`): once a response has started, a vanished run just ends the stream.
    """
    last = after
    while True:
        try:
            events = await log.read(run_id, last, wait=HEARTBEAT_SECONDS)
        except RunGone:
            return
        if not events:
            info = await log.info(run_id)
            if info is None or info.status not in ACTIVE:
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
