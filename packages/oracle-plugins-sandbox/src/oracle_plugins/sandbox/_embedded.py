"""The embedded sandbox: the ``oracle-sandbox`` server, started and stopped with the oracle.

It runs as a child process (``python -m oracle_sandbox``) on a loopback port, so model
code never runs in the oracle's process, and a crash of the sandbox server is not a crash
of the oracle. A fresh token is made at each start and handed over in the child's
environment; the plugin presents it with each request, naming the user the call is for.
Before starting, the machine is checked: without bubblewrap the oracle refuses to start,
with a message naming the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from oracle_sandbox import BubblewrapSandbox, SandboxUnavailableError

__all__ = ["EmbeddedSandbox", "EmbeddedSettings"]

TOKEN_VARIABLE = "ORACLE_SANDBOX_TOKEN"
_START_SECONDS = 30.0
_STOP_SECONDS = 10.0


@dataclass(frozen=True)
class EmbeddedSettings:
    """How the embedded sandbox is started.

    Attributes:
        root: Its folder (workspaces and unpacked skills).
        registry: The skills capsule registry, when the oracle has one.
        wall_seconds: Real time a run may take.
        cpu_seconds: CPU time a run may use.
        memory_mb: Address space of each process of a run.
    """

    root: Path
    registry: str | None = None
    wall_seconds: float = 60.0
    cpu_seconds: int = 30
    memory_mb: int = 1024


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmbeddedSandbox:
    """One running ``oracle-sandbox`` server.

    Attributes:
        url: Its MCP endpoint, once started.
        token: What requests present as ``Authorization: Bearer <token>``.
        started_in: Seconds from :meth:`start` to the server answering.
    """

    def __init__(self, settings: EmbeddedSettings, logger: logging.Logger) -> None:
        self.settings = settings
        self.logger = logger
        self.token = secrets.token_urlsafe(32)
        self.url = ""
        self.started_in = 0.0
        self._process: asyncio.subprocess.Process | None = None
        self._stderr: asyncio.Task[None] | None = None
        self._last_error = ""

    async def start(self) -> None:
        """Start the server and wait until it answers.

        Raises:
            SandboxUnavailableError: the machine cannot isolate runs (no bubblewrap: the
                message names the package), or the server did not come up.
        """
        began = time.monotonic()
        root = self.settings.root
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o711)
        # Checked here first, so the refusal reads the same as the server's own.
        BubblewrapSandbox(root / "workspaces").check()
        port = _free_port()
        command = [
            sys.executable, "-m", "oracle_sandbox",
            "--root", str(root), "--port", str(port),
            "--wall-seconds", str(self.settings.wall_seconds),
            "--cpu-seconds", str(self.settings.cpu_seconds),
            "--memory-mb", str(self.settings.memory_mb),
        ]  # fmt: skip
        if self.settings.registry:
            command += ["--registry", self.settings.registry]
        # Only what the server needs: none of the oracle's own secrets.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            TOKEN_VARIABLE: self.token,
        }
        self._process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._stderr = asyncio.create_task(self._relay_stderr())
        origin = f"http://127.0.0.1:{port}"
        try:
            await self._wait_until_up(origin)
        except BaseException:
            await self.stop()
            raise
        self.url = f"{origin}/mcp/"
        self.started_in = time.monotonic() - began
        self.logger.info("sandbox: embedded sandbox up in %.2f s", self.started_in)

    async def _wait_until_up(self, origin: str) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + _START_SECONDS
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if process.returncode is not None:
                    if self._stderr is not None:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(self._stderr, timeout=2)
                    raise SandboxUnavailableError(
                        self._last_error or f"the embedded sandbox exited ({process.returncode})"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{origin}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise SandboxUnavailableError(
            f"the embedded sandbox did not answer within {_START_SECONDS:g} s"
        )

    async def _relay_stderr(self) -> None:
        process = self._process
        assert process is not None
        assert process.stderr is not None
        while line := await process.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self._last_error = text.removeprefix("oracle-sandbox: ")
                self.logger.warning("sandbox server: %s", text[:500])

    async def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a while)."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=_STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._stderr is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._stderr, timeout=2)
            self._stderr = None
