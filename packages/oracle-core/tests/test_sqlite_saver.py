"""Tests of ``MessageStoreSqliteSaver``: delta snapshots whose messages are stored once."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import aiosqlite
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph

from oracle_core import CheckpointSerializer, MessageStoreSqliteSaver
from oracle_core._checkpoint import read_thread_state
from oracle_core._langgraph_compat import DeltaSnapshot, copy_checkpoint, messages_delta_reducer
from oracle_core._sqlite_saver import _decoded, _DecodedMessages

SNAPSHOT_EVERY = 3


class ChatState(TypedDict):
    messages: Annotated[
        list[AnyMessage],
        DeltaChannel(messages_delta_reducer, snapshot_frequency=SNAPSHOT_EVERY),
    ]


def chat_graph(saver: Any) -> Any:
    """A graph whose one node answers each question; its ``messages`` snapshot often."""

    def answer(state: ChatState) -> dict[str, Any]:
        question = state["messages"][-1]
        return {"messages": [AIMessage(f"answer to {question.text}", id=f"a-{question.id}")]}

    graph = StateGraph(ChatState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph.compile(checkpointer=saver)


def thread(name: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


async def chat(saver: Any, turns: int, name: str = "t", start: int = 0) -> list[AnyMessage]:
    """Ask questions ``start`` to ``start + turns - 1`` in thread ``name``; its messages."""
    graph = chat_graph(saver)
    for i in range(start, start + turns):
        question = HumanMessage(f"question {i} " + "x" * 200, id=f"q{i}")
        await graph.ainvoke({"messages": [question]}, thread(name))
    state = await graph.aget_state(thread(name))
    return list(state.values["messages"])


@contextlib.asynccontextmanager
async def saver_at(
    path: Path, kind: type[AsyncSqliteSaver] = MessageStoreSqliteSaver
) -> AsyncIterator[AsyncSqliteSaver]:
    """A saver of ``kind`` on the database at ``path``, closed on exit."""
    conn = await aiosqlite.connect(str(path))
    try:
        saver = kind(conn, serde=CheckpointSerializer())
        await saver.setup()
        yield saver
    finally:
        await conn.close()


@pytest.fixture
async def saver(tmp_path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    async with saver_at(tmp_path / "user.sqlite") as saver:
        yield saver


def holding_first_question(path: Path) -> list[int]:
    """Sizes of the checkpoint blobs that hold the first question's text, oldest first."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT LENGTH(checkpoint) FROM checkpoints WHERE thread_id = 't'"
            " AND instr(checkpoint, CAST('question 0' AS BLOB)) > 0 ORDER BY checkpoint_id"
        ).fetchall()
    conn.close()
    return [int(r[0]) for r in rows]


async def test_a_thread_reads_back_as_langgraphs_saver_stores_it(tmp_path: Path) -> None:
    async with (
        saver_at(tmp_path / "ours.sqlite") as ours,
        saver_at(tmp_path / "stock.sqlite", AsyncSqliteSaver) as stock,
    ):
        mine = await chat(ours, 12)
        theirs = await chat(stock, 12)
        history = [s async for s in chat_graph(ours).aget_state_history(thread())]
        stock_history = [s async for s in chat_graph(stock).aget_state_history(thread())]

    assert mine == theirs
    assert len(mine) == 24
    assert [m.text for m in mine[:2]] == [
        "question 0 " + "x" * 200,
        "answer to question 0 " + "x" * 200,
    ]
    # Every past checkpoint reads back the same too.
    assert [s.values for s in history] == [s.values for s in stock_history]
    # LangGraph's saver copies the whole list into its snapshots; this one only digests.
    # Both keep the first input in the first checkpoint (the graph's start channel).
    assert len(holding_first_question(tmp_path / "stock.sqlite")) > 1
    assert len(holding_first_question(tmp_path / "ours.sqlite")) == 1


async def test_each_message_is_stored_once(saver: AsyncSqliteSaver, tmp_path: Path) -> None:
    messages = await chat(saver, 12)

    with sqlite3.connect(tmp_path / "user.sqlite") as conn:
        digests = conn.execute("SELECT digest FROM oracle_message_blobs").fetchall()
    conn.close()
    # Eight snapshots (every third update) of up to 24 messages: one row a message, for
    # the messages up to the last snapshot.
    assert len(messages) - SNAPSHOT_EVERY * 2 <= len(digests) <= len(messages)


