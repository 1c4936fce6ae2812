"""``python -m reliability soak|kill``: the long reliability runs, printing their figures.

Exit status 1 when a run fails its criteria (see each module's docstring).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from reliability.kill import kill_runs
from reliability.soak import soak


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m reliability")
    runs = parser.add_subparsers(dest="run", required=True)
    soak_cmd = runs.add_parser("soak", help="concurrent SSE sessions for a while")
    soak_cmd.add_argument("--sessions", type=int, default=1000)
    soak_cmd.add_argument("--seconds", type=float, default=600)
    kill_cmd = runs.add_parser("kill", help="SIGKILL the server mid-stream, restart, check")
    kill_cmd.add_argument("--kills", type=int, default=100)
    kill_cmd.add_argument("--seed", type=int, default=0)
    kill_cmd.add_argument(
        "--matrix", action="store_true", help="the IXO backend on a real Synapse, backups on"
    )
    kill_cmd.add_argument(
        "--redis-url",
        default=os.environ.get("ORACLE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0",
    )
    args = parser.parse_args(argv)
    if args.run == "soak":
        figures = asyncio.run(soak(args.sessions, args.seconds))
        print(figures.report())
        return 0 if not figures.errors and figures.flat() else 1
    result = asyncio.run(
        kill_runs(args.kills, redis_url=args.redis_url, matrix=args.matrix, seed=args.seed)
    )
    print(result.report())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
