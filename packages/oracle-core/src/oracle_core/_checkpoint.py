"""Per-user checkpointers (one SQLite database per user by default, CORE-54) and reads."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import hashlib
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from oracle_core._approval import ApprovalRequest, approval_requests
from oracle_core._langgraph_compat import DeltaSnapshot, copy_checkpoint
from oracle_core._serde import CheckpointSerializer
from oracle_core._sqlite_connection import connect_sqlite
from oracle_core._sqlite_saver import MessageStoreSqliteSaver

__all__ = [
    "InMemoryCheckpointers",
    "PrimedCheckpointer",
    "SqliteCheckpointers",
    "read_pending_approvals",
    "read_thread_state",
    "user_database_name",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def user_database_name(user_did: str) -> str:
    """File name for a user's database: a readable prefix plus a hash of the full DID.

    The hash keeps DIDs that sanitise to the same text apart.
    """
    if not user_did:
        raise ValueError("a checkpointer needs the user's DID")
    readable = _UNSAFE.sub("_", user_did)[:80]
    digest = hashlib.sha256(user_did.encode()).hexdigest()[:12]
    return f"{readable}-{digest}.sqlite"


@functools.cache
def _state_reader() -> Any:
    """A graph over ``MainAgentState`` whose only use is ``aget_state``.

    A thread's state is not all in its last checkpoint: ``messages`` is a
    ``DeltaChannel``, rebuilt from earlier checkpoints' writes. ``aget_state`` of a graph
    with the same channels does that as the agent's own load does; the agent itself is
    built only after the state is read, so this stand-in with one idle node reads it. The
    nodes are named like the agent's: a thread paused for an approval holds pending sends
    to ``tools`` (whose interrupts the snapshot lists) and writes to ``model``'s branch,
    which LangGraph would otherwise warn about on every read.
    """
    from langgraph.graph import START, StateGraph

    from oracle_core._state import MainAgentState

    def idle(state: MainAgentState) -> None:
        return None

    graph = StateGraph(MainAgentState)
    graph.add_node("tools", idle)
    graph.add_node("model", idle)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", "model")
    return graph.compile(name="oracle-state-reader")


async def read_thread_state(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, Any]:
    """The state of a main-agent thread as its latest checkpoint records it.

    Args:
        saver: The user's checkpointer.
        thread_id: The thread (the session id).

    Returns:
        The ``MainAgentState`` keys that have a value; ``{}`` for an unknown thread.
    """
    reader = _state_reader().copy(update={"checkpointer": saver})
    snapshot = await reader.aget_state({"configurable": {"thread_id": thread_id}})
    return dict(snapshot.values)


async def read_pending_approvals(
    saver: BaseCheckpointSaver[Any], thread_id: str
) -> list[ApprovalRequest]:
    """The approval requests a main-agent thread is paused on, oldest first; ``[]`` when
    it is not paused (or unknown). The checkpoint is the record: this holds after a
    restart, and a request already answered is no longer listed."""
    reader = _state_reader().copy(update={"checkpointer": saver})
    snapshot = await reader.aget_state({"configurable": {"thread_id": thread_id}})
    return approval_requests(snapshot.interrupts)


def _latest_key(config: RunnableConfig) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of a request for a thread's latest checkpoint."""
    configurable = config.get("configurable") or {}
    if configurable.get("checkpoint_id") or "thread_id" not in configurable:
        return None
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")


Marker = tuple[Any, ...] | None
"""A thread's latest checkpoint id and what identifies its pending writes (their count
and newest row, which a replaced write moves); ``None``: the thread has no checkpoint."""

_LATEST_SQLITE = (
    "SELECT c.checkpoint_id, w.n, w.newest FROM checkpoints c,"
    " (SELECT COUNT(*) AS n, MAX(rowid) AS newest FROM writes"
    "  WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id ="
    "  (SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2)"
    " ) w"
    " WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2"
    " ORDER BY c.checkpoint_id DESC LIMIT 1"
)


