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

Bounds: a finished run's log is kept for ``RUN_RETENTION_SECONDS`` (600 s); a run keeps
at most ``MAX_EVENTS`` (20,000) events and ``MAX_BYTES`` (8 MiB) of encoded frames: past
either, the oldest events are dropped, and a rejoin that needs a dropped event gets 404
(the client then reloads the history, which the checkpoint holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from oracle_server._http.sse import HEARTBEAT, HEARTBEAT_SECONDS, frame, timestamp

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

logger = logging.getLogger("oracle.server.runs")

RunStatus = Literal[
    "queued", "running", "recovering", "finished", "interrupted", "aborted", "failed"
]
ACTIVE: frozenset[str] = frozenset({"queued", "running", "recovering"})
RUN_RETENTION_SECONDS = 600.0
MAX_EVENTS = 20_000
MAX_BYTES = 8 * 1024 * 1024
REPLICA_TIMEOUT_SECONDS = 15.0
XREAD_BLOCK_SECONDS = 3.0


class RunGone(LookupError):
    """The run is unknown, expired, or no longer holds the events asked for."""


@dataclass(frozen=True)
class RunEvent:
    """One numbered event of a run.

    A log may keep only the encoded frame (``encoded``), with ``data`` left empty: the
    in-memory log does, which holds a run in about the size of its SSE text.
    """

    seq: int
    event: str
    data: dict[str, Any]
    encoded: bytes | None = None

    def to_sse(self) -> bytes:
        """The SSE frame, with its number as ``id``."""
        if self.encoded is not None:
            return self.encoded
        return frame(self.event, self.data, event_id=self.seq)


@dataclass(frozen=True)
class RunInfo:
    """What is known of a run besides its events."""

    run_id: str
    session_id: str
    user_did: str
    request_id: str
    status: RunStatus = "queued"
    replica: str = ""
    created_at: float = field(default_factory=time.time)

    def to_wire(self) -> dict[str, str]:
        """``{runId, status}`` for ``GET /sessions/{id}/run``."""
        return {"runId": self.run_id, "status": self.status}


class RunLog(Protocol):
    """Where runs and their events are kept."""

    replica: str

    async def create(self, info: RunInfo) -> None:
        """Register a run (it becomes the session's active run)."""
        ...

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        """Add events (numbered by the writer, in order)."""
        ...

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        """Record the run's status; a final one starts the retention clock."""
        ...

    async def info(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` when unknown or expired."""
        ...

    async def active_run(self, session_id: str) -> RunInfo | None:
        """The session's queued, running or recovering run, if any."""
        ...

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        """Events after ``after``, waiting up to ``wait`` seconds when there are none.

        Raises:
            RunGone: unknown run, or events after ``after`` were dropped.
        """
        ...

    async def aclose(self) -> None:
        """Stop background work and close connections."""
        ...


def partial_text(events: list[RunEvent]) -> str:
    """The reply text streamed by ``message`` events."""
    return "".join(str(e.data.get("content", "")) for e in events if e.event == "message")


def interrupted_events(first_seq: int, text: str) -> list[RunEvent]:
    """What ends a run whose replica died: an error, then ``done`` interrupted."""
    done: dict[str, Any] = {"status": "interrupted", "interrupted": True, "timestamp": timestamp()}
    if text:
        done["partialText"] = text
    return [
        RunEvent(
            first_seq,
            "error",
            {
                "error": "The server running this turn stopped",
                "retryable": True,
                "timestamp": timestamp(),
            },
        ),
        RunEvent(first_seq + 1, "done", done),
    ]


# --- in memory --------------------------------------------------------------------------


@dataclass
class _MemoryRun:
    info: RunInfo
    events: deque[RunEvent] = field(default_factory=deque)
    size: int = 0
    dropped_upto: int = 0
    ended_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MemoryRunLog:
    """Runs of this process."""

    def __init__(self, *, clock: Any = time.monotonic) -> None:
        self.replica = secrets.token_hex(6)
        self._runs: dict[str, _MemoryRun] = {}
        self._active: dict[str, str] = {}
        self._clock = clock

    def _expire(self) -> None:
        now = self._clock()
        for run_id in [
            r for r, run in self._runs.items()
            if run.ended_at is not None and now - run.ended_at > RUN_RETENTION_SECONDS
        ]:  # fmt: skip
            del self._runs[run_id]

    async def create(self, info: RunInfo) -> None:
        self._expire()
        self._runs[info.run_id] = _MemoryRun(replace(info, replica=self.replica))
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


# --- Redis ------------------------------------------------------------------------------


class RedisRunLog:
    """Runs in Redis: a stream of events and a hash per run, shared by every replica.

    Keys (prefix ``oracle:runs:``): ``<run>:events`` (stream, entry id ``<seq>-0``,
    field ``e`` = JSON ``[event, data]``), ``<run>:info`` (hash), ``session:<id>`` (the
    session's active run), ``replica:<id>`` (heartbeat, expiring).
    """

    PREFIX = "oracle:runs:"

    def __init__(self, redis: Redis, *, replica_timeout: float = REPLICA_TIMEOUT_SECONDS) -> None:
        self.replica = secrets.token_hex(6)
        self._redis = redis
        self._timeout_ms = int(replica_timeout * 1000)
        self._interval = replica_timeout / 5
        self._beat: asyncio.Task[None] | None = None

    def _key(self, *parts: str) -> str:
        return self.PREFIX + ":".join(parts)

    def start(self) -> None:
        """Start this replica's heartbeat (the turn runner does when the first run starts)."""
        if self._beat is None:
            self._beat = asyncio.get_running_loop().create_task(self._heartbeat())

    async def _heartbeat(self) -> None:
        key = self._key("replica", self.replica)
        while True:
            try:
                await self._redis.set(key, "1", px=self._timeout_ms)
            except RedisError as exc:
                logger.warning("runs.heartbeat_failed: %s", type(exc).__name__)
            await asyncio.sleep(self._interval)

    async def create(self, info: RunInfo) -> None:
        self.start()
        mapping = {
            "run_id": info.run_id,
            "session_id": info.session_id,
            "user_did": info.user_did,
            "request_id": info.request_id,
            "status": info.status,
            "replica": self.replica,
            "created_at": str(info.created_at),
        }
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(info.run_id, "info"), mapping=cast(Any, mapping))
            pipe.set(self._key("session", info.session_id), info.run_id)
            await pipe.execute()
        await self._redis.set(
            self._key("replica", self.replica), "1", px=int(REPLICA_TIMEOUT_SECONDS * 1000)
        )

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        key = self._key(run_id, "events")
        async with self._redis.pipeline(transaction=False) as pipe:
            for event in events:
                pipe.xadd(
                    key,
                    {"e": json.dumps([event.event, event.data], default=str)},
                    id=f"{event.seq}-0",
                    maxlen=MAX_EVENTS,
                    approximate=False,
                )
            await pipe.execute()

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        info_key = self._key(run_id, "info")
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(info_key, "status", status)
            if status not in ACTIVE:
                ttl = int(RUN_RETENTION_SECONDS)
                pipe.expire(info_key, ttl)
                pipe.expire(self._key(run_id, "events"), ttl)
            await pipe.execute()
        if status not in ACTIVE:
            info = await self.info(run_id)
            if info is not None:
                # Only clear the pointer if it still names this run.
                key = self._key("session", info.session_id)
                if await self._redis.get(key) in (run_id, run_id.encode()):
                    await self._redis.delete(key)

    async def info(self, run_id: str) -> RunInfo | None:
        raw = await self._redis.hgetall(self._key(run_id, "info"))
        if not raw:
            return None
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return RunInfo(
            run_id=fields["run_id"],
            session_id=fields["session_id"],
            user_did=fields["user_did"],
            request_id=fields["request_id"],
            status=fields["status"],  # type: ignore[arg-type]
            replica=fields["replica"],
            created_at=float(fields["created_at"]),
        )

    async def active_run(self, session_id: str) -> RunInfo | None:
        run_id = await self._redis.get(self._key("session", session_id))
        if run_id is None:
            return None
        info = await self.info(_text(run_id))
        if info is None or info.status not in ACTIVE:
            return None
        if not await self._replica_alive(info.replica):
            return replace(info, status="recovering")
        return info

    async def _replica_alive(self, replica: str) -> bool:
        return bool(await self._redis.exists(self._key("replica", replica)))

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        key = self._key(run_id, "events")
        events = await self._range(key, after)
        info = await self.info(run_id)
        if info is None:
            raise RunGone(run_id)
        if events or info.status not in ACTIVE:
            return events
        if not await self._replica_alive(info.replica):
            return await self._recover(info, after)
        # Blocking reads stay under the client's socket timeout (5 s by default).
        deadline = time.monotonic() + wait
        while True:
            block = min(deadline - time.monotonic(), XREAD_BLOCK_SECONDS)
            if block <= 0:
                return []
            reply: Any = await self._redis.xread(
                {key: f"{after}-0"}, block=max(int(block * 1000), 1), count=500
            )
            if reply:
                return [_event(i, fields) for _key, entries in reply for i, fields in entries]

    async def _range(self, key: str, after: int) -> list[RunEvent]:
        first: Any = await self._redis.xrange(key, count=1)
        if first and after < int(_text(first[0][0]).split("-")[0]) - 1:
            raise RunGone(key)
        entries: Any = await self._redis.xrange(key, min=f"({after}-0")
        return [_event(entry_id, fields) for entry_id, fields in entries]

    async def _recover(self, info: RunInfo, after: int) -> list[RunEvent]:
        """End a run whose replica died (once, whoever notices first)."""
        lock = self._key(info.run_id, "recovering")
        if await self._redis.set(lock, self.replica, nx=True, px=30_000):
            key = self._key(info.run_id, "events")
            everything = await self._range(key, 0)
            last = everything[-1].seq if everything else 0
            if not everything or everything[-1].event != "done":
                await self.append(
                    info.run_id, interrupted_events(last + 1, partial_text(everything))
                )
                await self.set_status(info.run_id, "interrupted")
                logger.warning("runs.interrupted: a run's replica stopped; the run was ended")
        return await self._range(self._key(info.run_id, "events"), after)

    async def aclose(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
        with contextlib.suppress(RedisError):
            await self._redis.delete(self._key("replica", self.replica))
        await self._redis.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _event(entry_id: Any, fields: Mapping[Any, Any]) -> RunEvent:
    name, data = json.loads(_text(fields.get(b"e", fields.get("e"))))
    return RunEvent(int(_text(entry_id).split("-")[0]), str(name), dict(data))


def create_run_log(
    redis_url: str | None, *, replica_timeout: float = REPLICA_TIMEOUT_SECONDS
) -> MemoryRunLog | RedisRunLog:
    """The run log: Redis streams with ``REDIS_URL``, else in memory.

    Args:
        redis_url: ``REDIS_URL``.
        replica_timeout: Seconds without a replica's heartbeat before its runs are ended
            as ``interrupted`` (``RUN_REPLICA_TIMEOUT_SECONDS``).
    """
    if redis_url:
        return RedisRunLog(Redis.from_url(redis_url), replica_timeout=replica_timeout)
    return MemoryRunLog()


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
