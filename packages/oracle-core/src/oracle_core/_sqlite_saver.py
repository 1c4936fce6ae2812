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
saver and digest (``MESSAGE_CACHE_SIZE`` messages, ``MESSAGE_CACHE_BYTES`` of stored
form): a thread's next load decodes only the messages it has not seen, and fetches
nothing when it has seen them all. The cache holds messages decoded from what was stored,
never a run's own objects; each load gets its own shallow copies (``copy_message``): new
message objects whose field values (content, tool calls, metadata dicts) are shared with
the cache, which LangChain and LangGraph treat as values.

Everything else is LangGraph's: tables, queries, the delta walk. Writes are
``AsyncSqliteSaver``'s rows committed in one trip to the connection's thread; the latest
checkpoint and the delta history are read by LangGraph's synchronous ``SqliteSaver`` on
that thread, also in one trip, where the async saver makes one per cursor step. Databases it
wrote need it to read their snapshots back (LangGraph's own saver would hand the digest
list to the channel); it reads databases LangGraph's saver wrote.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from importlib.metadata import version
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from oracle_core._langgraph_compat import DeltaSnapshot
from oracle_core._serde import copy_message

__all__ = ["MESSAGE_CACHE_BYTES", "MESSAGE_CACHE_SIZE", "MessageStoreSqliteSaver"]

MESSAGE_CACHE_SIZE = 20_000
"""Decoded snapshot messages kept across loads, for every saver of the process."""

MESSAGE_CACHE_BYTES = 64 * 1024 * 1024
"""The most stored bytes (serialized form) those messages may come to."""

_ALIST_BATCH = 50

_Statement = tuple[str, Sequence[Sequence[Any]]]


class _DecodedMessages:
    """Least-recently-used decoded messages, by ``(saver token, digest)``."""

    def __init__(self, size: int, max_bytes: int) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[tuple[object, str], tuple[Any, int]] = OrderedDict()

    def get(self, key: tuple[object, str]) -> Any:
        held = self._held.get(key)
        if held is None:
            return None
        self._held.move_to_end(key)
        return held[0]

    def put(self, key: tuple[object, str], message: Any, stored_bytes: int) -> None:
        previous = self._held.pop(key, None)
        if previous is not None:
            self.bytes -= previous[1]
        self._held[key] = (message, stored_bytes)
        self.bytes += stored_bytes
        while self._held and (len(self._held) > self.size or self.bytes > self.max_bytes):
            _, (_, size) = self._held.popitem(last=False)
            self.bytes -= size

    def drop(self, owner: object) -> None:
        for key in [k for k in self._held if k[0] is owner]:
            self.bytes -= self._held.pop(key)[1]

    def __len__(self) -> int:
        return len(self._held)


_decoded = _DecodedMessages(MESSAGE_CACHE_SIZE, MESSAGE_CACHE_BYTES)

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
_PUT_CHECKPOINT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
    " parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT = (
    f"INSERT OR IGNORE INTO {_TABLE} (thread_id, checkpoint_ns, digest, type, value)"
    " VALUES (?, ?, ?, ?, ?)"
)
_PUT_WRITES = (
    "INSERT OR {} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,"
    " idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT = (
    f"SELECT digest, type, value FROM {_TABLE} WHERE thread_id = ? AND checkpoint_ns = ?"
    " AND digest IN (SELECT value FROM json_each(?))"
)


def _thread_of(config: RunnableConfig) -> tuple[str, str]:
    """The thread id and checkpoint namespace ``config`` addresses."""
    configurable = config["configurable"]
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")


def _write_and_commit(db: sqlite3.Connection, statements: Sequence[_Statement]) -> None:
    """Run ``statements`` and commit, on the connection's own thread; roll back on error."""
    try:
        for sql, rows in statements:
            db.executemany(sql, rows)
        db.commit()
    except BaseException:
        db.rollback()
        raise


def _fetch_all(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Every row of ``sql``, on the connection's own thread."""
    cursor = db.execute(sql, params)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


def _is_refs(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REFS), list)


