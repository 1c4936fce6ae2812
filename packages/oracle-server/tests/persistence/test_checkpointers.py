"""LangGraph checkpointers of both storage modes (SRV-55/57, SRV-20 thread deletion)."""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

from oracle_server._persistence import (
    CheckpointerFactory,
    UserDatabases,
    open_checkpointers,
)

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"

OpenFactory = Callable[[], Awaitable[CheckpointerFactory]]


class Trail(TypedDict):
    """Graph state: every step appends to it."""

    steps: Annotated[list[str], operator.add]


def _echo(state: Trail) -> dict[str, list[str]]:
    return {"steps": [f"seen {len(state['steps'])}"]}


def compile_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A one-node graph whose state is the list of steps so far."""
    builder = StateGraph(Trail)
    builder.add_node("echo", _echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def thread(thread_id: str) -> RunnableConfig:
    """Run configuration of one thread."""
    return {"configurable": {"thread_id": thread_id}}


async def run_turn(factory: CheckpointerFactory, user_did: str, thread_id: str, text: str) -> None:
    """Invoke the graph once on ``thread_id`` with the user's checkpointer."""
    graph = compile_graph(await factory(user_did))
    await graph.ainvoke({"steps": [text]}, thread(thread_id))


async def read_steps(factory: CheckpointerFactory, user_did: str, thread_id: str) -> list[str]:
    """The thread's latest state, as stored."""
    saver = await factory(user_did)
    checkpoint = await saver.aget_tuple(thread(thread_id))
    if checkpoint is None:
        return []
    return list(checkpoint.checkpoint["channel_values"].get("steps", []))


async def test_checkpoints_survive_reopening(open_checkpointer_factory: OpenFactory) -> None:
    factory = await open_checkpointer_factory()
    await run_turn(factory, ALICE, "session-1", "hello")
    await run_turn(factory, ALICE, "session-1", "again")
    await factory.aclose()

    reopened = await open_checkpointer_factory()
    expected = ["hello", "seen 1", "again", "seen 3"]
    assert await read_steps(reopened, ALICE, "session-1") == expected
    state = await compile_graph(await reopened(ALICE)).aget_state(thread("session-1"))
    assert state.values == {"steps": expected}


async def test_delete_threads_removes_only_those_threads(
    open_checkpointer_factory: OpenFactory,
) -> None:
    factory = await open_checkpointer_factory()
    await run_turn(factory, ALICE, "session-1", "one")
    await run_turn(factory, ALICE, "session-2", "two")

    await factory.delete_threads(ALICE, ["session-1"])

    assert await read_steps(factory, ALICE, "session-1") == []
    assert await read_steps(factory, ALICE, "session-2") == ["two", "seen 1"]


async def test_delete_session_threads_takes_sub_agent_threads_too(
    open_checkpointer_factory: OpenFactory,
) -> None:
    factory = await open_checkpointer_factory()
    # "%" and "_" are LIKE wildcards: the prefix match must treat them literally.
    session_id = "s%_1"
    kept = ["s%_10", "sX_1_sub", "s%X1_sub", "other"]
    for thread_id in [session_id, f"{session_id}_researcher", f"{session_id}_writer", *kept]:
        await run_turn(factory, ALICE, thread_id, thread_id)

    deleted = await factory.delete_session_threads(ALICE, session_id)

    assert deleted == sorted([session_id, f"{session_id}_researcher", f"{session_id}_writer"])
    for thread_id in deleted:
        assert await read_steps(factory, ALICE, thread_id) == []
    for thread_id in kept:
        assert await read_steps(factory, ALICE, thread_id) == [thread_id, "seen 1"]


async def test_deleting_unknown_threads_is_a_no_op(open_checkpointer_factory: OpenFactory) -> None:
    factory = await open_checkpointer_factory()
    await factory.delete_threads(BOB, ["nothing"])
    assert await factory.delete_session_threads(BOB, "nothing") == []


async def test_a_user_is_required(open_checkpointer_factory: OpenFactory) -> None:
    factory = await open_checkpointer_factory()
    with pytest.raises(ValueError, match="user's DID"):
        await factory("")


async def test_sqlite_keeps_one_file_per_user(tmp_path: Path) -> None:
    factory = await open_checkpointers("sqlite", str(tmp_path))
    try:
        assert isinstance(factory, UserDatabases)
        await run_turn(factory, ALICE, "session-1", "from alice")
        await run_turn(factory, BOB, "session-2", "from bob")

        alice_file, bob_file = factory.path_for(ALICE), factory.path_for(BOB)
        assert alice_file.parent.parent == tmp_path / "user_dbs"
        assert alice_file.name == f"{factory.storage_key(ALICE)}.db"
        assert alice_file != bob_file
        assert alice_file.is_file()
        assert bob_file.is_file()
        assert await read_steps(factory, ALICE, "session-2") == []
        assert await read_steps(factory, BOB, "session-1") == []
        assert await read_steps(factory, BOB, "session-2") == ["from bob", "seen 1"]
    finally:
        await factory.aclose()


async def test_sqlite_deletion_for_a_user_without_a_file_creates_none(tmp_path: Path) -> None:
    factory = await open_checkpointers("sqlite", str(tmp_path))
    try:
        assert isinstance(factory, UserDatabases)
        await factory.delete_threads(ALICE, ["session-1"])
        await factory.delete_session_threads(ALICE, "session-1")
        assert not factory.path_for(ALICE).exists()
    finally:
        await factory.aclose()


async def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"persistence\.dialect_unsupported"):
        await open_checkpointers("mysql", "mysql://db")
    with pytest.raises(ValueError, match=r"persistence\.schema_unsupported"):
        await open_checkpointers("sqlite", str(tmp_path), schema="x")
    with pytest.raises(ValueError, match=r"persistence\.bad_schema"):
        await open_checkpointers("postgresql", "postgresql://u@127.0.0.1/db", schema="a b")
