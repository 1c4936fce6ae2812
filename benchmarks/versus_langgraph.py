"""Side by side: this oracle against LangGraph's own server, the same agent, the same load.

The same agent — one always-visible tool (``city_time``), the OpenAI-compatible double as
its model, every turn one tool call and an answer — is served by this oracle
(``_oracle_process``: Hypercorn, UCAN auth on every request, SQLite per user, written
before the turn ends) and by LangGraph's open-source server (``langgraph dev`` from
``langgraph-cli[inmem]``: uvicorn, the in-memory runtime, its default 10 jobs per worker),
each in a process of its own. The model double runs in a third process, shared by both.
The LangGraph server is installed into a virtualenv of its own (``.tools/langgraph-bench``,
made with uv on first use) and is never a dependency of the packages.

One load generator (``_load_client``, a process per server, only one busy at a time)
drives both at three loads: 1 session (turns one after another), 50 sessions and 200
sessions (each session a user of its own, all sending at once, the next turn as soon as
the last ended). Both clients stream the turn (the oracle's ``POST /messages/{id}``
with ``stream: true``; LangGraph's ``POST /threads/{id}/runs/stream`` with the
``messages-tuple`` and ``updates`` modes) and read it to its end. Rounds alternate between
the servers, the order reversed every other round, so that drift on a shared machine hits
both. CPU per turn is the server's processes' (every thread) over the round; memory is
each server's peak resident set (``VmHWM``) after the 200-session rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks._processes import (
    REPOSITORY,
    LineProcess,
    OracleProcess,
    cpu_seconds,
    descendants,
    model_double,
    pss_bytes,
    rss_bytes,
)
from benchmarks.server_throughput import ClientProcess, Run, TurnFn
from oracle_server.testing import auth_headers, free_port
from oracle_ucan import Ed25519Signer

PINS = (
    "langgraph-cli[inmem]==0.4.40",
    "langgraph-api==0.16.7",
    "langchain==1.5.2",
    "langchain-openai==1.7.4",
)
VENV = REPOSITORY / ".tools" / "langgraph-bench"
LEVELS = ((1, 20), (50, 4), (200, 1))
"""(sessions, turns per session) of each load."""
ROUNDS = 4
QUESTION = "What time is it in Paris?"
ANSWER = "It is noon in Paris."

AGENT = '''
import os

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def city_time(city: str) -> str:
    """Time in a city."""
    return f"12:00 in {city}"


model = ChatOpenAI(
    base_url=os.environ["BENCH_MODEL_URL"], model=os.environ["BENCH_MODEL"], api_key="unused"
)
graph = create_agent(model, tools=[city_time], system_prompt="You are a helpful assistant.")
'''


def ensure_venv() -> Path:
    """The LangGraph server's virtualenv, made with the workspace's uv when missing."""
    marker = VENV / "pins.json"
    if marker.exists() and json.loads(marker.read_text()) == list(PINS):
        return VENV
    uv = REPOSITORY / ".tools" / "bin" / "uv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run(
        [str(uv), "venv", "-q", "--clear", "-p", sys.executable, str(VENV)], check=True, env=env
    )
    python = str(VENV / "bin" / "python")
    subprocess.run([str(uv), "pip", "install", "-q", "-p", python, *PINS], check=True, env=env)
    marker.write_text(json.dumps(list(PINS)))
    return VENV


class LangGraphProcess:
    """``langgraph dev`` serving the agent, in a temporary project directory."""

    def __init__(self, child: LineProcess, base_url: str) -> None:
        self.child = child
        self.base_url = base_url

    @classmethod
    @asynccontextmanager
    async def start(cls, venv: Path, model_env: dict[str, str]) -> AsyncIterator[LangGraphProcess]:
        """Serve the agent on a free loopback port; stop the server after the block."""
        port = free_port()
        with tempfile.TemporaryDirectory() as project:
            await asyncio.to_thread(_write_project, Path(project))
            env = {
                "BENCH_MODEL_URL": model_env["OPENAI_COMPATIBLE_BASE_URL"],
                "BENCH_MODEL": model_env["OPENAI_COMPATIBLE_MODEL"],
                "LANGSMITH_TRACING": "false",
                "LANGCHAIN_TRACING_V2": "false",
                "LANGGRAPH_CLI_NO_ANALYTICS": "1",
                "PYTHONPATH": "",
            }
            argv = [
                str(venv / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload",
                "--host", "127.0.0.1", "--port", str(port), "--n-jobs-per-worker", "10",
                "--server-log-level", "warning", "--config", str(Path(project, "langgraph.json")),
            ]  # fmt: skip
            async with LineProcess.start(*argv, env=env, cwd=project, quiet=True) as child:
                base_url = f"http://127.0.0.1:{port}"
                await _until_ok(base_url, child)
                yield cls(child, base_url)
                child.process.terminate()

    @property
    def pids(self) -> list[int]:
        """The server's processes."""
        return descendants(self.child.pid)


