"""Both cores on one machine: ``oracle serve --workers 2`` against one process.

The benchmark oracle (one always-visible tool, the model double in its own process)
served as a user serves it, ``oracle serve`` with 1 and then 2 workers on the embedded
defaults (SQLite, the workers' hub, no Redis), driven by the same load generator in its
own process, in alternating rounds. Prints turns/s, p50/p99 and CPU per turn for each,
and the ratio 2 workers / 1 worker (target >= 1.7x on two cores). The load generator
and the model double share the machine, as in every benchmark here, so their CPU per
turn is measured too (``rest``): with ``C`` cores, a server spending ``s`` ms a turn and
the rest ``r`` ms, no deployment can run more than ``C / (s + r)`` turns a second. That
rate over one worker's is the ceiling printed next to the ratio: what 2 workers could
reach on this machine if CPU were the only limit.

``make bench`` runs it twice: 50 sessions x 4 turns, where the load generator's share of
the cores caps 2 workers near 1.45x one, and 4 sessions x 25 turns, where the rest costs
little and the ratio shows how the two workers share the load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from benchmarks._processes import OracleProcess, cpu_seconds, descendants, model_double
from benchmarks.server_throughput import ClientProcess, Run
from oracle_server.testing import auth_headers
from oracle_ucan import Ed25519Signer

SESSIONS = 50
TURNS = 4
ROUNDS = 3
WORKERS = (1, 2)


def _model_pids() -> list[int]:
    """The model double's process (a child of this one)."""
    found = []
    for pid in descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"benchmarks._model_process" in command:
            found.append(pid)
    return found


async def measure(
    sessions: int = SESSIONS, turns: int = TURNS, rounds: int = ROUNDS
) -> dict[str, Any]:
    """Warm both deployments, then alternating rounds; the pooled figures."""
    users = [Ed25519Signer.generate() for _ in range(sessions)]
    async with AsyncExitStack() as stack:
        model_env = await stack.enter_async_context(model_double())
        served: dict[int, tuple[OracleProcess, ClientProcess]] = {}
        for workers in WORKERS:
            oracle = await stack.enter_async_context(
                OracleProcess.serve(model_env, workers=workers)
            )
            client = await stack.enter_async_context(ClientProcess.start(oracle.base_url))
            served[workers] = (oracle, client)
        model = _model_pids()
        rest = dict.fromkeys(WORKERS, 0.0)

        async def side(workers: int) -> Run:
            oracle, client = served[workers]
            headers = [auth_headers(u, oracle.oracle_did) for u in users]
            await client.prepare({"op": "prepare", "headers": headers})
            before, model_before = cpu_seconds(oracle.pids), cpu_seconds(model)
            run = await client.run_turns(turns)
            run.cpu_seconds = cpu_seconds(oracle.pids) - before
            rest[workers] += cpu_seconds(model) - model_before + run.client_cpu_seconds
            return run

        for workers in WORKERS:  # warm-up: imports, every user's database, connections
            await side(workers)
        rest = dict.fromkeys(WORKERS, 0.0)
        pooled = {workers: Run() for workers in WORKERS}
        for index in range(rounds):
            for workers in WORKERS if index % 2 == 0 else WORKERS[::-1]:
                pooled[workers].add(await side(workers))
    figures = {str(w): r.figures() for w, r in pooled.items()}
    for workers, run in pooled.items():
        figures[str(workers)]["rest_ms_per_turn"] = rest[workers] / len(run.latencies) * 1000
    return {
        "sessions": sessions,
        "turns": turns,
        "rounds": rounds,
        "cores": os.cpu_count() or 1,
        **figures,
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures with the ratio and its target."""
    lines = [
        f"oracle serve --workers: {result['sessions']} sessions x {result['turns']} turns, "
        f"{result['rounds']} alternating rounds (embedded defaults: SQLite, the workers' hub)",
        "  workers      turns/s      p50      p99  CPU/turn  rest/turn",
    ]
    for workers in WORKERS:
        run = result[str(workers)]
        lines.append(
            f"  {workers:<9} {run['turns_per_s']:10.1f} {run['p50_ms']:6.0f} ms "
            f"{run['p99_ms']:6.0f} ms {run['cpu_ms_per_turn']:6.1f} ms "
            f"{run['rest_ms_per_turn']:6.1f} ms"
        )
    one, two = result["1"], result["2"]
    ceiling = result["cores"] * 1000 / (two["cpu_ms_per_turn"] + two["rest_ms_per_turn"])
    lines.append(
        f"  2 workers / 1: turns/s {two['turns_per_s'] / one['turns_per_s']:.2f}x "
        f"(target >= 1.70x), p99 {two['p99_ms'] / one['p99_ms']:.2f}x"
    )
    lines.append(
        f"  rest: the model double and the load generator; this machine's ceiling for 2 "
        f"workers: {result['cores']} cores / {two['cpu_ms_per_turn'] + two['rest_ms_per_turn']:.1f}"
        f" ms a turn = {ceiling:.1f} turns/s = {ceiling / one['turns_per_s']:.2f}x one worker"
    )
    return "\n".join(lines)


def main() -> None:
    """``--sessions``, ``--turns``, ``--rounds``: another load than ``make bench``'s."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workers_scaling")
    parser.add_argument("--sessions", type=int, default=SESSIONS)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    print(report(asyncio.run(measure(args.sessions, args.turns, args.rounds))))


if __name__ == "__main__":
    main()
