"""Matrix backup bytes per turn: sealed deltas against sealed fulls, on a LangGraph database.

One user's SQLite file grows turn by turn as LangGraph's ``AsyncSqliteSaver`` checkpoints a
chat graph shaped like an oracle turn (user message, model call with a tool call, tool
result of 1-3 KB, answer), round-robin over a few sessions. After each turn, with the saver
still holding the file open in WAL mode, ``oracle_server.testing.prepare_upload`` prepares the
upload with its default chain policy (a delta unless the chain is at its limits) and, as
the baseline measured in the same run, a full upload of the same state: what uploading the
whole file every time costs (SRV-61's first design).

"Growth" is the file growth over the turn (whole pages); "written" is the bytes of the rows
the turn added (checkpoint, metadata and write blobs). Nothing here is timed against a
target: the figure that matters is sealed delta bytes over the bytes the turn added.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from oracle_server.testing import backup_key, commit_upload, prepare_upload

WARMUP_TURNS = 20
TURNS = 40
SESSIONS = 3
STORAGE_KEY = "0123456789abcdef0"
_WORDS = (
    "the oracle invoice north site project claim report pending approved amount due date "
    "customer supplier water filter carbon credit token balance account transfer review "
    "status open closed request field meter reading device location verified evidence "
    "summary next step please confirm with team schedule visit update record list show "
    "about for and of to in on at by from this that which when where how what why"
)
_VOCABULARY = _WORDS.split()


class ChatState(TypedDict):
    """The graph state: the conversation, as LangGraph's chat agents keep it."""

    messages: Annotated[list[AnyMessage], add_messages]


def _text(rng: random.Random, low: int, high: int) -> str:
    size = rng.randint(low, high)
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < size:
        words.append(rng.choice(_VOCABULARY))
    return " ".join(words)


