"""Runs in Redis streams, shared by every replica, ended by whoever notices their replica died."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from importlib.resources import files
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from oracle_server._replicas.cancellation import honour_cancellation
from oracle_server._turns.runlog.base import (
    ACTIVE,
    MAX_EVENTS,
    REPLICA_TIMEOUT_SECONDS,
    RUN_RETENTION_SECONDS,
    RUN_TOMBSTONE_SECONDS,
    RunEvent,
    RunGone,
    RunInfo,
    RunStatus,
    interrupted_events,
    partial_text,
)

__all__ = ["RedisRunLog", "interrupted_events", "partial_text"]

logger = logging.getLogger("oracle.server.runs")

XREAD_BLOCK_SECONDS = 3.0
# Deletes the session's active-run pointer only if it still names the run (one round trip,
# no race with a newer run setting it in between).
_CLEAR_ACTIVE_LUA = files(__package__).joinpath("clear_active.lua").read_text(encoding="utf-8")


class RedisRunLog:
    """Runs in Redis: a stream of events and a hash per run, shared by every replica.

    Keys (prefix ``oracle:runs:``): ``<run>:events`` (stream, entry id ``<seq>-0``,
    field ``e`` = JSON ``[event, data]``), ``<run>:info`` (hash), ``<run>:owner`` (the
    user's DID, kept a day: see :meth:`owner`), ``session:<id>`` (the session's active
    run), ``replica:<id>`` (heartbeat, expiring).

    Args:
        redis: The client; the log closes it in :meth:`aclose`.
        prefix: Prepended to every key so several deployments can share one Redis.
        replica_timeout: Seconds without this replica's heartbeat before another replica
            ends its runs as ``interrupted``.
    """

    PREFIX = "oracle:runs:"

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = PREFIX,
        replica_timeout: float = REPLICA_TIMEOUT_SECONDS,
    ) -> None:
        self.replica = secrets.token_hex(6)
        self._redis = redis
        self._prefix = prefix
        self._clear_active = redis.register_script(_CLEAR_ACTIVE_LUA)
        self._timeout_ms = int(replica_timeout * 1000)
        self._interval = replica_timeout / 5
        self._beat: asyncio.Task[None] | None = None

    def _key(self, *parts: str) -> str:
        return self._prefix + ":".join(parts)

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
            pipe.set(self._key(info.run_id, "owner"), info.user_did, ex=int(RUN_TOMBSTONE_SECONDS))
            await pipe.execute()
        await self._redis.set(self._key("replica", self.replica), "1", px=self._timeout_ms)

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
                # Only if the pointer still names this run: a newer run may have taken it.
                pointer = self._key("session", info.session_id)
                await self._clear_active(keys=[pointer], args=[run_id])

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

    async def owner(self, run_id: str) -> str | None:
        value = await self._redis.get(self._key(run_id, "owner"))
        return None if value is None else _text(value)

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
            # A follower whose client left is cancelled; it must not block on for seconds.
            reply: Any = await honour_cancellation(
                self._redis.xread({key: f"{after}-0"}, block=max(int(block * 1000), 1), count=500)
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
