"""An oracle serving the benchmark agent in a process of its own.

``python -m benchmarks._oracle_process <port> <model-env-json> [<data-dir>]`` boots an
oracle with the clock plugin (one always-visible tool, ``city_time``) whose model is the
double at ``<model-env-json>`` (``_model_process``'s line), serves it with Hypercorn on
``127.0.0.1:<port>`` as ``oracle serve`` does (boot objects frozen), and writes one JSON
line on stdout once it listens: ``{"oracle_did": ...}``.

Commands on stdin, one per line, each answered with ``ok``: ``profile`` starts cProfile
on the event loop's thread, ``dump <path>`` stops it and writes its stats to ``<path>``.
EOF on stdin shuts the server down.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import sys
import tempfile

from oracle_server import OracleApp, create_oracle_app, run
from oracle_server.testing import ClockPlugin

_PASSED = ("TURN_CONCURRENCY", "TURN_ADMISSION", "EVENT_LOOP")


async def create_app(model_env: dict[str, str], data_dir: str) -> OracleApp:
    """The benchmark oracle: the clock plugin, local backend, no throttle in the way."""
    return await create_oracle_app(
        {"name": "Benchmark Oracle"},
        plugins=[ClockPlugin()],
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": data_dir,
            "THROTTLE_LIMIT": "1000000",
            # The server's own settings, when the benchmark is run with them set.
            **{k: v for k, v in os.environ.items() if k in _PASSED},
            **model_env,
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )


async def create_served_app() -> OracleApp:
    """The benchmark oracle for ``oracle serve --app benchmarks._oracle_process:create_served_app``
    (``--workers N``): the model double's variables in ``BENCH_MODEL_ENV`` (JSON), the data
    under ``SQLITE_DATABASE_PATH``."""
    model_env: dict[str, str] = json.loads(os.environ["BENCH_MODEL_ENV"])
    return await create_app(model_env, os.environ["SQLITE_DATABASE_PATH"])


async def _listening(port: int) -> None:
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        await writer.wait_closed()
        return


async def _commands(stop: asyncio.Event) -> None:
    profiler: cProfile.Profile | None = None
    while line := await asyncio.to_thread(sys.stdin.readline):
        command, _, argument = line.strip().partition(" ")
        if command == "profile":
            profiler = cProfile.Profile()
            profiler.enable()
        elif command == "dump" and profiler is not None:
            profiler.disable()
            profiler.dump_stats(argument)
            profiler = None
        sys.stdout.write("ok\n")
        sys.stdout.flush()
    stop.set()


async def main(port: int, model_env: dict[str, str], data_dir: str) -> None:
    """Serve until stdin closes."""
    app = await create_app(model_env, data_dir)
    stop = asyncio.Event()
    server = asyncio.create_task(app.serve(host="127.0.0.1", port=port, shutdown_trigger=stop.wait))
    await _listening(port)
    sys.stdout.write(json.dumps({"oracle_did": app.state.oracle_did}) + "\n")
    sys.stdout.flush()
    await _commands(stop)
    await server


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        directory = sys.argv[3] if len(sys.argv) > 3 else tmp
        run(main(int(sys.argv[1]), json.loads(sys.argv[2]), directory))
