"""Boot time with 100 synthetic plugins, against the cost of importing langgraph alone.

Both sides run in fresh interpreters so neither benefits from a warm import: the baseline
imports ``langgraph.graph``; the measured side imports oracle-core and boots a runtime with
100 plugins (200 tools). The boot itself is also timed inside the process, imports done.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any

RUNS = 5

_BASELINE = (
    "import time; t=time.perf_counter(); import langgraph.graph; print(time.perf_counter()-t)"
)

_BOOT = r"""
import asyncio, json, tempfile, time
t0 = time.perf_counter()
from pathlib import Path
from benchmarks._common import local_env
from benchmarks.synthetic import synthetic_plugins
from oracle_core import create_runtime
t1 = time.perf_counter()

async def main():
    with tempfile.TemporaryDirectory() as tmp:
        plugins = synthetic_plugins(always=10, on_demand=90)
        t2 = time.perf_counter()
        runtime = await create_runtime(
            {"name": "Boot Benchmark"}, plugins=plugins, env=local_env(Path(tmp)),
            discover_entry_points=False,
        )
        t3 = time.perf_counter()
        await runtime.aclose()
        return t2, t3

t2, t3 = asyncio.run(main())
print(json.dumps({"import": t1 - t0, "boot": t3 - t2, "total": t3 - t0}))
"""


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    return out.stdout.strip().splitlines()[-1]


def measure(runs: int = RUNS) -> dict[str, Any]:
    """Median seconds of each side over ``runs`` fresh interpreters."""
    baseline = [float(_run(_BASELINE)) for _ in range(runs)]
    boots = [json.loads(_run(_BOOT)) for _ in range(runs)]
    return {
        "langgraph_import_s": statistics.median(baseline),
        "oracle_import_s": statistics.median(b["import"] for b in boots),
        "boot_100_plugins_s": statistics.median(b["boot"] for b in boots),
        "import_and_boot_s": statistics.median(b["total"] for b in boots),
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    base = result["langgraph_import_s"]
    boot = result["boot_100_plugins_s"]
    return (
        f"Boot time ({RUNS} fresh interpreters each, medians)\n"
        f"  import langgraph.graph alone:       {base * 1000:.0f} ms\n"
        f"  import oracle_core (+ benchmarks):  {result['oracle_import_s'] * 1000:.0f} ms\n"
        f"  boot with 100 plugins (200 tools):  {boot * 1000:.0f} ms "
        f"= {boot / base:.2f}x the langgraph import\n"
        f"  import + boot:                      {result['import_and_boot_s'] * 1000:.0f} ms "
        f"= {result['import_and_boot_s'] / base:.2f}x"
    )


if __name__ == "__main__":
    start = time.perf_counter()
    print(report(measure()))
