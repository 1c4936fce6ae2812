"""The supervisor of ``oracle serve --workers N``, in a process image of its own.

The command checks the settings and makes the signing key, then replaces itself with
``python -m oracle_server._workers SPEC`` (``os.execv``: the same process, the same
signals): the supervisor holds the hub for every worker, and this image loads only the
hub's modules, not the runtime and the server a worker loads (about 30 MiB instead of
about 150). ``SPEC`` is JSON: ``argv``, ``stop_seconds``, ``workers``, ``host``,
``port``, ``banner``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable

from oracle_server._workers.supervisor import WorkerCommand, supervise, worker_env


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # EVENT_LOOP was checked by the command before it handed over.
    if os.environ.get("EVENT_LOOP", "uvloop") != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str]) -> int:
    """Supervise as ``argv[0]`` (the JSON spec) says; the exit status."""
    spec = json.loads(argv[0])
    command = WorkerCommand(
        argv=list(spec["argv"]),
        env=worker_env(os.environ),
        stop_seconds=float(spec["stop_seconds"]),
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(
            supervise(
                command,
                workers=int(spec["workers"]),
                host=str(spec["host"]),
                port=int(spec["port"]),
                banner=str(spec["banner"]),
            )
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
