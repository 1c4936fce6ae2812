"""Restoring a user with 200 turns on a fresh node, and the Matrix upload volume per turn.

A node serves a ``did:ixo`` user over HTTP against a real Synapse (from PyPI, as in the
tests) and a model double that echoes with a paragraph of text. After each turn the
user's database is uploaded at once (the debounce is bypassed so every turn is measured
alone); the bytes uploaded are compared with the bytes the turn added to the database
and with a full upload of the same state (the baseline: what uploading the whole file
every time would cost). Then the node is shut down, its local data deleted, and a fresh
node restores the user on their first request; the baseline for that is the same first
request on a node that still has the file on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from oracle_server.testing import (
    BlocksyncDouble,
    ChatRequest,
    CheckpointBackup,
    OpenAIDouble,
    Synapse,
    node_env,
    oracle_node,
    prepare_upload,
    provision_oracle,
    read_chain,
    user_headers,
)
from oracle_ucan import Ed25519Signer

TURNS = 200
# The full-upload baseline compresses and seals the whole file: sampled, not every turn.
FULL_EVERY = 10
_PARAGRAPH = (
    "The site visit is booked for Tuesday; the meter readings from last week are in the "
    "report and the filter replacement is pending approval from the project team. "
)


def _reply(chat: ChatRequest) -> str:
    return f"Noted: {chat.last_user_text}. {_PARAGRAPH * 2}"


def _backup(app: Any) -> CheckpointBackup:
    backup = app.state.matrix.backup
    assert isinstance(backup, CheckpointBackup)
    return backup


async def _first_request(base_url: str, headers: dict[str, str]) -> tuple[float, int]:
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as http:
        started = time.perf_counter()
        answer = await http.get("/sessions")
        elapsed = time.perf_counter() - started
        answer.raise_for_status()
        return elapsed, int(answer.json()["total"])


async def measure(turns: int = TURNS) -> dict[str, Any]:
    """Run the scenario; figures in bytes and seconds."""
    work = Path(tempfile.mkdtemp(prefix="oracle-bench-matrix-"))
    try:
        with Synapse(data_dir=work / "synapse") as synapse:
            return await _measure(synapse, work, turns)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _measure(synapse: Synapse, work: Path, turns: int) -> dict[str, Any]:
    account = await provision_oracle(synapse)
    async with OpenAIDouble(auto_reply=_reply) as llm, BlocksyncDouble() as blocksync:
        user = blocksync.add_user(Ed25519Signer.generate())
        headers = user_headers(user)
        per_turn: list[dict[str, Any]] = []
        env = node_env(
            synapse, account, work / "node-1", llm=llm, blocksync=blocksync,
            MATRIX_BACKUP_DEBOUNCE_SECONDS="86400", SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX="true",
        )  # fmt: skip
        async with (
            oracle_node(env) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as http,
        ):
            backup = _backup(app)
            databases = app.state.checkpointers
            session = (await http.post("/sessions")).json()["sessionId"]
            path = databases.path_for(user.did())
            key = backup.key_for(databases.storage_key(user.did()))
            for turn in range(turns):
                size_before = await asyncio.to_thread(_db_size, path)
                sent_before = backup.figures.bytes_uploaded
                answer = await http.post(f"/messages/{session}", json={"message": f"turn {turn}"})
                answer.raise_for_status()
                await backup.upload(user.did())
                sampled = (turn + 1) % FULL_EVERY == 0 or turn == 0
                full = (
                    await asyncio.to_thread(_full_size, path, work / "scratch", key)
                    if sampled
                    else None
                )
                size = await asyncio.to_thread(_db_size, path)
                per_turn.append(
                    {
                        "turn": turn + 1,
                        "db": size,
                        "growth": size - size_before,
                        "sent": backup.figures.bytes_uploaded - sent_before,
                        "full": full,
                    }
                )
            full_uploads = backup.figures.full_uploads
        # Node 1 is gone; a node with the same data on disk is the baseline.
        local = await _first_request_on(env, headers)
        shutil.rmtree(work / "node-1")
        fresh = node_env(synapse, account, work / "node-2", llm=llm, blocksync=blocksync)
        async with oracle_node(fresh) as (app, base_url):
            restore_seconds, total = await _first_request(base_url, headers)
            assert total == 1
            downloaded = _backup(app).figures.bytes_downloaded
            chain = len(read_chain(CheckpointBackup.index_path(path_on(app, user))))
    return {
        "turns": turns,
        "per_turn": per_turn,
        "full_uploads": full_uploads,
        "restore_seconds": restore_seconds,
        "local_seconds": local,
        "downloaded": downloaded,
        "chain": chain,
    }


def path_on(app: Any, user: Ed25519Signer) -> Path:
    """The user's database path on ``app``'s node."""
    path: Path = app.state.checkpointers.path_for(user.did())
    return path


async def _first_request_on(env: dict[str, str], headers: dict[str, str]) -> float:
    async with oracle_node(env) as (_app, base_url):
        elapsed, _ = await _first_request(base_url, headers)
    return elapsed


def _db_size(path: Path) -> int:
    """The database's size as SQLite sees it (pages in the file and in the WAL)."""
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return pages * page_size


