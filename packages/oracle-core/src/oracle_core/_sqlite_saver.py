"""``MessageStoreSqliteSaver``: LangGraph's SQLite saver, message snapshots by reference.

A thread's ``messages`` are a ``DeltaChannel`` (see ``oracle_core._state``): each step
stores only its new messages, and every ``MESSAGES_SNAPSHOT_FREQUENCY`` updates one
checkpoint holds the whole list, so that a load replays a bounded number of steps. That
copy grows with the thread: at 500 messages it was 264 KB every 25 turns, more than
three times what the turns in between stored. This saver stores each message of a
snapshot once per thread, keyed by a digest of its serialized form, in
``oracle_message_blobs``; the checkpoint keeps the digests in order. A snapshot then
adds the bytes of the messages no earlier snapshot of the thread stored, and 33 bytes a
message for the list.

Messages it has read or written stay decoded in a bounded, process-wide cache keyed by
saver and digest (``MESSAGE_CACHE_SIZE`` messages): a thread's next load decodes only the
messages it has not seen, and fetches nothing when it has seen them all. Each load gets
its own shallow copies (``copy_message``), as a decode would give it new objects.

Everything else is ``AsyncSqliteSaver``'s: tables, queries, the delta walk. Databases it
wrote need it to read their snapshots back (LangGraph's own saver would hand the digest
list to the channel); it reads databases LangGraph's saver wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from oracle_core._serde import copy_message

__all__ = ["MESSAGE_CACHE_SIZE", "MessageStoreSqliteSaver"]

MESSAGE_CACHE_SIZE = 20_000
"""Decoded snapshot messages kept across loads, for every saver of the process."""


class _DecodedMessages:
    """Least-recently-used decoded messages, by ``(saver id, digest)``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: OrderedDict[tuple[int, str], Any] = OrderedDict()

    def get(self, key: tuple[int, str]) -> Any:
        message = self._held.get(key)
        if message is not None:
            self._held.move_to_end(key)
        return message

    def put(self, key: tuple[int, str], message: Any) -> None:
        self._held[key] = message
        self._held.move_to_end(key)
        while len(self._held) > self.size:
            self._held.popitem(last=False)

    def drop(self, owner: int) -> None:
        for key in [k for k in self._held if k[0] == owner]:
            del self._held[key]

    def __len__(self) -> int:
        return len(self._held)


_decoded = _DecodedMessages(MESSAGE_CACHE_SIZE)

_TABLE = "oracle_message_blobs"
_REFS = "oracle_message_refs"
"""The key of the stand-in a snapshot holds: ``{_REFS: [digest, ...]}``."""

_SETUP = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    digest TEXT NOT NULL,
    type TEXT,
    value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, digest)
)
"""
_INSERT = (
    f"INSERT OR IGNORE INTO {_TABLE} (thread_id, checkpoint_ns, digest, type, value)"
    " VALUES (?, ?, ?, ?, ?)"
)
_SELECT = (
    f"SELECT digest, type, value FROM {_TABLE} WHERE thread_id = ? AND checkpoint_ns = ?"
    " AND digest IN (SELECT value FROM json_each(?))"
)


def _is_refs(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REFS), list)


class MessageStoreSqliteSaver(AsyncSqliteSaver):
    """``AsyncSqliteSaver`` that stores the messages of delta snapshots once per thread."""

    _messages_ready = False

    async def setup(self) -> None:
        await super().setup()
        if self._messages_ready:
            return
        async with self.lock:
            if not self._messages_ready:
                await self.conn.execute(_SETUP)
                await self.conn.commit()
                self._messages_ready = True

    # -- writes -----------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        snapshots = {
            name: value.value
            for name, value in values.items()
            if isinstance(value, _DeltaSnapshot)
            and isinstance(value.value, list)
            and value.value
            and all(isinstance(m, BaseMessage) for m in value.value)
        }
        if snapshots:
            await self.setup()
            configurable = config["configurable"]
            thread_id = str(configurable["thread_id"])
            ns = configurable.get("checkpoint_ns", "")
            replaced = dict(values)
            rows: dict[str, tuple[str, str, str, str, bytes]] = {}
            for name, messages in snapshots.items():
                digests = []
                for message in messages:
                    type_, blob = self.serde.dumps_typed(message)
                    digest = hashlib.blake2b(
                        type_.encode() + b"\0" + blob, digest_size=16
                    ).hexdigest()
                    digests.append(digest)
                    rows[digest] = (thread_id, ns, digest, type_, blob)
                    _decoded.put((id(self), digest), copy_message(message))
                replaced[name] = _DeltaSnapshot({_REFS: digests})
            async with self.lock:
                # Committed with the checkpoint row (one transaction on this connection).
                await self.conn.executemany(_INSERT, list(rows.values()))
            checkpoint = {**checkpoint, "channel_values": replaced}
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def adelete_thread(self, thread_id: str) -> None:
        _decoded.drop(id(self))
        await super().adelete_thread(thread_id)
        await self.setup()
        async with self.lock:
            await self.conn.execute(f"DELETE FROM {_TABLE} WHERE thread_id = ?", (str(thread_id),))
            await self.conn.commit()

    # -- reads --------------------------------------------------------------------------

    async def _messages(self, thread_id: str, ns: str, digests: list[str]) -> list[Any]:
        owner = id(self)
        known = {d: m for d in set(digests) if (m := _decoded.get((owner, d))) is not None}
        wanted = sorted(set(digests) - known.keys())
        if wanted:
            await self.setup()
            async with (
                self.lock,
                self.conn.execute(_SELECT, (thread_id, ns, json.dumps(wanted))) as cursor,
            ):
                rows = await cursor.fetchall()
            for digest, type_, value in rows:
                known[digest] = message = self.serde.loads_typed((type_, value))
                _decoded.put((owner, digest), message)
        missing = [d for d in digests if d not in known]
        if missing:
            raise LookupError(
                f"thread {thread_id!r}: {len(missing)} message(s) of a snapshot are not stored"
            )
        return [copy_message(known[d]) for d in digests]

    async def _resolved(self, saved: CheckpointTuple | None) -> CheckpointTuple | None:
        if saved is None:
            return None
        values = saved.checkpoint["channel_values"]
        refs = {
            name: value.value[_REFS]
            for name, value in values.items()
            if isinstance(value, _DeltaSnapshot) and _is_refs(value.value)
        }
        if not refs:
            return saved
        configurable = saved.config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        resolved = dict(values)
        for name, digests in refs.items():
            resolved[name] = _DeltaSnapshot(await self._messages(thread_id, ns, digests))
        return saved._replace(checkpoint={**saved.checkpoint, "channel_values": resolved})

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._resolved(await super().aget_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        # LangGraph's generator holds the connection's lock while it yields: read the
        # rows first, then the messages of their snapshots.
        listed = [
            saved
            async for saved in super().alist(config, filter=filter, before=before, limit=limit)
        ]
        for saved in listed:
            resolved = await self._resolved(saved)
            assert resolved is not None
            yield resolved

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        history = await super().aget_delta_channel_history(config=config, channels=channels)
        seeds = {
            name: entry["seed"].value[_REFS]
            for name, entry in history.items()
            if isinstance(entry.get("seed"), _DeltaSnapshot) and _is_refs(entry["seed"].value)
        }
        if not seeds:
            return history
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        resolved = dict(history)
        for name, digests in seeds.items():
            entry: DeltaChannelHistory = {
                "writes": history[name]["writes"],
                "seed": _DeltaSnapshot(await self._messages(thread_id, ns, digests)),
            }
            resolved[name] = entry
        return resolved