async def test_snapshot_checkpoints_stay_small_as_the_thread_grows(tmp_path: Path) -> None:
    async with saver_at(tmp_path / "ours.sqlite") as ours:
        await chat(ours, 30)

    with sqlite3.connect(tmp_path / "ours.sqlite") as conn:
        sizes = [
            int(r[0])
            for r in conn.execute(
                "SELECT LENGTH(checkpoint) FROM checkpoints WHERE thread_id = 't'"
                " ORDER BY checkpoint_id"
            )
        ]
        stored = conn.execute("SELECT SUM(LENGTH(value)) FROM oracle_message_blobs").fetchone()
    conn.close()
    # 60 messages of about 300 bytes each; the biggest checkpoint holds 33 bytes a message.
    assert max(sizes) < 60 * 300 / 3
    assert stored[0] > 60 * 200


async def test_a_new_saver_continues_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "user.sqlite"
    async with saver_at(path) as first:
        before = await chat(first, 7)
    async with saver_at(path) as second:
        after = await chat(second, 1, start=7)
        state = await read_thread_state(second, "t")

    assert after[:-2] == before
    assert len(after) == 16
    assert state["messages"] == after


async def test_it_reads_threads_langgraphs_saver_wrote(tmp_path: Path) -> None:
    path = tmp_path / "user.sqlite"
    async with saver_at(path, AsyncSqliteSaver) as stock:
        written = await chat(stock, 8)
    async with saver_at(path) as ours:
        continued = await chat(ours, 2, start=8)

    assert continued[:16] == written
    assert len(continued) == 20


async def test_reads_take_one_trip_each_and_match_langgraphs_saver(tmp_path: Path) -> None:
    async with (
        saver_at(tmp_path / "ours.sqlite") as ours,
        saver_at(tmp_path / "stock.sqlite", AsyncSqliteSaver) as stock,
    ):
        await chat(ours, 4)
        await chat(stock, 4)
        trips: list[object] = []
        execute: Any = ours.conn._execute

        async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
            trips.append(fn)
            return await execute(fn, *args, **kwargs)

        ours.conn._execute = counted  # type: ignore[method-assign]
        latest = await ours.aget_tuple(thread())
        latest_trips = len(trips)
        assert latest is not None
        at = latest.config
        history = await ours.aget_delta_channel_history(config=at, channels=["messages"])
        history_trips = len(trips) - latest_trips
        stock_latest = await stock.aget_tuple(thread())
        assert stock_latest is not None
        stock_history = await stock.aget_delta_channel_history(
            config=stock_latest.config, channels=["messages"]
        )

    assert (latest_trips, history_trips) == (1, 1)
    assert latest.checkpoint["channel_values"].keys() == (
        stock_latest.checkpoint["channel_values"].keys()
    )
    assert latest.metadata == stock_latest.metadata
    assert latest.pending_writes == stock_latest.pending_writes
    [entry] = history.values()
    [stock_entry] = stock_history.values()
    assert [w[2] for w in entry["writes"]] == [w[2] for w in stock_entry["writes"]]
    assert entry["seed"].value == stock_entry["seed"].value


async def test_alist_and_get_tuple_hand_out_messages(saver: AsyncSqliteSaver) -> None:
    await chat(saver, 6)

    listed = [t async for t in saver.alist(thread())]
    snapshots = [
        t.checkpoint["channel_values"]["messages"]
        for t in listed
        if "messages" in t.checkpoint["channel_values"]
    ]
    latest_snapshot = next(t for t in listed if "messages" in t.checkpoint["channel_values"])
    again = await saver.aget_tuple(latest_snapshot.config)

    assert snapshots
    assert all(isinstance(m, HumanMessage | AIMessage) for s in snapshots for m in s.value)
    assert again is not None
    assert again.checkpoint["channel_values"]["messages"].value == snapshots[0].value


async def test_deleting_a_thread_deletes_its_messages(
    saver: AsyncSqliteSaver, tmp_path: Path
) -> None:
    await chat(saver, 6, name="gone")
    kept = await chat(saver, 6, name="kept")

    await saver.adelete_thread("gone")

    with sqlite3.connect(tmp_path / "user.sqlite") as conn:
        threads = {r[0] for r in conn.execute("SELECT thread_id FROM oracle_message_blobs")}
    conn.close()
    assert threads == {"kept"}
    assert await chat(saver, 0, name="kept") == kept
    assert await saver.aget_tuple(thread("gone")) is None


