"""Benchmark parts in processes of their own: the model double, an oracle, and what a
process costs (CPU seconds, resident memory) read from ``/proc``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from oracle_server.testing import free_port

# Where `python -m benchmarks.<module>` finds the `benchmarks` package.
REPOSITORY = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids`` so far, every thread included."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


def rss_bytes(pids: Sequence[int], *, peak: bool = False) -> int:
    """Resident memory of ``pids``: now, or each process's peak (``VmHWM``), summed."""
    key = "VmHWM:" if peak else "VmRSS:"
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                total += int(line.split()[1]) * 1024
    return total


def pss_bytes(pids: Sequence[int]) -> int:
    """Proportional memory of ``pids`` now, summed (``Pss`` in ``smaps_rollup``): a page
    shared by several of them counts once in all, where ``rss_bytes`` counts it in each."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (a server that forks workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(children.get(current, []))
    return found


class LineProcess:
    """A child process that talks JSON or plain lines over its stdin and stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    @classmethod
    @asynccontextmanager
    async def start(
        cls,
        *argv: str,
        env: dict[str, str] | None = None,
        cwd: str | Path = REPOSITORY,
        quiet: bool = False,
    ) -> AsyncIterator[LineProcess]:
        """Start ``argv``; close its stdin and wait for it after the block.

        ``env`` is added to this process's environment; ``quiet`` drops the child's
        output (its stdout is then not read).
        """
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL if quiet else asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL if quiet else None,
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            limit=2**24,
        )
        try:
            yield cls(process)
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                process.kill()
                await process.wait()

    async def line(self) -> str:
        """The next line the child writes.

        Raises:
            RuntimeError: The child exited first.
        """
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.process!r} exited ({await self.process.wait()})")
        return line.decode().strip()

    async def ask(self, command: str) -> str:
        """Write ``command`` as a line; the child's answering line."""
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        return await self.line()


@asynccontextmanager
async def model_double() -> AsyncIterator[dict[str, str]]:
    """The model double in its own process; yields the provider environment for it."""
    async with LineProcess.start(sys.executable, "-m", "benchmarks._model_process") as child:
        env: dict[str, str] = json.loads(await child.line())
        yield env


class OracleProcess:
    """An oracle served by ``benchmarks._oracle_process``."""

    def __init__(self, child: LineProcess, base_url: str, oracle_did: str) -> None:
        self.child = child
        self.base_url = base_url
        self.oracle_did = oracle_did

    @classmethod
    @asynccontextmanager
    async def start(cls, model_env: dict[str, str]) -> AsyncIterator[OracleProcess]:
        """Boot and serve the benchmark oracle; shut it down after the block."""
        port = free_port()
        async with LineProcess.start(
            sys.executable, "-m", "benchmarks._oracle_process", str(port), json.dumps(model_env)
        ) as child:
            ready = json.loads(await child.line())
            yield cls(child, f"http://127.0.0.1:{port}", ready["oracle_did"])

    @classmethod
    @asynccontextmanager
    async def serve(
        cls, model_env: dict[str, str], *, workers: int
    ) -> AsyncIterator[OracleProcess]:
        """The benchmark oracle under ``oracle serve --workers <workers>`` (one process
        when 1), as a user starts it; shut down after the block."""
        import tempfile

        from oracle_ucan import Ed25519Signer

        port = free_port()
        with tempfile.TemporaryDirectory() as data:
            env = {
                "BENCH_MODEL_ENV": json.dumps(model_env),
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": data,
                "PYTHONPATH": str(REPOSITORY),
            }
            command = ["serve", "--port", str(port), "--workers", str(workers)]
            app = "benchmarks._oracle_process:create_served_app"
            async with LineProcess.start(
                sys.executable, "-m", "oracle_server", *command, "--app", app, env=env
            ) as child:
                try:
                    await child.line()  # the banner, once every worker serves
                    key = (Path(data) / "oracle-dev-key.txt").read_text().strip()
                    yield cls(child, f"http://127.0.0.1:{port}", Ed25519Signer.parse(key).did())
                finally:
                    child.process.send_signal(signal.SIGTERM)

    @property
    def pids(self) -> list[int]:
        """The server's processes."""
        return descendants(self.child.pid)

    async def profile(self) -> None:
        """Start profiling the server's event loop thread."""
        await self.child.ask("profile")

    async def dump(self, path: Path) -> None:
        """Stop profiling; the stats go to ``path``."""
        await self.child.ask(f"dump {path}")