def _full_size(path: Path, scratch: Path, key: bytes) -> int:
    """Sealed bytes of a full upload of the database now (a throwaway index forces it)."""
    scratch.mkdir(exist_ok=True)
    index = scratch / "baseline.index"
    index.unlink(missing_ok=True)
    prepared = prepare_upload(path, index, key=key, storage_key="baseline0000000000")
    assert prepared is not None
    return len(prepared.blob)


def report(result: dict[str, Any]) -> str:
    """The figures as text."""
    rows = result["per_turn"]
    kib = 1024
    lines = [
        f"Matrix backup and restore ({result['turns']} turns over HTTP, one session, "
        "upload after every turn; real Synapse on loopback)",
        "  turn     db size    growth   uploaded  full sealed",
    ]
    marks = {1, 2, 10, 50, 100, 150, result["turns"]}
    for row in rows:
        if row["turn"] in marks:
            full = f"{row['full'] / kib:8.1f} KiB" if row["full"] is not None else ""
            lines.append(
                f"  {row['turn']:4d} {row['db'] / kib:9.0f} KiB {row['growth'] / kib:6.0f} KiB "
                f"{row['sent'] / kib:7.1f} KiB {full}"
            )
    later = [r for r in rows if r["turn"] > 10]
    sent = sum(r["sent"] for r in later)
    growth = sum(r["growth"] for r in later)
    per_turn_ratio = [r["sent"] / r["growth"] for r in later if r["growth"] > 0 and r["sent"]]
    sampled = [r for r in later if r["full"] is not None]
    mean_sent = sent / len(later)
    mean_full = statistics.mean(r["full"] for r in sampled)
    lines += [
        f"  uploads: {len(rows)} turns, {result['full_uploads']} full, the rest deltas",
        f"  turns 11-{result['turns']}: uploaded {sent / kib:,.0f} KiB for {growth / kib:,.0f} KiB "
        f"of database growth = {sent / growth:.2f}x (median per turn "
        f"{statistics.median(per_turn_ratio):.2f}x); target: a few times the turn's bytes",
        f"  mean upload per turn {mean_sent / kib:,.1f} KiB vs a full upload every turn "
        f"{mean_full / kib:,.1f} KiB (every {FULL_EVERY}th turn sampled) = "
        f"{mean_sent / mean_full:.1%}",
        f"  restore on a fresh node (first request): {result['restore_seconds'] * 1000:,.0f} ms "
        f"for {result['downloaded'] / kib:,.0f} KiB in {result['chain']} blobs, a "
        f"{rows[-1]['db'] / kib:,.0f} KiB database",
        f"  the same request with the file on disk: {result['local_seconds'] * 1000:,.0f} ms "
        f"= restore {result['restore_seconds'] / result['local_seconds']:.1f}x",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