def _graph(saver: AsyncSqliteSaver, rng: random.Random) -> Any:
    """model (tool call) -> tools (JSON result) -> answer: three super-steps, as an agent."""

    def model(state: ChatState) -> dict[str, list[AnyMessage]]:
        call_id = f"call_{rng.getrandbits(48):012x}"
        call = {"name": "search_records", "args": {"query": _text(rng, 20, 60)}, "id": call_id}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: ChatState) -> dict[str, list[AnyMessage]]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        records = [
            {
                "id": f"rec-{rng.randint(1, 99999)}",
                "title": _text(rng, 20, 50),
                "notes": _text(rng, 80, 300),
            }
            for _ in range(rng.randint(3, 7))
        ]
        return {
            "messages": [ToolMessage(json.dumps(records), tool_call_id=last.tool_calls[0]["id"])]
        }

    def answer(state: ChatState) -> dict[str, list[AnyMessage]]:
        return {"messages": [AIMessage(content=_text(rng, 400, 1500))]}

    builder = StateGraph(ChatState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_node("answer", answer)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


async def _written(saver: AsyncSqliteSaver) -> int:
    """Bytes of the rows LangGraph stored so far."""
    query = (
        "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints)"
        " + (SELECT coalesce(sum(length(value)), 0) FROM writes)"
    )
    async with saver.conn.execute(query) as cursor:
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def measure(turns: int = TURNS, warmup: int = WARMUP_TURNS) -> dict[str, Any]:
    """Per-turn sealed bytes of the chain policy and of a full upload, with the turn's growth."""
    rng = random.Random(20260101)
    key = backup_key(b"benchmark backup secret, 32 byte", STORAGE_KEY)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        db, index, no_index = root / "user.db", root / "index.json", root / "none.json"
        async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
            graph = _graph(saver, rng)

            async def turn(number: int) -> None:
                config = {"configurable": {"thread_id": f"session-{number % SESSIONS}"}}
                message = HumanMessage(_text(rng, 100, 400))
                await graph.ainvoke({"messages": [message]}, config)

            for number in range(warmup):
                await turn(number)
            first = await asyncio.to_thread(
                prepare_upload, db, index, key=key, storage_key=STORAGE_KEY
            )
            assert first is not None
            commit_upload(index, first, blob_id="turn-0")
            size = first.index.page_count * first.index.page_size
            written = await _written(saver)
            for number in range(1, turns + 1):
                await turn(warmup + number)
                started = time.perf_counter()
                chained = await asyncio.to_thread(
                    prepare_upload, db, index, key=key, storage_key=STORAGE_KEY
                )
                chained_s = time.perf_counter() - started
                assert chained is not None
                commit_upload(index, chained, blob_id=f"turn-{number}")
                started = time.perf_counter()
                full = await asyncio.to_thread(
                    prepare_upload, db, no_index, key=key, storage_key=STORAGE_KEY
                )
                full_s = time.perf_counter() - started
                assert full is not None
                new_size = chained.index.page_count * chained.index.page_size
                new_written = await _written(saver)
                rows.append(
                    {
                        "turn": number,
                        "db_size": new_size,
                        "growth": new_size - size,
                        "written": new_written - written,
                        "kind": chained.kind,
                        "sealed": len(chained.blob),
                        "full_sealed": len(full.blob),
                        "prepare_s": chained_s,
                        "full_prepare_s": full_s,
                    }
                )
                size, written = new_size, new_written
    deltas = [row for row in rows if row["kind"] == "delta"]
    return {
        "warmup": warmup,
        "rows": rows,
        "start_db_size": first.index.page_count * first.index.page_size,
        "delta_over_growth": sum(r["sealed"] for r in deltas) / sum(r["growth"] for r in deltas),
        "delta_over_written": sum(r["sealed"] for r in deltas) / sum(r["written"] for r in deltas),
        "median_delta_over_written": statistics.median(r["sealed"] / r["written"] for r in deltas),
        "policy_over_written": sum(r["sealed"] for r in rows) / sum(r["written"] for r in rows),
        "mean_delta": statistics.fmean(r["sealed"] for r in deltas),
        "mean_full": statistics.fmean(r["full_sealed"] for r in rows),
        "policy_total": sum(r["sealed"] for r in rows),
        "full_total": sum(r["full_sealed"] for r in rows),
        "median_delta_prepare_ms": statistics.median(r["prepare_s"] for r in deltas) * 1000,
        "median_full_prepare_ms": statistics.median(r["full_prepare_s"] for r in rows) * 1000,
    }


def _kib(size: float) -> str:
    return f"{size / 1024:.1f} KiB"


def report(result: dict[str, Any]) -> str:
    """Human-readable figures: a row every fifth turn and at every full, then the ratios."""
    rows = result["rows"]
    lines = [
        f"Matrix backup per turn (LangGraph chat graph, {SESSIONS} sessions, "
        f"{result['warmup']} warm-up turns, then {len(rows)}; "
        f"db {_kib(result['start_db_size'])} -> {_kib(rows[-1]['db_size'])})",
        f"  {'turn':>4}  {'db size':>11}  {'growth':>10}  {'written':>10}  {'upload':>6}  "
        f"{'sealed':>10}  {'full sealed':>11}",
    ]
    for row in rows:
        if row["turn"] % 5 and row["kind"] == "delta":
            continue
        lines.append(
            f"  {row['turn']:>4}  {_kib(row['db_size']):>11}  {_kib(row['growth']):>10}  "
            f"{_kib(row['written']):>10}  {row['kind']:>6}  {_kib(row['sealed']):>10}  "
            f"{_kib(row['full_sealed']):>11}"
        )
    policy, full = result["policy_total"], result["full_total"]
    lines += [
        f"  delta sealed / db growth:     {result['delta_over_growth']:.2f}x (all delta turns)",
        f"  delta sealed / rows written:  {result['delta_over_written']:.2f}x "
        f"(median per turn {result['median_delta_over_written']:.2f}x)",
        f"  mean delta {_kib(result['mean_delta'])} against mean full "
        f"{_kib(result['mean_full'])} = {result['mean_delta'] / result['mean_full']:.1%}",
        f"  all uploads with the chain policy (fulls included): {_kib(policy)} against "
        f"{_kib(full)} for a full every turn = {policy / full:.1%}",
        f"  chain policy sealed / rows written, fulls included: "
        f"{result['policy_over_written']:.2f}x",
        f"  prepare_upload median: delta {result['median_delta_prepare_ms']:.1f} ms, "
        f"full {result['median_full_prepare_ms']:.1f} ms",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