class MessageStoreSqliteSaver(AsyncSqliteSaver):
    """``AsyncSqliteSaver`` that stores the messages of delta snapshots once per thread."""

    _messages_ready = False
    _sync_twin: SqliteSaver | None = None

    def __init__(self, conn: Any, *, serde: Any = None) -> None:
        super().__init__(conn, serde=serde)
        # Names this saver's entries in the decoded-message cache; the clones
        # ``with_allowlist`` makes (a shallow copy) share it.
        self._cache_owner = object()

    @staticmethod
    def schema_key() -> str:
        """What this saver's tables depend on: LangGraph's saver version and this one's DDL.

        A caller that remembers in the file which schema it set up (oracle-server keeps a
        marker made from this in ``PRAGMA user_version``) can skip :meth:`setup` while the
        key is unchanged; an upgrade of either changes it, and the file is set up again.
        """
        return f"langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}\n{_SETUP}"

    def assume_set_up(self) -> None:
        """Skip :meth:`setup`: the caller knows this file's tables are current."""
        self.is_setup = True
        self._messages_ready = True

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
            if isinstance(value, DeltaSnapshot)
            and isinstance(value.value, list)
            and value.value
            and all(isinstance(m, BaseMessage) for m in value.value)
        }
        await self.setup()
        thread_id, ns = _thread_of(config)
        replaced = dict(values)
        rows: dict[str, tuple[str, str, str, str, bytes]] = {}
        for name, messages in snapshots.items():
            digests = []
            for message in messages:
                type_, blob = self.serde.dumps_typed(message)
                digest = hashlib.blake2b(type_.encode() + b"\0" + blob, digest_size=16).hexdigest()
                digests.append(digest)
                rows[digest] = (thread_id, ns, digest, type_, blob)
            replaced[name] = DeltaSnapshot({_REFS: digests})
        type_, stored = self.serde.dumps_typed(
            {**checkpoint, "channel_values": replaced} if snapshots else checkpoint
        )
        stored_metadata = json.dumps(
            get_checkpoint_metadata(config, metadata), ensure_ascii=False
        ).encode("utf-8", "ignore")
        checkpoint_row = (
            thread_id,
            ns,
            checkpoint["id"],
            config["configurable"].get("checkpoint_id"),
            type_,
            stored,
            stored_metadata,
        )
        # AsyncSqliteSaver.aput's row, with the snapshot's messages, in one transaction.
        statements: list[_Statement] = [(_PUT_CHECKPOINT, [checkpoint_row])]
        if rows:
            statements.insert(0, (_INSERT, list(rows.values())))
        await self._commit(statements)
        owner = self._cache_owner
        for digest, (*_, message_type, blob) in rows.items():
            if _decoded.get((owner, digest)) is None:
                # Decoded from the stored form: the cache never holds the run's objects.
                decoded = self.serde.loads_typed((message_type, blob))
                _decoded.put((owner, digest), decoded, len(blob))
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        # AsyncSqliteSaver.aput_writes's rows and conflict rule, committed in one hop.
        await self.setup()
        configurable = config["configurable"]
        head = (
            str(configurable["thread_id"]),
            str(configurable["checkpoint_ns"]),
            str(configurable["checkpoint_id"]),
            task_id,
            task_path,
        )
        rows = [
            (*head, WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        await self._commit([(_PUT_WRITES.format("REPLACE" if replace else "IGNORE"), rows)])

    async def _commit(self, statements: Sequence[_Statement]) -> None:
        """Write ``statements`` and commit in one trip to the connection's thread.

        LangGraph's saver awaits the execute, the commit and the cursor's close one by
        one, each a round trip through aiosqlite's queue and a wake-up of the event
        loop: a turn paid 31 of them for its checkpoints and writes. aiosqlite has no
        public call that runs a function on its thread, so this uses ``_execute``
        (aiosqlite 0.22); a cancelled caller no longer leaves a transaction open.
        """
        async with self.lock:
            await self.conn._execute(  # type: ignore[no-untyped-call]
                _write_and_commit, self.conn._conn, statements
            )

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints, writes and messages in one transaction.

        One trip, like the writes: no other caller of the connection (the session store
        of embedded mode shares it) can commit or roll back half of it.
        """
        _decoded.drop(self._cache_owner)
        await self.setup()
        key = [(str(thread_id),)]
        await self._commit(
            [
                ("DELETE FROM checkpoints WHERE thread_id = ?", key),
                ("DELETE FROM writes WHERE thread_id = ?", key),
                (f"DELETE FROM {_TABLE} WHERE thread_id = ?", key),
            ]
        )

    # -- reads --------------------------------------------------------------------------

    async def _messages(self, thread_id: str, ns: str, digests: list[str]) -> list[Any]:
        owner = self._cache_owner
        known = {d: m for d in set(digests) if (m := _decoded.get((owner, d))) is not None}
        wanted = sorted(set(digests) - known.keys())
        if wanted:
            rows = await self._on_thread(
                _fetch_all,
                db=self.conn._conn,
                sql=_SELECT,
                params=(thread_id, ns, json.dumps(wanted)),
            )
            for digest, type_, value in rows:
                known[digest] = message = self.serde.loads_typed((type_, value))
                _decoded.put((owner, digest), message, len(value))
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
            if isinstance(value, DeltaSnapshot) and _is_refs(value.value)
        }
        if not refs:
            return saved
        thread_id, ns = _thread_of(saved.config)
        resolved = dict(values)
        for name, digests in refs.items():
            resolved[name] = DeltaSnapshot(await self._messages(thread_id, ns, digests))
        return saved._replace(checkpoint={**saved.checkpoint, "channel_values": resolved})

    def _twin(self) -> SqliteSaver:
        """LangGraph's synchronous saver over this connection's ``sqlite3`` handle.

        Its reads are the async saver's, statement for statement; run on the connection's
        own thread (``_on_thread``), each is one trip instead of one per cursor step.
        """
        twin = self._sync_twin
        if twin is None or twin.serde is not self.serde:
            twin = SqliteSaver(self.conn._conn, serde=self.serde)
            twin.is_setup = True  # `setup` ran (or was assumed) on this saver
            twin.serde = self.serde
            self._sync_twin = twin
        twin._has_task_path = self._has_task_path
        return twin

    async def _on_thread(self, read: Callable[..., Any], **kwargs: Any) -> Any:
        """Run ``read`` (a method of ``_twin()``) on the connection's thread, in one trip.

        LangGraph's async reads await the cursor, the execute, each batch of rows and the
        close one by one: loading a thread's latest checkpoint and its message history
        took nine trips, each a hop through the connection's queue and a wake-up of the
        event loop. The lock orders it with every other use of the saver, as theirs does.
        """
        await self.setup()
        async with self.lock:
            return await self.conn._execute(functools.partial(read, **kwargs))  # type: ignore[no-untyped-call]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        saved = await self._on_thread(self._twin().get_tuple, config=config)
        return await self._resolved(saved)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        # LangGraph's generator holds the connection's lock while it yields: read a batch
        # of rows, then the messages of their snapshots, then the next batch.
        left = limit
        while left is None or left > 0:
            size = _ALIST_BATCH if left is None else min(_ALIST_BATCH, left)
            batch = [
                saved
                async for saved in super().alist(config, filter=filter, before=before, limit=size)
            ]
            for saved in batch:
                resolved = await self._resolved(saved)
                assert resolved is not None
                yield resolved
            if len(batch) < size:
                return
            before = batch[-1].config
            if left is not None:
                left -= len(batch)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        history: Mapping[str, DeltaChannelHistory] = await self._on_thread(
            self._twin().get_delta_channel_history, config=config, channels=list(channels)
        )
        seeds = {
            name: entry["seed"].value[_REFS]
            for name, entry in history.items()
            if isinstance(entry.get("seed"), DeltaSnapshot) and _is_refs(entry["seed"].value)
        }
        if not seeds:
            return history
        thread_id, ns = _thread_of(config)
        resolved = dict(history)
        for name, digests in seeds.items():
            entry: DeltaChannelHistory = {
                "writes": history[name]["writes"],
                "seed": DeltaSnapshot(await self._messages(thread_id, ns, digests)),
            }
            resolved[name] = entry
        return resolved
