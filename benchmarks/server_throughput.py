"""Server throughput: 50 concurrent SSE sessions against in-process ``run_turn``.

Fifty users each own one session and run turns back to back over HTTP (``stream: true``,
read to the end of the body, which ends with the ``done`` frame), all fifty at once. Every
turn is one tool call of a small plugin and a text answer, scripted by the
OpenAI-compatible model double's ``auto_reply`` over real HTTP on loopback. The baseline
runs the same turns through the app's own ``runtime.run_turn`` with the same double and
the same 50-way concurrency, in the same run.

Where each part runs: the server (Hypercorn, the pipeline, the turn runner) and the model
double share one process and one event loop, as the baseline's ``run_turn`` and the double
do; only the per-user SQLite work runs on other threads (aiosqlite). The load generator
(httpx and the SSE parser) runs twice per round: in that same process and event loop,
where the HTTP side also pays for its client, and in a process of its own
(``benchmarks._load_client``), where the server process holds only what the baseline
holds, as a deployed server does. CPU per turn is the server process's (every thread of
it); the separate client's own CPU is printed beside it. On 2 cores the two processes
take one core each at most; the baseline and the in-process client get one core for
everything. Each round runs the three sides in turn, the order reversed every other round.
Every side starts from fresh sessions so that every timed turn sees the same history.
Last, each layer runs on its own, one turn at a time (``run_turn``; ``astream`` as the
runner streams; ``TurnRunner`` without HTTP; HTTP with either client), to show where the
extra time goes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from oracle_core import (
    SessionInfo,
    TurnRequest,
    UserInfo,
)
from oracle_server import AuthData, OracleApp, create_oracle_app
from oracle_server.testing import (
    ChatRequest,
    ClockPlugin,
    OpenAIDouble,
    PersistentSseParser,
    Step,
    ToolCalls,
    TurnInput,
    auth_headers,
    serving,
)
from oracle_server.testing import follow_run as follow
from oracle_ucan import Ed25519Signer

SESSIONS = 50
TURNS = 3
ROUNDS = 4
WARMUP = 1
ALONE_SESSIONS = 5
QUESTION = "What time is it in Paris?"
ANSWER = "It is noon in Paris."

# Where `python -m benchmarks._load_client` finds the `benchmarks` package.
REPOSITORY = Path(__file__).resolve().parent.parent

TurnFn = Callable[[int], Awaitable[None]]


def tool_then_answer(request: ChatRequest) -> Step:
    """A tool call on the first model call of a turn, the answer after the tool result."""
    if request.messages and request.messages[-1].get("role") == "tool":
        return ANSWER
    return ToolCalls([("city_time", {"city": "Paris"})])


async def create_app(double: OpenAIDouble, data_dir: str) -> OracleApp:
    """An oracle with the clock plugin whose model is ``double``."""
    return await create_oracle_app(
        {"name": "Benchmark Oracle"},
        plugins=[ClockPlugin()],
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": data_dir,
            "THROTTLE_LIMIT": "100000",
            **double.env(),
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1] * 1000


@dataclass
class Run:
    """Turns of one or more timed runs: latencies, wall time and process CPU time.

    ``cpu_seconds`` is this (the server's) process; ``client_cpu_seconds`` a load
    generator's own process, when it runs in one.
    """

    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0

    def add(self, other: Run) -> None:
        """Pool ``other`` into this one."""
        self.latencies += other.latencies
        self.seconds += other.seconds
        self.cpu_seconds += other.cpu_seconds
        self.client_cpu_seconds += other.client_cpu_seconds

    @property
    def turns_per_s(self) -> float:
        """Turns finished per second of wall time."""
        return len(self.latencies) / self.seconds

    def figures(self) -> dict[str, float]:
        """Rate, CPU per turn and latency percentiles."""
        return {
            "turns": len(self.latencies),
            "turns_per_s": self.turns_per_s,
            "cpu_ms_per_turn": self.cpu_seconds / len(self.latencies) * 1000,
            "client_cpu_ms_per_turn": self.client_cpu_seconds / len(self.latencies) * 1000,
            "p50_ms": percentile(self.latencies, 0.50),
            "p90_ms": percentile(self.latencies, 0.90),
            "p99_ms": percentile(self.latencies, 0.99),
        }


async def run_sessions(turns: Sequence[TurnFn], count: int) -> Run:
    """Run ``count`` turns in each session, the sessions concurrently."""
    run = Run()

    async def session(turn: TurnFn) -> None:
        for index in range(count):
            start = time.perf_counter()
            await turn(index)
            run.latencies.append(time.perf_counter() - start)

    # process_time counts every thread, so SQLite work on aiosqlite threads is included.
    cpu, start = time.process_time(), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for turn in turns:
            group.create_task(session(turn))
    run.seconds = time.perf_counter() - start
    run.cpu_seconds = time.process_time() - cpu
    return run


class ErrorCount(logging.Handler):
    """Counts error records of the server's loggers (post-turn bookkeeping failures)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        """Count ``record`` by message and exception type."""
        kind = type(record.exc_info[1]).__name__ if record.exc_info else ""
        self.messages[f"{record.getMessage()} ({kind})" if kind else record.getMessage()] += 1


def in_process_turn(app: OracleApp, did: str) -> TurnFn:
    """Turns on a fresh thread of ``did`` through ``runtime.run_turn`` (the baseline)."""
    thread = f"bench-{uuid.uuid4()}"

    async def turn(index: int) -> None:
        result = await app.runtime.run_turn(
            TurnRequest(user=UserInfo(did=did), session=SessionInfo(id=thread), message=QUESTION)
        )
        if result["messages"][-1].text != ANSWER:
            raise RuntimeError(f"in-process turn {index} ended with {result['messages'][-1]!r}")

    return turn


def streamed_turn(app: OracleApp, did: str) -> TurnFn:
    """Turns on a fresh thread streamed as ``TurnRunner`` streams them, without the runner."""
    thread = f"bench-{uuid.uuid4()}"

    async def turn(index: int) -> None:
        built = await app.runtime.build_agent(
            TurnRequest(user=UserInfo(did=did), session=SessionInfo(id=thread), message=QUESTION)
        )
        async for _ in built.agent.astream(
            built.input,
            config=built.config,
            context=built.context,
            stream_mode=["messages", "updates"],
        ):
            pass

    return turn


def runner_turn(app: OracleApp, did: str) -> TurnFn:
    """Turns on a fresh session through the server's ``TurnRunner``, its run log read to
    ``done`` as a response would, no HTTP."""
    session_id = str(uuid.uuid4())

    async def turn(index: int) -> None:
        started = await app.state.runner.start(
            TurnInput(
                auth=AuthData(did),
                session_id=session_id,
                message=QUESTION,
                request_id=str(uuid.uuid4()),
            )
        )
        async for _ in follow(app.state.runner.runs, started.run_id, 0):
            pass
        if started.status != "finished":
            raise RuntimeError(f"runner turn {index} ended with {started.status}")

    return turn


def client_limits(connections: int | None) -> httpx.Limits:
    """Pool limits of a load generator's client.

    Idle connections are dropped after 2 s, before Hypercorn's keep-alive timeout (5 s)
    closes them: a request sent on a connection the server is closing at that moment
    fails with "Server disconnected". Connections sit idle between rounds.
    """
    return httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2.0
    )


