"""Runs: each streamed turn's events in a log a client can rejoin (issue: runs and rejoin).

Every turn is a run with an id. Its SSE frames are numbered from 1 and appended to the
run's log as they happen; a response streams from the log, so a client that lost its
connection asks ``GET /runs/{id}?after=N`` and gets every event after ``N``, once, in
order, then the live ones until ``done``.

The log lives in memory (one process) or in Redis streams (``REDIS_URL``), where any
replica can serve a rejoin. Each replica keeps a heartbeat key (renewed five times per
``RUN_REPLICA_TIMEOUT_SECONDS``, 15 s); a run whose replica's
heartbeat has lapsed is ended by the first reader that notices: ``error`` then ``done``
with ``interrupted`` and the text streamed so far. Nothing stays ``running`` for ever.

Layout: ``base.py`` (the protocol and its values), ``memory.py`` (the reference
implementation), ``redis.py``, ``follow.py`` (what a response streams); one conformance
suite runs against both backends.

Bounds: a finished run's log is kept for ``RUN_RETENTION_SECONDS`` (600 s); a run keeps
at most ``MAX_EVENTS`` (20,000) events and ``MAX_BYTES`` (8 MiB) of encoded frames: past
either, the oldest events are dropped, and a rejoin that needs a dropped event gets 404
(the client then reloads the history, which the checkpoint holds).
"""

from __future__ import annotations

from oracle_server._redis import redis_client
from oracle_server._turns.runlog.base import (
    ACTIVE,
    REPLICA_TIMEOUT_SECONDS,
    RunEvent,
    RunGone,
    RunInfo,
    RunLog,
    RunStatus,
)
from oracle_server._turns.runlog.follow import follow
from oracle_server._turns.runlog.memory import MemoryRunLog
from oracle_server._turns.runlog.redis import RedisRunLog

__all__ = [
    "ACTIVE",
    "MemoryRunLog",
    "RedisRunLog",
    "RunEvent",
    "RunGone",
    "RunInfo",
    "RunLog",
    "RunStatus",
    "create_run_log",
    "follow",
]


def create_run_log(
    redis_url: str | None,
    *,
    replica_timeout: float = REPLICA_TIMEOUT_SECONDS,
    prefix: str = RedisRunLog.PREFIX,
) -> MemoryRunLog | RedisRunLog:
    """The run log: Redis streams with ``REDIS_URL``, else in memory.

    Args:
        redis_url: ``REDIS_URL``.
        replica_timeout: Seconds without a replica's heartbeat before its runs are ended
            as ``interrupted`` (``RUN_REPLICA_TIMEOUT_SECONDS``).
        prefix: Key prefix in Redis (ignored in memory).

    Returns:
        A :class:`RedisRunLog` or a :class:`MemoryRunLog`.
    """
    if redis_url:
        return RedisRunLog(redis_client(redis_url), prefix=prefix, replica_timeout=replica_timeout)
    return MemoryRunLog()
