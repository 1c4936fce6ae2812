"""Server latency under an open-loop load: p50/p90/p99 at 25%, 50% and 75% of capacity.

``server_throughput.py`` runs 50 sessions back to back (closed loop): 50 turns are always
in flight, so a turn waits 50 / rate (Little's law) whatever the server does, and a p99
target means nothing there. Here turns arrive on their own schedule, as users' messages
do: Poisson arrivals (seeded) at a fixed aggregate rate, each on a random session that is
idle, since a user waits for the answer before writing again. When no session is idle the
arrival waits for the first to free up. Latency runs from the scheduled arrival to the
end of the turn (over HTTP: the body read to its end, ``done`` last), so a late sender or
a queued arrival counts against the turn, not for it (no coordinated omission).

Capacity is measured first, in the same run: the closed-loop HTTP rate of 50 sessions
(the load generator in its own process, as in ``server_throughput.py``) and, for
reference, the in-process ``run_turn`` rate at the same concurrency. The offered loads are
fractions of the HTTP capacity. At each load the same schedule (arrival times and the draw
that picks among idle sessions) runs over HTTP, the load generator in its own process
(``benchmarks._load_client``, op ``open``), and through the app's ``runtime.run_turn`` in
the server's process (the baseline), alternating which goes first. Every run starts from
50 fresh sessions of the same 50 users, so both sides see the same history. Last, each
path one turn at a time.

The server's process freezes what boot and the warm-up turns left behind
(``freeze_boot_objects``) before measuring, as ``OracleApp.serve`` does in production.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import random
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.server_throughput import (
    ClientProcess,
    ErrorCount,
    Run,
    TurnFn,
    create_app,
    in_process_turn,
    percentile,
    run_sessions,
    tool_then_answer,
)
from oracle_server import OracleApp, freeze_boot_objects
from oracle_server.testing import OpenAIDouble, auth_headers, serving
from oracle_ucan import Ed25519Signer

SESSIONS = 50
LOADS = (0.25, 0.50, 0.75)
OPEN_TURNS = 250
CAPACITY_TURNS = 3
ALONE_SESSIONS = 3
ALONE_TURNS = 6
SEED = 2024
TARGET_P99_MS = 250.0
# The first arrival comes this long after the schedule starts, so that no turn is late
# because the sender was still setting up.
LEAD_SECONDS = 0.05


@dataclass(frozen=True)
class Schedule:
    """When each turn arrives (seconds after the start) and which idle session takes it.

    ``picks[i]`` in [0, 1) chooses among the sessions idle at arrival ``i``, in session
    order; an arrival that had to wait takes the session that freed up.
    """

    arrivals: list[float]
    picks: list[float]

    @classmethod
    def poisson(cls, rate: float, turns: int, seed: int) -> Schedule:
        """``turns`` arrivals of a Poisson process of ``rate`` per second."""
        rng = random.Random(seed)
        arrivals, at = [], 0.0
        for _ in range(turns):
            at += rng.expovariate(rate)
            arrivals.append(at)
        return cls(arrivals=arrivals, picks=[rng.random() for _ in range(turns)])

    def to_json(self) -> dict[str, list[float]]:
        """The schedule as the load client's ``open`` command carries it."""
        return {"arrivals": self.arrivals, "picks": self.picks}


@dataclass
class OpenRun:
    """One open-loop run: per arrival, its latency and how late it was sent.

    ``late`` is the time from the scheduled arrival to the start of the turn: the sender's
    own lag plus any wait for an idle session. ``cpu_seconds`` is this (the server's)
    process; ``client_cpu_seconds`` the load generator's, when it runs in its own;
    ``full_gcs`` the server process's full (generation 2) garbage collections.
    """

    latencies: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    queued: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0
    full_gcs: int = 0

    def figures(self) -> dict[str, float]:
        """Achieved rate, CPU per turn, latency percentiles and lateness."""
        turns = len(self.latencies)
        return {
            "turns": turns,
            "turns_per_s": turns / self.seconds,
            "cpu_ms_per_turn": self.cpu_seconds / turns * 1000,
            "client_cpu_ms_per_turn": self.client_cpu_seconds / turns * 1000,
            "p50_ms": percentile(self.latencies, 0.50),
            "p90_ms": percentile(self.latencies, 0.90),
            "p99_ms": percentile(self.latencies, 0.99),
            "max_ms": max(self.latencies) * 1000,
            "late_p99_ms": percentile(self.late, 0.99),
            "queued": self.queued,
            "full_gcs": self.full_gcs,
        }