async def new_session(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    """``POST /sessions`` for the user of ``headers``; the new session's id."""
    created = await client.post("/sessions", headers=headers)
    created.raise_for_status()
    session_id: str = created.json()["sessionId"]
    return session_id


async def sse_turn(client: httpx.AsyncClient, headers: dict[str, str], session_id: str) -> None:
    """One streamed turn in ``session_id``, read to the end of its body (``done`` last).

    Reading past ``done`` to the end costs nothing (the server ends the body right after
    it) and keeps the connection: httpx closes a connection whose response was left
    unfinished, so a client that stopped at ``done`` opened a new one for every turn.

    Raises:
        RuntimeError: the turn did not finish.
    """
    parser = PersistentSseParser()
    status = None
    body = {"message": QUESTION, "stream": True}
    async with client.stream(
        "POST", f"/messages/{session_id}", headers=headers, json=body
    ) as response:
        async for chunk in response.aiter_text():
            for event in parser.feed(chunk):
                if event.event == "done":
                    status = event.data["status"]
    if status != "finished":
        raise RuntimeError(f"HTTP turn ended with {response.status_code} {status}")


async def http_turn(client: httpx.AsyncClient, headers: dict[str, str]) -> TurnFn:
    """Turns on a new session of the user of ``headers``, over SSE read to ``done``."""
    session_id = await new_session(client, headers)

    async def turn(index: int) -> None:
        await sse_turn(client, headers, session_id)

    return turn


class ClientProcess:
    """The load generator in a process of its own (``benchmarks._load_client``)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    @asynccontextmanager
    async def start(cls, base_url: str) -> AsyncIterator[ClientProcess]:
        """Start the client process for the server at ``base_url``; stop it after."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks._load_client",
            base_url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=REPOSITORY,
            limit=2**24,
        )
        try:
            yield cls(process)
        finally:
            if process.stdin is not None:
                process.stdin.close()
            await process.wait()

    async def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps(command).encode() + b"\n")
        await stdin.drain()
        line = await stdout.readline()
        if not line:
            raise RuntimeError(f"the load client exited ({await self._process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def run(self, headers: Sequence[dict[str, str]], turns: int) -> Run:
        """A new session per entry of ``headers`` (untimed), then ``turns`` turns in each,
        the sessions concurrently; CPU time is this process's during the turns."""
        return await self.run_prepared({"op": "prepare", "headers": list(headers)}, turns)

    async def run_prepared(self, prepare: dict[str, Any], turns: int) -> Run:
        """Sessions made by the ``prepare`` command (untimed), then ``turns`` turns in
        each, the sessions concurrently; CPU time is this process's during the turns."""
        await self.prepare(prepare)
        return await self.run_turns(turns)

    async def prepare(self, command: dict[str, Any]) -> None:
        """Make the sessions of ``command`` (``prepare`` or ``prepare_langgraph``)."""
        await self._ask(command)

    async def run_turns(self, turns: int) -> Run:
        """``turns`` turns in each prepared session, the sessions concurrently."""
        cpu = time.process_time()
        reply = await self._ask({"op": "run", "turns": turns})
        return Run(
            latencies=[float(x) for x in reply["latencies"]],
            seconds=float(reply["seconds"]),
            cpu_seconds=time.process_time() - cpu,
            client_cpu_seconds=float(reply["cpu_seconds"]),
        )


SIDES = ("in_process", "http", "http_process")


async def concurrent_rounds(
    app: OracleApp,
    client: httpx.AsyncClient,
    process: ClientProcess,
    users: Sequence[Ed25519Signer],
    turns: int,
) -> dict[str, tuple[Run, list[float]]]:
    """Each side with all sessions at once, in turn, every round; pooled runs, and each
    HTTP side's ratio to the in-process run of the same round."""
    headers = [auth_headers(user, app.state.oracle_did) for user in users]

    async def in_process() -> Run:
        return await run_sessions([in_process_turn(app, user.did()) for user in users], turns)

    async def http() -> Run:
        return await run_sessions([await http_turn(client, h) for h in headers], turns)

    async def http_process() -> Run:
        return await process.run(headers, turns)

    sides = {"in_process": in_process, "http": http, "http_process": http_process}
    pooled: dict[str, tuple[Run, list[float]]] = {name: (Run(), []) for name in SIDES}
    for index in range(ROUNDS):
        # Fresh sessions each round: every timed turn sees the same history. The order
        # reverses every other round so that drift on a shared machine hits every side.
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        runs = {name: await sides[name]() for name in order}
        for name, run in runs.items():
            pooled[name][0].add(run)
            pooled[name][1].append(run.turns_per_s / runs["in_process"].turns_per_s)
    return pooled


async def one_at_a_time(
    app: OracleApp, client: httpx.AsyncClient, process: ClientProcess, user: Ed25519Signer
) -> dict[str, Run]:
    """Each layer on its own, one turn at a time: where the HTTP path's extra time goes."""
    headers = auth_headers(user, app.state.oracle_did)
    did = user.did()
    names = ("run_turn", "astream", "runner", "http", "http_process")
    runs = {name: Run() for name in names}
    # The first pass is a warm-up: it also absorbs what the concurrent rounds left behind
    # (connections closing, garbage), which would otherwise count against the first layer.
    for index in range(ALONE_SESSIONS + 1):
        fresh = {
            "run_turn": in_process_turn(app, did),
            "astream": streamed_turn(app, did),
            "runner": runner_turn(app, did),
            "http": await http_turn(client, headers),
        }
        for name, turn in fresh.items():
            run = await run_sessions([turn], TURNS)
            if index > 0:
                runs[name].add(run)
        run = await process.run([headers], TURNS)
        if index > 0:
            runs["http_process"].add(run)
    return runs


async def measure(sessions: int = SESSIONS, turns: int = TURNS) -> dict[str, Any]:
    """Warm every path, then the concurrent rounds, then the layers one turn at a time."""
    users = [Ed25519Signer.generate() for _ in range(sessions)]
    limits = client_limits(sessions + 10)
    errors = ErrorCount()
    server_logger = logging.getLogger("oracle")
    server_logger.addHandler(errors)
    try:
        async with OpenAIDouble(auto_reply=tool_then_answer, keep_requests=16) as double:
            with tempfile.TemporaryDirectory() as tmp:
                app = await create_app(double, tmp)
                async with (
                    serving(app) as base_url,
                    httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120) as client,
                    ClientProcess.start(base_url) as process,
                ):
                    # Opens every user's checkpoint file, the auth caches and connections.
                    headers = [auth_headers(user, app.state.oracle_did) for user in users]
                    await run_sessions([in_process_turn(app, u.did()) for u in users], WARMUP)
                    await run_sessions([await http_turn(client, h) for h in headers], WARMUP)
                    await process.run(headers, WARMUP)
                    pooled = await concurrent_rounds(app, client, process, users, turns)
                    alone = await one_at_a_time(app, client, process, users[0])
    finally:
        server_logger.removeHandler(errors)
    local = pooled["in_process"][0]
    return {
        "sessions": sessions,
        "turns_per_session": turns,
        "rounds": ROUNDS,
        **{name: run.figures() for name, (run, _) in pooled.items()},
        "ratio": pooled["http"][0].turns_per_s / local.turns_per_s,
        "round_ratios": pooled["http"][1],
        "ratio_process": pooled["http_process"][0].turns_per_s / local.turns_per_s,
        "round_ratios_process": pooled["http_process"][1],
        "alone": {name: run.figures() for name, run in alone.items()},
        "server_errors": dict(errors.messages),
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    local, remote, alone = result["in_process"], result["http"], result["alone"]
    separate = result["http_process"]
    sessions = result["sessions"]
    # Sessions that send their next turn as soon as one ends keep `sessions` turns in
    # flight, so the mean latency is sessions / rate (Little's law).
    needed = sessions / 0.25

    def row(label: str, run: dict[str, float]) -> str:
        return (
            f"  {label:<32} {run['turns_per_s']:7.1f} {run['cpu_ms_per_turn']:7.1f} ms "
            f"{run['p50_ms']:6.0f} ms {run['p90_ms']:6.0f} ms {run['p99_ms']:6.0f} ms"
        )

    def ratio(label: str, pooled: float, rounds: list[float]) -> str:
        return (
            f"  ratio HTTP / in-process, {label:<19} {pooled:.0%} "
            f"(rounds {min(rounds):.0%}..{max(rounds):.0%}); target >= 80%"
        )

    def layer(label: str, name: str) -> str:
        run = alone[name]
        return f"    {label:<44} {run['cpu_ms_per_turn']:5.1f} ms {run['p50_ms']:6.1f} ms"

    errors = result["server_errors"]
    logged = "; ".join(f"{n}x {m}" for m, n in errors.items()) if errors else "none"
    return "\n".join(
        [
            f"Server throughput ({sessions} sessions, {result['rounds']} rounds x "
            f"{result['turns_per_session']} turns each, one tool call + answer)",
            "  server and model double share one process and event loop on 2 cores (SQLite",
            "  on aiosqlite threads); the load generator (httpx) runs in that process too",
            "  (client in-process), or in its own (client own process); CPU: server process",
            "                                   turns/s CPU/turn      p50       p90       p99",
            row(f"in-process run_turn x{sessions}", local),
            row(f"HTTP + SSE x{sessions}, client in-process", remote),
            row(f"HTTP + SSE x{sessions}, client own process", separate),
            f"    (the client process's own CPU: {separate['client_cpu_ms_per_turn']:.1f} ms"
            " per turn)",
            ratio("client in-process:", result["ratio"], result["round_ratios"]),
            ratio("client own process:", result["ratio_process"], result["round_ratios_process"]),
            f"  HTTP p99 {remote['p99_ms']:.0f} ms; target <= 250 ms, which {sessions} "
            f"back-to-back sessions reach only at >= {needed:.0f} turns/s",
            f"  one turn at a time ({alone['http']['turns']:.0f} turns per layer)"
            "                       CPU/turn      p50",
            layer("runtime.run_turn (ainvoke)", "run_turn"),
            layer("+ streamed model calls (astream)", "astream"),
            layer("+ TurnRunner (queue, frames, touch)", "runner"),
            layer("+ HTTP/SSE server and httpx client", "http"),
            layer("  the same, client in its own process", "http_process"),
            f"  server errors logged: {logged}",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
