"""The load generator of ``server_throughput.py`` in a process of its own.

``python -m benchmarks._load_client <base_url>`` keeps one httpx client to the server at
``base_url`` and answers one JSON line on stdout for each JSON line on stdin:

- ``{"op": "prepare", "headers": [...]}``: a new session for each user's headers
  (untimed); answers ``{"sessions": n}``.
- ``{"op": "prepare_langgraph", "sessions": n}``: ``n`` new threads on a LangGraph
  server (``versus_langgraph.py``); answers ``{"sessions": n}``.
- ``{"op": "run", "turns": n}``: ``n`` streamed turns in each prepared session, the
  sessions concurrently; answers ``{"latencies": [...], "seconds": s, "cpu_seconds": c}``
  (wall time of the run and this process's CPU time during it).
- ``{"op": "open", "arrivals": [...], "picks": [...]}``: an open-loop schedule of
  ``server_latency.py`` over the prepared sessions, at most one turn per session;
  answers ``{"latencies": [...], "late": [...], "queued": q, "seconds": s,
  "cpu_seconds": c}``, the lists in arrival order.

The server process then holds only what the in-process baseline holds: the app and the
model double. EOF on stdin ends the process.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx

from benchmarks.server_latency import Schedule, run_open_loop
from benchmarks.server_throughput import TurnFn, client_limits, http_turn, run_sessions
from benchmarks.versus_langgraph import langgraph_turn


async def serve_commands(base_url: str) -> None:
    """Answer commands from stdin until it closes."""
    turns: list[TurnFn] = []
    limits = client_limits(None)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120) as client:
        while line := await asyncio.to_thread(sys.stdin.readline):
            command: dict[str, Any] = json.loads(line)
            reply: dict[str, Any]
            if command["op"] == "prepare":
                turns = [await http_turn(client, headers) for headers in command["headers"]]
                reply = {"sessions": len(turns)}
            elif command["op"] == "prepare_langgraph":
                sessions = int(command["sessions"])
                turns = [await langgraph_turn(client) for _ in range(sessions)]
                reply = {"sessions": len(turns)}
            elif command["op"] == "run":
                run = await run_sessions(turns, int(command["turns"]))
                reply = {
                    "latencies": run.latencies,
                    "seconds": run.seconds,
                    "cpu_seconds": run.cpu_seconds,
                }
            elif command["op"] == "open":
                schedule = Schedule(arrivals=command["arrivals"], picks=command["picks"])
                opened = await run_open_loop(turns, schedule)
                reply = {
                    "latencies": opened.latencies,
                    "late": opened.late,
                    "queued": opened.queued,
                    "seconds": opened.seconds,
                    "cpu_seconds": opened.cpu_seconds,
                }
            else:
                raise ValueError(f"unknown command {command['op']!r}")
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(serve_commands(sys.argv[1]))