def full_collections() -> int:
    """Full (generation 2) garbage collections of this process so far."""
    return int(gc.get_stats()[2]["collections"])


async def run_open_loop(turns: Sequence[TurnFn], schedule: Schedule) -> OpenRun:
    """Run ``schedule`` over the sessions of ``turns``, at most one turn per session."""
    count = len(schedule.arrivals)
    run = OpenRun(latencies=[0.0] * count, late=[0.0] * count)
    idle = list(range(len(turns)))
    waiting: deque[int] = deque()
    start = time.perf_counter() + LEAD_SECONDS

    async def user(session: int, index: int) -> None:
        # A session that ends its turn takes the oldest waiting arrival, as the next user
        # to write would get the first free worker.
        while True:
            due = start + schedule.arrivals[index]
            run.late[index] = time.perf_counter() - due
            await turns[session](index)
            run.latencies[index] = time.perf_counter() - due
            if not waiting:
                bisect.insort(idle, session)
                return
            index = waiting.popleft()

    cpu = time.process_time()
    async with asyncio.TaskGroup() as group:
        for index, offset in enumerate(schedule.arrivals):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if idle:
                session = idle.pop(int(schedule.picks[index] * len(idle)))
                group.create_task(user(session, index))
            else:
                run.queued += 1
                waiting.append(index)
    run.seconds = time.perf_counter() - start
    run.cpu_seconds = time.process_time() - cpu
    return run


class OpenLoopClient(ClientProcess):
    """The load client's process, which also runs open-loop schedules (op ``open``)."""

    @classmethod
    @asynccontextmanager
    async def start(cls, base_url: str) -> AsyncIterator[OpenLoopClient]:
        """Start the client process for the server at ``base_url``; stop it after."""
        async with super().start(base_url) as process:
            assert isinstance(process, OpenLoopClient)
            yield process

    async def open_loop(self, headers: Sequence[dict[str, str]], schedule: Schedule) -> OpenRun:
        """A new session per entry of ``headers`` (untimed), then ``schedule`` over them;
        CPU time is this process's during the schedule."""
        await self._ask({"op": "prepare", "headers": list(headers)})
        cpu = time.process_time()
        reply = await self._ask({"op": "open", **schedule.to_json()})
        return OpenRun(
            latencies=[float(x) for x in reply["latencies"]],
            late=[float(x) for x in reply["late"]],
            queued=int(reply["queued"]),
            seconds=float(reply["seconds"]),
            cpu_seconds=time.process_time() - cpu,
            client_cpu_seconds=float(reply["cpu_seconds"]),
        )


async def one_at_a_time(
    app: OracleApp, process: OpenLoopClient, user: Ed25519Signer
) -> dict[str, Run]:
    """Each path alone, one turn at a time, on fresh sessions of one user."""
    headers = auth_headers(user, app.state.oracle_did)
    runs = {"in_process": Run(), "http": Run()}
    for _ in range(ALONE_SESSIONS):
        runs["in_process"].add(await run_sessions([in_process_turn(app, user.did())], ALONE_TURNS))
        runs["http"].add(await process.run([headers], ALONE_TURNS))
    return runs


