"""``python -m oracle_sandbox``: serve the embedded sandbox on loopback.

The oracle starts it with ``SANDBOX_BACKEND=embedded``. The token callers must present
is read from ``ORACLE_SANDBOX_TOKEN`` (never from the command line, which every local
user can read). It serves until it gets SIGTERM or SIGINT; it exits 3 when the machine
cannot isolate runs, with the reason on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from oracle_sandbox._isolation import BubblewrapSandbox, SandboxLimits, SandboxUnavailableError
from oracle_sandbox._server import serve_sandbox
from oracle_sandbox._skills import SkillCache

TOKEN_VARIABLE = "ORACLE_SANDBOX_TOKEN"
EXIT_UNAVAILABLE = 3


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m oracle_sandbox")
    parser.add_argument("--root", required=True, type=Path, help="where workspaces live")
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--registry", default=None, help="the skills capsule registry")
    parser.add_argument("--wall-seconds", type=float, default=SandboxLimits.wall_seconds)
    parser.add_argument("--cpu-seconds", type=int, default=SandboxLimits.cpu_seconds)
    parser.add_argument("--memory-mb", type=int, default=SandboxLimits.memory_bytes >> 20)
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace, token: str) -> None:
    limits = SandboxLimits(
        wall_seconds=args.wall_seconds,
        cpu_seconds=args.cpu_seconds,
        memory_bytes=args.memory_mb << 20,
    )
    sandbox = BubblewrapSandbox(args.root / "workspaces", limits=limits)
    skills = SkillCache(args.root / "skills", args.registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve_sandbox(
        sandbox,
        token=token,
        skills=skills,
        host=args.host,
        port=args.port,
        shutdown_trigger=stop.wait,
    )


def main(argv: list[str] | None = None) -> int:
    """Serve until told to stop."""
    args = _arguments(argv)
    token = os.environ.pop(TOKEN_VARIABLE, "")
    if len(token) < 16:
        print(f"{TOKEN_VARIABLE} must hold the callers' token (16+ characters)", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, token))
    except SandboxUnavailableError as exc:
        print(f"oracle-sandbox: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
