"""Per-user checkpointers (one SQLite database per user by default, CORE-54) and reads."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "InMemoryCheckpointers",
    "SqliteCheckpointers",
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
    built only after the state is read, so this stand-in with one idle node reads it.
    """
    from langgraph.graph import START, StateGraph

    from oracle_core._state import MainAgentState

    def idle(state: MainAgentState) -> None:
        return None

    graph = StateGraph(MainAgentState)
    graph.add_node("idle", idle)
    graph.add_edge(START, "idle")
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


class SqliteCheckpointers:
    """Caches one ``AsyncSqliteSaver`` per user under ``base_path`` (WAL mode).

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
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = self.path_for(user_did)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path))
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
            saver = AsyncSqliteSaver(conn)
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
        return self._savers.setdefault(user_did, InMemorySaver())  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Forget every saver."""
        self._savers.clear()