async def measure(sessions: int = SESSIONS, turns: int = OPEN_TURNS) -> dict[str, Any]:
    """Warm up, capacity (closed loop), each path alone, then the open-loop loads."""
    users = [Ed25519Signer.generate() for _ in range(sessions)]
    errors = ErrorCount()
    server_logger = logging.getLogger("oracle")
    server_logger.addHandler(errors)
    loads: list[dict[str, Any]] = []
    try:
        async with OpenAIDouble(auto_reply=tool_then_answer, keep_requests=16) as double:
            with tempfile.TemporaryDirectory() as tmp:
                app = await create_app(double, tmp)
                async with serving(app) as base_url, OpenLoopClient.start(base_url) as process:
                    headers = [auth_headers(user, app.state.oracle_did) for user in users]

                    def local_turns() -> list[TurnFn]:
                        return [in_process_turn(app, user.did()) for user in users]

                    # Opens every user's checkpoint file, the auth caches and connections.
                    await run_sessions(local_turns(), 1)
                    await process.run(headers, 1)
                    # As ``OracleApp.listen`` does before serving (GC_FREEZE_AT_START).
                    frozen = freeze_boot_objects()
                    capacity = await process.run(headers, CAPACITY_TURNS)
                    local_capacity = await run_sessions(local_turns(), CAPACITY_TURNS)
                    alone = await one_at_a_time(app, process, users[0])
                    for index, fraction in enumerate(LOADS):
                        rate = fraction * capacity.turns_per_s
                        schedule = Schedule.poisson(rate, turns, SEED + index)
                        # Alternate which side goes first, so drift hits both.
                        order = ("http", "in_process") if index % 2 == 0 else ("in_process", "http")
                        runs: dict[str, OpenRun] = {}
                        for side in order:
                            collections = full_collections()
                            if side == "http":
                                runs[side] = await process.open_loop(headers, schedule)
                            else:
                                runs[side] = await run_open_loop(local_turns(), schedule)
                            runs[side].full_gcs = full_collections() - collections
                        loads.append(
                            {
                                "fraction": fraction,
                                "offered_per_s": rate,
                                "http": runs["http"].figures(),
                                "in_process": runs["in_process"].figures(),
                            }
                        )
    finally:
        server_logger.removeHandler(errors)
    return {
        "sessions": sessions,
        "turns": turns,
        "capacity": capacity.figures(),
        "local_capacity": local_capacity.figures(),
        "alone": {
            name: {**run.figures(), "max_ms": max(run.latencies) * 1000}
            for name, run in alone.items()
        },
        "loads": loads,
        "frozen_objects": frozen,
        "server_errors": dict(errors.messages),
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    sessions, capacity, local = result["sessions"], result["capacity"], result["local_capacity"]
    alone = result["alone"]

    def row(label: str, side: str, run: dict[str, float]) -> str:
        return (
            f"  {label:<24} {side:<10} {run['turns_per_s']:6.1f} {run['p50_ms']:6.0f} ms "
            f"{run['p90_ms']:6.0f} ms {run['p99_ms']:6.0f} ms {run['max_ms']:6.0f} ms "
            f"{run['late_p99_ms']:6.0f} ms {run['queued']:5.0f} {run['full_gcs']:5.0f}"
        )

    lines = [
        f"Server latency, open loop ({sessions} sessions, Poisson arrivals, seed {SEED}, "
        f"{result['turns']} turns per load; one tool call + answer)",
        "  server and model double share one process and event loop; the HTTP load",
        "  generator runs in its own process; the baseline is runtime.run_turn in the",
        "  server's process on the same schedule; "
        f"{result['frozen_objects']:,} boot objects frozen (gc.freeze)",
        f"  capacity, closed loop x{sessions}: HTTP + SSE {capacity['turns_per_s']:.1f} turns/s"
        f" (p99 {capacity['p99_ms']:.0f} ms), in-process run_turn "
        f"{local['turns_per_s']:.1f} turns/s (p99 {local['p99_ms']:.0f} ms) = HTTP "
        f"{capacity['turns_per_s'] / local['turns_per_s']:.0%}",
        f"  one turn alone ({alone['http']['turns']:.0f} turns): HTTP + SSE p50 "
        f"{alone['http']['p50_ms']:.1f} ms, max {alone['http']['max_ms']:.1f} ms; run_turn p50 "
        f"{alone['in_process']['p50_ms']:.1f} ms, max {alone['in_process']['max_ms']:.1f} ms",
        "  offered load (of HTTP)   path      turns/s    p50       p90       p99       max"
        "   late p99 queued  GCs",
    ]
    verdicts = []
    for load in result["loads"]:
        http, local_run = load["http"], load["in_process"]
        label = f"{load['fraction']:.0%} ({load['offered_per_s']:.1f}/s)"
        lines.append(row(label, "HTTP", http))
        lines.append(row("", "in-process", local_run))
        holds = "holds" if http["p99_ms"] <= TARGET_P99_MS else "misses"
        verdicts.append(
            f"  at {load['fraction']:.0%}: HTTP p99 / in-process p99 = "
            f"{http['p99_ms'] / local_run['p99_ms']:.2f}x; HTTP p99 {http['p99_ms']:.0f} ms "
            f"{holds} the target <= {TARGET_P99_MS:.0f} ms; server CPU "
            f"{http['cpu_ms_per_turn']:.1f} ms/turn HTTP, "
            f"{local_run['cpu_ms_per_turn']:.1f} ms/turn in-process"
        )
    errors = result["server_errors"]
    logged = "; ".join(f"{n}x {m}" for m, n in errors.items()) if errors else "none"
    return "\n".join(
        [
            *lines,
            "  (latency from the scheduled arrival to done; late: scheduled arrival to the",
            "  turn's start; queued: arrivals that found no idle session; GCs: the server",
            "  process's full garbage collections during the run)",
            *verdicts,
            f"  server errors logged: {logged}",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
