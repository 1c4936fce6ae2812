"""Rejoining runs: time from a reconnect to the first replayed event, and memory per run.

Fifty users each stream a turn whose answer the model double sends slowly, all at once.
Each client reads a few events, drops its connection, then rejoins with
``GET /runs/{id}?after=N``; the time from sending the rejoin to receiving its first event
is measured, next to the baseline of the same run: the time from sending a new message
to its first event. With the runs finished, the memory the in-memory run log holds for
them is measured with ``tracemalloc`` and compared with the bytes of their SSE frames.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

from oracle_server import create_oracle_app
from oracle_server.testing import (
    MemoryRunLog,
    OpenAIDouble,
    PersistentSseParser,
    auth_headers,
    serving,
)
from oracle_ucan import Ed25519Signer

RUNS = 50
ANSWER = " ".join(f"token{n}" for n in range(400))


async def _read(response: httpx.Response, *, stop_after: int | None) -> tuple[float, int]:
    """Read an SSE response: when its first event came, and the last event id read.

    Stops once event ``stop_after`` was read (the client drops the connection there),
    else at the end of the stream.
    """
    parser = PersistentSseParser()
    first_at = 0.0
    last = 0
    async for chunk in response.aiter_text():
        events = parser.feed(chunk)
        if events and not first_at:
            first_at = time.perf_counter()
        for event in events:
            last = event.id or last
        if stop_after is not None and last >= stop_after:
            break
    return first_at, last


async def _one(
    client: httpx.AsyncClient, headers: dict[str, str], samples: dict[str, list[float]]
) -> None:
    session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
    body = {"message": "tell me a long story", "stream": True}
    sent = time.perf_counter()
    async with client.stream("POST", f"/messages/{session}", headers=headers, json=body) as r:
        run_id = r.headers["x-run-id"]
        first_at, last = await _read(r, stop_after=20)
    samples["new"].append(first_at - sent)
    sent = time.perf_counter()
    rejoin = client.stream("GET", f"/runs/{run_id}", params={"after": last}, headers=headers)
    async with rejoin as r:
        first_at, _ = await _read(r, stop_after=None)
    samples["rejoin"].append(first_at - sent)


async def measure(runs: int = RUNS) -> dict[str, Any]:
    """Run the scenario; times in seconds, memory in bytes."""
    with tempfile.TemporaryDirectory(prefix="oracle-bench-runs-") as data:
        async with OpenAIDouble(
            auto_reply=lambda chat: ANSWER, chunk_size=12, delay_between_chunks=0.005
        ) as llm:
            app = await create_oracle_app(
                {"name": "Rejoin Bench"},
                env={
                    "ORACLE_BACKEND": "local",
                    "SQLITE_DATABASE_PATH": str(Path(data) / "sqlite"),
                    "THROTTLE_LIMIT": "100000",
                    **llm.env(),
                },
                discover_entry_points=False,
                skip_graceful_shutdown=True,
            )
            log = app.state.runner.runs
            assert isinstance(log, MemoryRunLog)
            samples: dict[str, list[float]] = {"new": [], "rejoin": []}
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            async with serving(app) as base_url:
                limits = httpx.Limits(max_connections=2 * runs)
                async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as http:
                    users = [Ed25519Signer.generate() for _ in range(runs)]
                    await asyncio.gather(
                        *(_one(http, auth_headers(u, app.state.oracle_did), samples) for u in users)
                    )
                    after = tracemalloc.take_snapshot()
                    held = sum(
                        stat.size_diff
                        for stat in after.compare_to(before, "filename")
                        if stat.traceback[0].filename.endswith(("runs.py", "turns.py"))
                    )
                    payload = sum(log.payload_bytes(r) for r in log.run_ids())
                    events = sum(log.event_count(r) for r in log.run_ids())
            tracemalloc.stop()
    return {
        "runs": runs,
        "new_ms": [s * 1000 for s in samples["new"]],
        "rejoin_ms": [s * 1000 for s in samples["rejoin"]],
        "held_bytes": held,
        "payload_bytes": payload,
        "events": events,
    }


def report(result: dict[str, Any]) -> str:
    """The figures as text."""
    new, rejoin = result["new_ms"], result["rejoin_ms"]
    runs = result["runs"]

    def p(samples: list[float], q: float) -> float:
        ordered = sorted(samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    held, payload = result["held_bytes"], result["payload_bytes"]
    return "\n".join(
        [
            f"Run rejoin ({runs} concurrent runs of a {len(ANSWER.split())}-token answer, "
            "in-memory run log)",
            f"  reconnect -> first replayed event: median {statistics.median(rejoin):.1f} ms, "
            f"p90 {p(rejoin, 0.9):.1f} ms",
            f"  baseline, new message -> first event: median {statistics.median(new):.1f} ms, "
            f"p90 {p(new, 0.9):.1f} ms = rejoin "
            f"{statistics.median(rejoin) / statistics.median(new):.2f}x",
            f"  memory held by the run log: {held / runs / 1024:,.1f} KiB per run "
            f"({result['events'] / runs:,.0f} events, {payload / runs / 1024:,.1f} KiB of "
            f"SSE text each) = {held / max(payload, 1):.1f}x the text",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
