"""History growth: turn latency at 500 messages of history against 4, and checkpoint bytes.

One user's thread is grown by real turns through ``runtime.run_turn`` (each turn is a
question, a tool call, the tool's result and an answer: four messages) against the
OpenAI-compatible model double, with the server's per-user SQLite checkpointer. Along the
way, the bytes every turn adds to the user's ``checkpoints``, ``writes`` and
``oracle_message_blobs`` tables are summed (blob lengths, so SQLite page slack and the WAL
do not blur them).

For latency, the thread at 4 and at 500 messages is copied row for row (every checkpoint,
write and stored message, under a fresh thread id: an exact copy of what real turns
wrote; a thread's messages are spread over its checkpoints' writes, so its latest
checkpoint alone does not hold them), and one turn is timed on each copy: in-process
through ``run_turn`` and over HTTP (SSE to ``done``), one turn at a time, alternating
sizes so that drift hits both.
The short history is 4 messages rather than 5 because a settled thread holds whole turns.
What boot and the warm-up turns left behind is frozen (``freeze_boot_objects``) before
the thread grows, as ``OracleApp.serve`` does in production. The model double shares the
process: parsing a request costs it what a real model server would spend elsewhere.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks.server_throughput import (
    ANSWER,
    QUESTION,
    create_app,
    new_session,
    sse_turn,
    tool_then_answer,
)
from oracle_core import MESSAGES_SNAPSHOT_FREQUENCY, SessionInfo, TurnRequest, UserInfo
from oracle_server import OracleApp, freeze_boot_objects
from oracle_server.testing import OpenAIDouble, auth_headers, serving
from oracle_ucan import Ed25519Signer

SHORT = 4
LONG = 500
MESSAGES_PER_TURN = 4
SAMPLES = 20
BYTES_AT = (8, 100, 300, 500)
SOURCE = "history-source"
# Turns between two full copies of the message list (each turn updates it four times):
# the bytes of one turn depend on where it falls, so figures are also averaged over one.
SNAPSHOT_PERIOD = max(1, MESSAGES_SNAPSHOT_FREQUENCY // MESSAGES_PER_TURN)


MESSAGE_TABLE = "oracle_message_blobs"


async def table_bytes(saver: Any, thread_id: str) -> tuple[int, int, int, int]:
    """Checkpoint rows of ``thread_id`` and the blob bytes of its rows, per table.

    Returns checkpoint rows, checkpoint and metadata bytes, pending-write bytes, and the
    bytes of messages stored once for snapshots (digest and value).
    """
    checkpoints = (
        "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0)"
        " FROM checkpoints WHERE thread_id = ?"
    )
    writes = "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?"
    messages = (
        f"SELECT COALESCE(SUM(LENGTH(digest) + LENGTH(value)), 0) FROM {MESSAGE_TABLE}"
        " WHERE thread_id = ?"
    )
    async with saver.lock:
        async with saver.conn.execute(checkpoints, (thread_id,)) as cursor:
            rows, blob = await cursor.fetchone()
        async with saver.conn.execute(writes, (thread_id,)) as cursor:
            (written,) = await cursor.fetchone()
        async with saver.conn.execute(messages, (thread_id,)) as cursor:
            (stored,) = await cursor.fetchone()
    return int(rows), int(blob), int(written), int(stored)


async def copy_thread(saver: Any, source: str, target: str) -> None:
    """Copy every row of ``source`` to ``target``, in each table keyed by thread."""
    async with saver.lock:
        for table in ("checkpoints", "writes", MESSAGE_TABLE):
            async with saver.conn.execute(f"PRAGMA table_info({table})") as cursor:
                columns = [row[1] for row in await cursor.fetchall() if row[1] != "thread_id"]
            names = ", ".join(columns)
            await saver.conn.execute(
                f"INSERT INTO {table} (thread_id, {names})"
                f" SELECT ?, {names} FROM {table} WHERE thread_id = ?",
                (target, source),
            )
        await saver.conn.commit()


async def local_turn(app: OracleApp, did: str, thread: str) -> None:
    """One ``run_turn`` in ``thread``, checked."""
    result = await app.runtime.run_turn(
        TurnRequest(user=UserInfo(did=did), session=SessionInfo(id=thread), message=QUESTION)
    )
    if result["messages"][-1].text != ANSWER:
        raise RuntimeError(f"turn in {thread} ended with {result['messages'][-1]!r}")


async def grow(app: OracleApp, did: str, saver: Any) -> dict[str, Any]:
    """Grow the source thread to ``LONG`` messages and beyond, one turn at a time.

    Copies the thread at ``SHORT`` and ``LONG`` messages as the latency seeds and records
    what each turn adds to the tables.
    """
    per_turn: dict[int, dict[str, int]] = {}
    last = max(*BYTES_AT, LONG) + (SNAPSHOT_PERIOD - 1) * MESSAGES_PER_TURN
    before = await table_bytes(saver, SOURCE)
    for history in range(0, last + 1, MESSAGES_PER_TURN):
        if history in (SHORT, LONG):
            await copy_thread(saver, SOURCE, f"seed-{history}")
        await local_turn(app, did, SOURCE)
        after = await table_bytes(saver, SOURCE)
        per_turn[history] = {
            "rows": after[0] - before[0],
            "checkpoint_bytes": after[1] - before[1],
            "write_bytes": after[2] - before[2],
            "message_bytes": after[3] - before[3],
        }
        before = after
    messages = await app.runtime.thread_messages(did, f"seed-{LONG}")
    if len(messages) != LONG:
        raise RuntimeError(f"the {LONG}-message copy holds {len(messages)} messages")
    return {
        "per_turn": per_turn,
        "message_list_bytes": len(saver.serde.dumps_typed(messages)[1]),
        "messages": len(messages),
    }


async def time_turns(
    app: OracleApp, client: httpx.AsyncClient, user: Ed25519Signer, saver: Any
) -> dict[str, dict[int, list[float]]]:
    """Latency of one turn on fresh copies of each seed, in-process and over HTTP."""
    did = user.did()
    headers = auth_headers(user, app.state.oracle_did)
    samples: dict[str, dict[int, list[float]]] = {"local": {}, "http": {}}
    for _ in range(SAMPLES):
        for history in (SHORT, LONG):
            thread = f"copy-{uuid.uuid4()}"
            await copy_thread(saver, f"seed-{history}", thread)
            start = time.perf_counter()
            await local_turn(app, did, thread)
            samples["local"].setdefault(history, []).append(time.perf_counter() - start)

            session_id = await new_session(client, headers)
            await copy_thread(saver, f"seed-{history}", session_id)
            start = time.perf_counter()
            await sse_turn(client, headers, session_id)
            samples["http"].setdefault(history, []).append(time.perf_counter() - start)
    return samples


def file_bytes(path: Path) -> int:
    """Size of a SQLite file and its WAL."""
    wal = path.with_name(path.name + "-wal")
    return sum(p.stat().st_size for p in (path, wal) if p.exists())


def added(turn: dict[str, int]) -> int:
    """Blob bytes a turn added: checkpoints, pending writes and stored messages."""
    return turn["checkpoint_bytes"] + turn["write_bytes"] + turn["message_bytes"]


def slope(points: dict[int, int]) -> float:
    """Least-squares slope of ``points`` (bytes per message of history)."""
    xs, ys = list(points), list(points.values())
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return num / sum((x - mean_x) ** 2 for x in xs)


async def measure() -> dict[str, Any]:
    """Grow the thread, then time turns on copies of it at both sizes."""
    user = Ed25519Signer.generate()
    async with OpenAIDouble(auto_reply=tool_then_answer, keep_requests=16) as double:
        with tempfile.TemporaryDirectory() as tmp:
            app = await create_app(double, tmp)
            async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
                saver = await app.state.checkpointers(user.did())
                # Warm-up: the user's file, the compiled agent, connections and auth caches.
                await local_turn(app, user.did(), "warm-up")
                headers = auth_headers(user, app.state.oracle_did)
                await sse_turn(client, headers, await new_session(client, headers))
                frozen = freeze_boot_objects()
                growth = await grow(app, user.did(), saver)
                path = app.state.checkpointers.path_for(user.did())
                growth["file_bytes"] = file_bytes(path)
                samples = await time_turns(app, client, user, saver)
    per_turn = growth["per_turn"]
    window = {
        h: [per_turn[h + i * MESSAGES_PER_TURN] for i in range(SNAPSHOT_PERIOD)] for h in BYTES_AT
    }
    latency = {
        path: {size: statistics.median(times) * 1000 for size, times in sizes.items()}
        for path, sizes in samples.items()
    }
    return {
        "frozen_objects": frozen,
        "samples": SAMPLES,
        "short": SHORT,
        "long": LONG,
        "latency_ms": latency,
        "ratio_local": latency["local"][LONG] / latency["local"][SHORT],
        "ratio_http": latency["http"][LONG] / latency["http"][SHORT],
        "bytes_at": {h: per_turn[h] for h in BYTES_AT},
        "mean_bytes_at": {h: statistics.fmean(map(added, turns)) for h, turns in window.items()},
        "snapshot_at_long": max(
            (t for t in window[LONG] if t["message_bytes"]),
            key=lambda t: t["checkpoint_bytes"],
            default=None,
        ),
        "snapshot_period": SNAPSHOT_PERIOD,
        "bytes_per_history_message": slope({h: added(t) for h, t in per_turn.items()}),
        "turns_grown": len(per_turn),
        "total_blob_bytes": sum(map(added, per_turn.values())),
        "file_bytes": growth["file_bytes"],
        "message_list_bytes": growth["message_list_bytes"],
        "messages": growth["messages"],
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    short, long = result["short"], result["long"]
    local, remote = result["latency_ms"]["local"], result["latency_ms"]["http"]
    at, means, period = result["bytes_at"], result["mean_bytes_at"], result["snapshot_period"]
    growth = means[max(means)] / means[min(means)]
    rows = "\n".join(
        f"    {history:>4} messages: {added(t):>7,} B/turn, mean {means[history]:>7,.0f} "
        f"({t['rows']} checkpoints {t['checkpoint_bytes']:>6,} B, "
        f"writes {t['write_bytes']:>6,} B)"
        for history, t in at.items()
    )
    snapshot = result["snapshot_at_long"]
    snapshot_line = (
        f"  the snapshot turn after {long} messages: {added(snapshot):,} B, of which "
        f"{snapshot['message_bytes']:,} B of messages no earlier snapshot stored"
        if snapshot
        else f"  no snapshot in the {period} turns after {long} messages"
    )
    return "\n".join(
        [
            "History growth (one session, turns of 4 messages: question, tool call, result,",
            f"  answer; latency: median of {result['samples']} turns on copies of a grown thread;",
            f"  {result['frozen_objects']:,} boot objects frozen)",
            f"  run_turn:   {short:>3} messages {local[short]:6.1f} ms, {long} messages "
            f"{local[long]:6.1f} ms = {result['ratio_local']:.2f}x; target <= 1.5x",
            f"  HTTP + SSE: {short:>3} messages {remote[short]:6.1f} ms, {long} messages "
            f"{remote[long]:6.1f} ms = {result['ratio_http']:.2f}x",
            "  checkpoint bytes added per turn (SQLite blobs: checkpoints, writes, stored",
            "  messages), by history before the turn; the mean is over that turn and the",
            f"  next {period - 1} (one snapshot of the message list every {period} turns):",
            rows,
            f"  {growth:.2f}x from {min(at)} to {max(at)} messages, means (target: flat): "
            f"{result['bytes_per_history_message']:+,.1f} B a turn per message of history",
            "  messages are stored as each step's new writes (LangGraph DeltaChannel); a",
            "  snapshot lists them by digest and stores the ones no earlier snapshot did",
            snapshot_line,
            f"  (LangGraph's saver copies the whole list, {result['message_list_bytes']:,} B at "
            f"{result['messages']} messages, into every snapshot)",
            f"  after {result['turns_grown']} turns: {result['total_blob_bytes']:,} B "
            f"of blobs, {result['file_bytes']:,} B on disk (file + WAL)",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
