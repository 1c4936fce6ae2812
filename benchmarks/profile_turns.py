"""Profile mode: where the server's time goes in one HTTP turn and under 50 sessions.

``python -m benchmarks.profile_turns [--sessions 50] [--turns 4] [--alone 30] [--top 10]
[--out benchmarks/out]`` serves the benchmark oracle (``_oracle_process``: the clock
plugin, local backend) against the model double in its own process, drives it from the
load generator's own process (``_load_client``), and runs cProfile on the server's event
loop thread for two phases after a warm-up:

- ``alone``: turns one at a time in one session (one HTTP turn, repeated for a sample);
- ``concurrent``: ``--sessions`` sessions streaming ``--turns`` turns each at once.

Each phase writes ``<out>/profile-<phase>.prof`` (for ``snakeviz`` or ``pstats``) and
``<out>/profile-<phase>.txt``: the functions sorted by their own time, then by cumulative
time, with the phase's turns and the server's CPU per turn, profiled. The top ``--top`` of
the first table are printed. cProfile slows the profiled thread down (about 2x) and sees
neither SQLite's threads nor native code: the ranking is the point, not the times.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import pstats
from pathlib import Path

from benchmarks._processes import OracleProcess, cpu_seconds, model_double
from benchmarks.server_throughput import ClientProcess
from oracle_server.testing import auth_headers
from oracle_ucan import Ed25519Signer

OUT = Path(__file__).resolve().parent / "out"


def table(path: Path, turns: int, lines: int) -> str:
    """The stats at ``path`` as two sorted tables (own time, cumulative time)."""
    text = io.StringIO()
    stats = pstats.Stats(str(path), stream=text)
    stats.strip_dirs()
    text.write(f"{turns} turns\n\n== by own time (tottime) ==\n")
    stats.sort_stats("tottime").print_stats(lines)
    text.write("\n== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(lines)
    return text.getvalue()


def top(path: Path, count: int, turns: int) -> list[str]:
    """The ``count`` functions with the most own time: share of the profile, us per turn."""
    stats = pstats.Stats(str(path))
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values())
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:count]
    rows = []
    for (filename, line, name), (_, calls, own, _, _) in ranked:
        where = f"{Path(filename).name}:{line}" if line else filename
        rows.append(
            f"    {own / total:6.1%} {own / turns * 1e6:8.0f} us/turn "
            f"{calls / turns:7.1f} calls/turn  {name} ({where})"
        )
    return rows


async def measure(sessions: int, turns: int, alone: int, out: Path, count: int) -> list[str]:
    """Run both phases under the profiler; the report's lines."""
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    users = [Ed25519Signer.generate() for _ in range(sessions)]
    lines = []
    async with model_double() as model_env, OracleProcess.start(model_env) as oracle:
        headers = [auth_headers(user, oracle.oracle_did) for user in users]
        async with ClientProcess.start(oracle.base_url) as client:
            await client.run(headers, 1)  # warm-up: every user's database and caches
            phases = {"alone": (headers[:1], alone), "concurrent": (headers, turns)}
            for phase, (phase_headers, phase_turns) in phases.items():
                prof = out / f"profile-{phase}.prof"
                await oracle.profile()
                cpu = cpu_seconds(oracle.pids)
                run = await client.run(phase_headers, phase_turns)
                cpu = cpu_seconds(oracle.pids) - cpu
                await oracle.dump(prof)
                done = len(run.latencies)
                text = table(prof, done, 60)
                (out / f"profile-{phase}.txt").write_text(
                    f"server CPU {cpu / done * 1000:.1f} ms/turn (profiled)\n{text}"
                )
                lines.append(
                    f"  {phase}: {done} turns, {len(phase_headers)} session(s) at once, "
                    f"server CPU {cpu / done * 1000:.1f} ms/turn (profiled); "
                    f"top {count} by own time:"
                )
                lines += top(prof, count, done)
                lines.append(f"    tables: {out / f'profile-{phase}.txt'}")
    return lines


def main() -> None:
    """Parse the arguments, profile, print the top of each phase."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_turns")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--alone", type=int, default=30)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    print(
        "Profile of the server's event loop thread"
        " (cProfile; HTTP + SSE turns, one tool call + answer)"
    )
    lines = asyncio.run(measure(args.sessions, args.turns, args.alone, args.out, args.top))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
