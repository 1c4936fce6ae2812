"""Both cores on one machine: ``oracle serve --workers 2`` against one process.

The benchmark oracle (one always-visible tool, the model double in its own process)
served as a user serves it, ``oracle serve`` with 1 and then 2 workers on the embedded
defaults (SQLite, the workers' hub, no Redis), driven by the same load generator in its
own process, in alternating rounds. Prints turns/s, p50/p99 and CPU per turn for each,
and the ratio 2 workers / 1 worker (target >= 1.7x on two cores). The load generator
and the model double share the machine, as in every benchmark here.
"""

from __future__ import annotations

import argparse
import asyncio
from contextlib import AsyncExitStack
from typing import Any

from benchmarks._processes import OracleProcess, cpu_seconds, model_double
from benchmarks.server_throughput import ClientProcess, Run
from oracle_server.testing import auth_headers
from oracle_ucan import Ed25519Signer

SESSIONS = 50
TURNS = 4
ROUNDS = 3
WORKERS = (1, 2)


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

        async def side(workers: int) -> Run:
            oracle, client = served[workers]
            headers = [auth_headers(u, oracle.oracle_did) for u in users]
            await client.prepare({"op": "prepare", "headers": headers})
            before = cpu_seconds(oracle.pids)
            run = await client.run_turns(turns)
            run.cpu_seconds = cpu_seconds(oracle.pids) - before
            return run

        for workers in WORKERS:  # warm-up: imports, every user's database, connections
            await side(workers)
        pooled = {workers: Run() for workers in WORKERS}
        for index in range(rounds):
            for workers in WORKERS if index % 2 == 0 else WORKERS[::-1]:
                pooled[workers].add(await side(workers))
    return {
        "sessions": sessions,
        "turns": turns,
        "rounds": rounds,
        **{str(w): r.figures() for w, r in pooled.items()},
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures with the ratio and its target."""
    lines = [
        f"oracle serve --workers: {result['sessions']} sessions x {result['turns']} turns, "
        f"{result['rounds']} alternating rounds (embedded defaults: SQLite, the workers' hub)",
        "  workers      turns/s      p50      p99  CPU/turn",
    ]
    for workers in WORKERS:
        run = result[str(workers)]
        lines.append(
            f"  {workers:<9} {run['turns_per_s']:10.1f} {run['p50_ms']:6.0f} ms "
            f"{run['p99_ms']:6.0f} ms {run['cpu_ms_per_turn']:6.1f} ms"
        )
    one, two = result["1"], result["2"]
    lines.append(
        f"  2 workers / 1: turns/s {two['turns_per_s'] / one['turns_per_s']:.2f}x "
        f"(target >= 1.70x), p99 {two['p99_ms'] / one['p99_ms']:.2f}x"
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
