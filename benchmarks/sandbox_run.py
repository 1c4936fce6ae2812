"""The embedded sandbox: one ``sandbox_run`` against the same command run directly, and
the time from starting the oracle's sandbox (``SANDBOX_BACKEND=embedded``) to its first
run.

Three ways to run ``CODE`` (a short shell pipeline), each ``RUNS`` times, medians:

- directly: ``sh -c CODE`` as a subprocess of this process (the baseline);
- isolated: ``BubblewrapSandbox.run`` (limits, a fresh bubblewrap sandbox per run);
- through MCP: ``sandbox_run`` called with the oracle's MCP client on the embedded
  sandbox server the plugin starts (``python -m oracle_sandbox`` on loopback).

Boot to first run: a fresh embedded sandbox started (its child process, the bubblewrap
check, health), then one ``sandbox_run`` answered, ``BOOTS`` times.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable

from oracle_mcp import McpClient
from oracle_plugins.sandbox._embedded import EmbeddedSandbox, EmbeddedSettings
from oracle_sandbox import BubblewrapSandbox
from oracle_sandbox.testing import ensure_bubblewrap, reachable_folder

CODE = "echo start; seq 1 200 | sort -n | tail -1"
RUNS = 40
BOOTS = 5
USER = "did:key:z6MkBenchmarkUser"
LOGGER = logging.getLogger("benchmarks.sandbox_run")


async def _direct() -> float:
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", CODE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await process.communicate()
    return time.perf_counter() - began


async def _median(run: Callable[[], Awaitable[float]], count: int) -> float:
    await run()  # warm
    return statistics.median([await run() for _ in range(count)])


async def measure() -> dict[str, float]:
    """The figures (seconds)."""
    ensure_bubblewrap()
    root = reachable_folder("oracle-sandbox-bench-")
    try:
        direct = await _median(_direct, RUNS)
        sandbox = BubblewrapSandbox(root / "isolated")

        async def isolated() -> float:
            began = time.perf_counter()
            await sandbox.run(USER, CODE)
            return time.perf_counter() - began

        isolated_s = await _median(isolated, RUNS)
        embedded = EmbeddedSandbox(EmbeddedSettings(root=root / "embedded"), LOGGER)
        await embedded.start()
        client = McpClient(embedded.url, name="sandbox")
        headers = {"Authorization": f"Bearer {embedded.token}", "X-Sandbox-User": USER}
        try:

            async def through_mcp() -> float:
                began = time.perf_counter()
                await client.call_tool("sandbox_run", {"code": CODE}, headers)
                return time.perf_counter() - began

            mcp_s = await _median(through_mcp, RUNS)
        finally:
            await client.aclose()
            await embedded.stop()
        boots = []
        for index in range(BOOTS):
            began = time.perf_counter()
            fresh = EmbeddedSandbox(EmbeddedSettings(root=root / f"boot{index}"), LOGGER)
            await fresh.start()
            first = McpClient(fresh.url, name="sandbox")
            try:
                token = {"Authorization": f"Bearer {fresh.token}", "X-Sandbox-User": USER}
                await first.call_tool("sandbox_run", {"code": CODE}, token)
                boots.append(time.perf_counter() - began)
            finally:
                await first.aclose()
                await fresh.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "direct": direct,
        "isolated": isolated_s,
        "mcp": mcp_s,
        "boot_to_first_run": statistics.median(boots),
        "boot_max": max(boots),
    }


def report(figures: dict[str, float]) -> str:
    """The figures as text."""
    direct = figures["direct"]
    return "\n".join(
        [
            f"Embedded sandbox: one run of `{CODE}` (median of {RUNS})",
            f"  directly (sh -c, subprocess):        {direct * 1000:7.1f} ms",
            f"  isolated (BubblewrapSandbox.run):    {figures['isolated'] * 1000:7.1f} ms"
            f"  ({figures['isolated'] / direct:.1f}x direct)",
            f"  sandbox_run through MCP (embedded):  {figures['mcp'] * 1000:7.1f} ms"
            f"  ({figures['mcp'] / direct:.1f}x direct,"
            f" {figures['mcp'] / figures['isolated']:.2f}x isolated)",
            f"  start to first run answered:         {figures['boot_to_first_run']:7.2f} s"
            f" median of {BOOTS} (max {figures['boot_max']:.2f} s)",
        ]
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
