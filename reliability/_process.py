"""An oracle served by ``oracle serve`` in a process of its own, to kill and to measure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from oracle_server.testing import free_port

__all__ = ["OracleProcess"]

ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 60.0


class OracleProcess:
    """``oracle serve --app <app>`` on ``127.0.0.1:<port>`` with ``env``.

    The same port is kept across restarts, so clients reconnect to `base_url`. The child
    gets a process group of its own, so a kill takes nothing else with it.

    Args:
        env: The oracle's environment (on top of this process's).
        app: The ``module:factory`` to serve.
        log: Where the server's output goes (appended).
    """

    def __init__(
        self, env: Mapping[str, str], *, app: str = "reliability.app:create_app", log: Path
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # Not under a coverage tracer (``patch = ["subprocess"]`` exports its config to
        # every child): the figures are of the server as it runs, and tracing it made
        # the short soak and kill runs inside make test several times slower.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
        self.env = {
            **inherited,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            **env,
        }
        self.app = app
        self.log = log
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        """The running server's process id."""
        assert self.process is not None, "not started"
        return self.process.pid

    async def start(self) -> None:
        """Start the server and wait until ``/health`` answers.

        Raises:
            RuntimeError: it exited or did not answer within a minute (its log says why).
        """
        oracle = Path(sys.executable).with_name("oracle")
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                str(oracle), "serve", "--app", self.app,
                env=self.env, stdout=out, stderr=out, start_new_session=True,
            )  # fmt: skip
        self.starts += 1
        async with httpx.AsyncClient(base_url=self.base_url, timeout=2) as client:
            deadline = asyncio.get_running_loop().time() + READY_SECONDS
            while asyncio.get_running_loop().time() < deadline:
                if self.process.returncode is not None:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/health")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"reliability.server_not_ready: the oracle did not start:\n{tail}")

    async def kill(self) -> None:
        """SIGKILL the server and wait for it to be gone."""
        if self.process is not None and self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()

    async def stop(self) -> None:
        """SIGTERM the server (a graceful shutdown) and wait, killing it after 30 s."""
        if self.process is None or self.process.returncode is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            await self.kill()

    def rss_bytes(self) -> int:
        """The server's resident memory."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    def open_descriptors(self) -> tuple[int, int]:
        """How many file descriptors the server holds, and how many of them are sockets
        (the rest are files, pipes and event handles), from one listing."""
        folder = f"/proc/{self.pid}/fd"
        names = os.listdir(folder)
        sockets = 0
        for name in names:
            with contextlib.suppress(OSError):  # closed while we looked
                sockets += os.readlink(f"{folder}/{name}").startswith("socket:")
        return len(names), sockets