def _write_project(project: Path) -> None:
    (project / "agent.py").write_text(AGENT)
    config = {"dependencies": ["."], "graphs": {"agent": "./agent.py:graph"}}
    (project / "langgraph.json").write_text(json.dumps(config))


async def _until_ok(base_url: str, child: LineProcess) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=5) as client:
        for _ in range(600):
            if child.process.returncode is not None:
                raise RuntimeError(f"langgraph dev exited ({child.process.returncode})")
            try:
                if (await client.get("/ok")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError("langgraph dev did not answer /ok in 60 s")


async def langgraph_turn(client: httpx.AsyncClient) -> TurnFn:
    """Turns on a new LangGraph thread, streamed and read to the end of the body."""
    created = await client.post("/threads", json={})
    created.raise_for_status()
    thread_id = created.json()["thread_id"]
    request = {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": QUESTION}]},
        "stream_mode": ["messages-tuple", "updates"],
    }

    async def turn(index: int) -> None:
        # Its frames end with CRLF pairs (sse-starlette); the answer is the last update's.
        body = ""
        async with client.stream(
            "POST", f"/threads/{thread_id}/runs/stream", json=request
        ) as response:
            async for chunk in response.aiter_text():
                body += chunk
        frames = body.replace("\r\n", "\n").split("\n\n")
        if not any(f.startswith("event: updates") and ANSWER in f for f in frames):
            raise RuntimeError(
                f"LangGraph turn {index} ended with {response.status_code}: {body[-300:]!r}"
            )

    return turn


SIDES = ("langgraph", "oracle")


def _oracle(model_env: dict[str, str], workers: int) -> Any:
    if workers == 1:
        return OracleProcess.start(model_env)
    return OracleProcess.serve(model_env, workers=workers)


async def measure(
    rounds: int = ROUNDS, levels: Sequence[tuple[int, int]] = LEVELS, *, workers: int = 1
) -> dict[str, Any]:
    """Warm both servers, then the rounds of every load; the pooled figures.

    ``workers``: the oracle as one process (1), or under ``oracle serve --workers N``
    (its processes' CPU and memory summed, the supervisor's included).
    """
    venv = await asyncio.to_thread(ensure_venv)
    users = [Ed25519Signer.generate() for _ in range(max(s for s, _ in levels))]
    async with (
        model_double() as model_env,
        _oracle(model_env, workers) as oracle,
        LangGraphProcess.start(venv, model_env) as langgraph,
        ClientProcess.start(oracle.base_url) as oracle_client,
        ClientProcess.start(langgraph.base_url) as langgraph_client,
    ):
        pids = {"oracle": oracle.pids, "langgraph": langgraph.pids}

        async def side(name: str, sessions: int, turns: int) -> Run:
            prepare: dict[str, Any]
            if name == "oracle":
                headers = [auth_headers(u, oracle.oracle_did) for u in users[:sessions]]
                client, prepare = oracle_client, {"op": "prepare", "headers": headers}
            else:
                client = langgraph_client
                prepare = {"op": "prepare_langgraph", "sessions": sessions}
            await client.prepare(prepare)  # new sessions, outside the figures
            before = cpu_seconds(pids[name])
            run = await client.run_turns(turns)
            run.cpu_seconds = cpu_seconds(pids[name]) - before
            return run

        for name in SIDES:  # warm-up: imports, every user's database, connections
            await side(name, max(s for s, _ in levels), 1)
        results: dict[str, Any] = {"levels": []}
        for sessions, turns in levels:
            pooled = {name: Run() for name in SIDES}
            for index in range(rounds):
                for name in SIDES if index % 2 == 0 else SIDES[::-1]:
                    pooled[name].add(await side(name, sessions, turns))
            results["levels"].append(
                {
                    "sessions": sessions,
                    "turns": turns,
                    **{n: r.figures() for n, r in pooled.items()},
                }
            )
        results["peak_rss"] = {name: rss_bytes(pids[name], peak=True) for name in SIDES}
        results["rss"] = {name: rss_bytes(pids[name]) for name in SIDES}
        results["pss"] = {name: pss_bytes(pids[name]) for name in SIDES}
        results["rounds"] = rounds
        results["workers"] = workers
    return results


def report(result: dict[str, Any]) -> str:
    """Human-readable figures with the ratios and targets."""
    lines = [
        f"Side by side with LangGraph's server (langgraph dev {PINS[0].split('==')[1]}, "
        f"langgraph-api {PINS[1].split('==')[1]}; {result['rounds']} alternating rounds per load)",
        "  the same agent (one tool, the model double in its own process); each server in its",
        "  own process, the load generator in another; CPU: the server's processes",
        f"  oracle: {_served(result.get('workers', 1))}; LangGraph: one process (langgraph dev)",
        "  load                    server      turns/s      p50      p99  CPU/turn",
    ]
    for level in result["levels"]:
        label = f"{level['sessions']} x {level['turns']} turns"
        for name in SIDES:
            run = level[name]
            lines.append(
                f"  {label if name == SIDES[0] else '':<23} {name:<10} {run['turns_per_s']:8.1f} "
                f"{run['p50_ms']:6.0f} ms {run['p99_ms']:6.0f} ms {run['cpu_ms_per_turn']:6.1f} ms"
            )
        ours, theirs = level["oracle"], level["langgraph"]
        target = "; target >= 1.5x" if level["sessions"] > 1 else ""
        rate = ours["turns_per_s"] / theirs["turns_per_s"]
        tail = ours["p99_ms"] / theirs["p99_ms"]
        cost = ours["cpu_ms_per_turn"] / theirs["cpu_ms_per_turn"]
        lines.append(
            f"  {'':<23} oracle / LangGraph: turns/s {rate:.2f}x{target}, "
            f"p99 {tail:.2f}x (target <= 1.00x), CPU/turn {cost:.2f}x"
        )
    first, last = result["levels"][0], result["levels"][-1]
    if first["sessions"] == 1 and last["sessions"] > 1:
        alone, loaded = first["oracle"]["cpu_ms_per_turn"], last["oracle"]["cpu_ms_per_turn"]
        lines.append(
            f"  oracle CPU per turn, {last['sessions']} sessions / alone: {loaded / alone:.2f}x"
            " (target <= 1.10x)"
        )
    peak = result["peak_rss"]
    ours_mib, theirs_mib = peak["oracle"] / 2**20, peak["langgraph"] / 2**20
    lines.append(
        f"  peak RSS after {last['sessions']} sessions: oracle {ours_mib:.0f} MiB,"
        f" LangGraph {theirs_mib:.0f} MiB = {ours_mib / theirs_mib:.2f}x (target <= 1.00x)"
    )
    if "pss" in result and result.get("workers", 1) > 1:
        # Summed peaks count the pages the workers share (code, libraries) once per process.
        pss = {name: result["pss"][name] / 2**20 for name in SIDES}
        lines.append(
            f"  proportional memory (PSS) now: oracle {pss['oracle']:.0f} MiB,"
            f" LangGraph {pss['langgraph']:.0f} MiB = {pss['oracle'] / pss['langgraph']:.2f}x"
            " (shared pages counted once)"
        )
    return "\n".join(lines)


def _served(workers: int) -> str:
    if workers == 1:
        return "one process"
    return f"oracle serve --workers {workers} (supervisor and workers summed)"


def main() -> None:
    """``--rounds N``, ``--levels 50x4,200x1``: fewer or other loads than ``make bench``;
    ``--workers 2``: the oracle under ``oracle serve --workers 2``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.versus_langgraph")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--levels", default=",".join(f"{s}x{t}" for s, t in LEVELS))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    levels = [tuple(int(n) for n in level.split("x")) for level in args.levels.split(",")]
    pairs = [(s, t) for s, t in levels]
    print(report(asyncio.run(measure(args.rounds, pairs, workers=args.workers))))


if __name__ == "__main__":
    main()