async def test_a_snapshot_whose_messages_are_gone_fails_clearly(
    saver: AsyncSqliteSaver, tmp_path: Path
) -> None:
    await chat(saver, 6)
    await saver.conn.execute("DELETE FROM oracle_message_blobs")
    await saver.conn.commit()
    # Another saver on the file: it has decoded nothing yet.
    async with saver_at(tmp_path / "user.sqlite") as other:
        with pytest.raises(LookupError, match=r"thread 't': .* not stored"):
            await chat_graph(other).aget_state(thread())


async def test_loads_hand_out_their_own_messages(saver: AsyncSqliteSaver) -> None:
    """Decoded messages are kept between loads; each load still gets its own objects."""
    await chat(saver, 6)
    graph = chat_graph(saver)

    first = (await graph.aget_state(thread())).values["messages"]
    first[0].content = "changed by the first reader"
    second = (await graph.aget_state(thread())).values["messages"]

    assert second == await chat(saver, 0)
    assert second[0].text.startswith("question 0")
    assert all(a is not b for a, b in zip(first, second, strict=True))


async def test_a_failed_snapshot_write_keeps_nothing_and_leaves_the_file_unlocked(
    saver: AsyncSqliteSaver, tmp_path: Path
) -> None:
    await chat(saver, 2)
    latest = await saver.aget_tuple(thread())
    assert latest is not None
    with sqlite3.connect(tmp_path / "user.sqlite") as conn:
        stored_before = conn.execute("SELECT COUNT(*) FROM oracle_message_blobs").fetchone()
    conn.close()
    checkpoint = copy_checkpoint(latest.checkpoint)
    checkpoint["channel_values"] = {"messages": DeltaSnapshot([HumanMessage("new", id="n")])}
    checkpoint["id"] = None  # type: ignore[typeddict-item]  # refused by NOT NULL

    with pytest.raises(sqlite3.IntegrityError):
        await saver.aput(latest.config, checkpoint, {}, {})

    assert not saver.conn.in_transaction
    with sqlite3.connect(tmp_path / "user.sqlite", timeout=0.1) as conn:
        conn.execute("CREATE TABLE another_writer (x)")  # no "database is locked"
        stored_after = conn.execute("SELECT COUNT(*) FROM oracle_message_blobs").fetchone()
    conn.close()
    assert stored_after == stored_before
    assert await chat(saver, 0) == (await chat_graph(saver).aget_state(thread())).values["messages"]


async def test_alist_reads_long_listings_in_batches(saver: AsyncSqliteSaver) -> None:
    await chat(saver, 30)
    graph = chat_graph(saver)

    everything = [t async for t in saver.alist(thread())]
    first_55 = [t async for t in saver.alist(thread(), limit=55)]
    history = [s async for s in graph.aget_state_history(thread())]

    ids = [t.checkpoint["id"] for t in everything]
    assert len(ids) > 55
    assert ids == sorted(set(ids), reverse=True)
    assert [t.checkpoint["id"] for t in first_55] == ids[:55]
    assert len(history) == len(everything)
    assert [m.text for m in history[0].values["messages"]][-1].startswith("answer to question 29")


async def test_deleting_a_thread_forgets_what_the_saver_decoded(saver: AsyncSqliteSaver) -> None:
    await chat(saver, 6)
    owner = saver._cache_owner  # type: ignore[attr-defined]
    assert any(key[0] is owner for key in _decoded._held)

    await saver.adelete_thread("t")

    assert not any(key[0] is owner for key in _decoded._held)


def test_the_decoded_cache_keeps_within_its_budget() -> None:
    cache = _DecodedMessages(size=3, max_bytes=100)
    owner = object()

    for i in range(5):
        cache.put((owner, f"d{i}"), f"message {i}", 30)

    assert len(cache) == 3
    assert cache.bytes == 90
    assert cache.get((owner, "d0")) is None
    assert cache.get((owner, "d4")) == "message 4"
    cache.put((owner, "big"), "big message", 80)
    assert cache.bytes <= 100
    assert cache.get((owner, "big")) == "big message"