def _marker_reader(saver: BaseCheckpointSaver[Any]) -> Any:
    """How to read ``saver``'s latest marker cheaply, or ``None`` when there is no way."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    if isinstance(saver, AsyncSqliteSaver):

        async def sqlite(thread_id: str, ns: str) -> Marker:
            # One trip to the connection's thread (a cursor costs three).
            async with saver.lock:
                rows = list(await saver.conn.execute_fetchall(_LATEST_SQLITE, (thread_id, ns)))
            return None if not rows else (str(rows[0][0]), int(rows[0][1]), rows[0][2])

        return sqlite
    if isinstance(saver, InMemorySaver):

        async def memory(thread_id: str, ns: str) -> Marker:
            checkpoints = saver.storage.get(thread_id, {}).get(ns)
            if not checkpoints:
                return None
            latest = max(checkpoints)
            # A replaced write is a new tuple in the dict: identities tell it apart.
            writes = saver.writes.get((thread_id, ns, latest), {})
            return latest, len(writes), tuple(map(id, writes.values()))

        return memory
    return None


@dataclasses.dataclass
class _Held:
    """What a ``PrimedCheckpointer`` (and its allowlist clones) read and may serve."""

    latest: dict[tuple[str, str], tuple[Marker, CheckpointTuple | None]] = dataclasses.field(
        default_factory=dict
    )
    histories: dict[tuple[str, str, str, tuple[str, ...]], Any] = dataclasses.field(
        default_factory=dict
    )

    def clear(self) -> None:
        self.latest.clear()
        self.histories.clear()


class PrimedCheckpointer(BaseCheckpointSaver[Any]):
    """A user's checkpointer for one turn: the agent's load reuses the build's read.

    A turn reads its thread twice: the build reads the state for hooks and the prompt
    (CORE-83), then the agent loads the same checkpoint again with the delta history of
    ``messages`` (every message since the last snapshot, decoded). On a long thread those
    two loads are most of a turn. This saver passes everything to ``inner`` and keeps what
    the first read of a thread's latest checkpoint returned, with the delta history read
    at it; the next request for each is answered from what it kept, once.

    The latest checkpoint is served only if the thread still ends there with the same
    pending writes (their count and newest row, read before the build's read): one
    indexed query (SQLite; a dictionary lookup in memory) instead of the load. A history
    is read at a given checkpoint, which never changes. Savers with no cheap way to tell
    (PostgreSQL) are passed through untouched. The build and the run each get their own
    copy of the checkpoint's dicts (both move versions on in place) and of a snapshot's
    list; the messages themselves are shared, as between a run's steps: LangGraph's
    reducers build new lists and change no message in place.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self._marker = _marker_reader(inner)
        self._held = _Held()

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    def with_allowlist(self, extra_allowlist: Any) -> BaseCheckpointSaver[Any]:
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = copy.copy(self)
        clone.inner = inner
        clone.serde = inner.serde
        return clone

    # -- reads ------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        key = _latest_key(config)
        if key is None or self._marker is None:
            return await self.inner.aget_tuple(config)
        held = self._held.latest
        marker = await self._marker(*key)
        if key in held:
            recorded, saved = held.pop(key)
            if marker == recorded:
                return _fresh_copy(saved)
        # Read after the marker: a write in between makes the next check fail, not pass.
        saved = await self.inner.aget_tuple(config)
        held[key] = (marker, saved)
        return _fresh_copy(saved)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        configurable = config.get("configurable") or {}
        if self._marker is None or not configurable.get("checkpoint_id"):
            return await self.inner.aget_delta_channel_history(config=config, channels=channels)
        key = (
            str(configurable["thread_id"]),
            configurable.get("checkpoint_ns", ""),
            str(configurable["checkpoint_id"]),
            tuple(channels),
        )
        held = self._held.histories
        if key in held:
            return _fresh_history(held.pop(key))
        history = await self.inner.aget_delta_channel_history(config=config, channels=channels)
        held[key] = history
        return _fresh_history(history)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    # -- writes -----------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._held.clear()
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._held.clear()
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self._held.clear()
        await self.inner.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._held.clear()
        await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._held.clear()
        await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._held.clear()
        await self.inner.aprune(thread_ids, strategy=strategy)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._held.clear()
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._held.clear()
        self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._held.clear()
        self.inner.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._held.clear()
        self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._held.clear()
        self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._held.clear()
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


def _fresh_copy(saved: CheckpointTuple | None) -> CheckpointTuple | None:
    """``saved`` with its own checkpoint dicts: a run moves versions on in place."""
    if saved is None:
        return None
    return CheckpointTuple(
        saved.config,
        copy_checkpoint(saved.checkpoint),
        {**saved.metadata},
        saved.parent_config,
        None if saved.pending_writes is None else list(saved.pending_writes),
    )


def _fresh_history(history: Mapping[str, DeltaChannelHistory]) -> dict[str, DeltaChannelHistory]:
    """``history`` with its own lists: a channel's value may start as its seed's list."""
    fresh: dict[str, DeltaChannelHistory] = {}
    for name, entry in history.items():
        copied: DeltaChannelHistory = {"writes": list(entry["writes"])}
        if "seed" in entry:
            seed = entry["seed"]
            if isinstance(seed, DeltaSnapshot) and isinstance(seed.value, list):
                seed = DeltaSnapshot(list(seed.value))
            copied["seed"] = seed
        fresh[name] = copied
    return fresh


class SqliteCheckpointers:
    """Caches one ``MessageStoreSqliteSaver`` per user under ``base_path`` (WAL mode).

    Use as ``checkpointer_for_user``; ``aclose`` closes every connection.
    """

    def __init__(self, base_path: str | Path) -> None:
        self.base_path = Path(base_path)
        self._savers: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def path_for(self, user_did: str) -> Path:
        """Where ``user_did``'s database lives."""
        return self.base_path / user_database_name(user_did)

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        saver: BaseCheckpointSaver[Any] | None = self._savers.get(user_did)
        if saver is not None:
            return saver
        lock = self._locks.setdefault(user_did, asyncio.Lock())
        async with lock:
            saver = self._savers.get(user_did)
            if saver is None:
                saver = await self._open(user_did)
                self._savers[user_did] = saver
        return saver

    async def _open(self, user_did: str) -> BaseCheckpointSaver[Any]:
        path = self.path_for(user_did)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await connect_sqlite(path)
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
            saver = MessageStoreSqliteSaver(conn, serde=CheckpointSerializer())
            await saver.setup()
        except BaseException:
            await conn.close()
            raise
        return saver

    async def aclose(self) -> None:
        """Close every open database."""
        savers, self._savers = self._savers, {}
        for saver in savers.values():
            await saver.conn.close()


class InMemoryCheckpointers:
    """One in-memory saver per user (tests); contents vanish with the process."""

    def __init__(self) -> None:
        self._savers: dict[str, Any] = {}

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        from langgraph.checkpoint.memory import InMemorySaver

        if not user_did:
            raise ValueError("a checkpointer needs the user's DID")
        saver = self._savers.get(user_did)
        if saver is None:
            saver = self._savers[user_did] = InMemorySaver(serde=CheckpointSerializer())
        return saver

    async def aclose(self) -> None:
        """Forget every saver."""
        self._savers.clear()
