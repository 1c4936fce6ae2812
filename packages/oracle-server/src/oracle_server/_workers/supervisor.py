"""``oracle serve --workers N``: N processes serving one port, sharing one hub.

The supervisor starts N copies of ``oracle serve``, each inheriting the port's one
listening socket, the workers' load board and one end of a socket pair to the hub this
process holds (:mod:`oracle_server._workers.hub`). It boots no oracle of its own: its
work is the hub, and starting, stopping and replacing workers.

- Each worker accepts one connection at a time and lets a less busy worker take the next
  (:mod:`oracle_server._workers.accept`): connections go to the worker holding the fewest.
- A worker that dies stops accepting; the connections waiting on the socket are taken by
  the others while it is replaced, and its slot on the board is marked absent.

- It prints the banner once every worker serves; a worker that exits before that stops
  the others, and ``oracle serve`` exits with that worker's code (a bad setting fails
  once, not N times in a loop).
- A worker that dies later is replaced, after 1 s doubling up to 30 s while they keep
  dying; its turns were given back and its runs ended by the hub.
- ``SIGTERM`` / ``SIGINT`` reach every worker, which drains its turns as a single
  process does; one that has not stopped after the drain and Hypercorn's grace is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oracle_server._workers.accept import LoadBoard
from oracle_server._workers.hub import WorkerHub

__all__ = ["WORKER_VARIABLES", "WorkerCommand", "supervise", "worker_env"]

WORKER_VARIABLES = (
    "ORACLE_WORKER_INDEX",
    "ORACLE_WORKER_HUB_FD",
    "ORACLE_WORKER_LISTEN_FD",
    "ORACLE_WORKER_LOAD_FD",
)
"""What the supervisor sets for each worker it starts."""

logger = logging.getLogger("oracle.server.workers")

_RESTART_FIRST_SECONDS = 1.0
_RESTART_MAX_SECONDS = 30.0
# A worker that served this long before dying was healthy: the next restart is quick.
_HEALTHY_SECONDS = 30.0


@dataclass(frozen=True)
class WorkerCommand:
    """How to start one worker.

    Attributes:
        argv: The ``oracle serve`` arguments (``--app`` …), passed to every worker.
        env: The workers' environment (``os.environ`` and the settings' defaults).
        stop_seconds: How long a stopping worker may take before it is killed.
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    stop_seconds: float


_BACKLOG = 2048
"""The port's listen backlog (the kernel caps it at ``somaxconn``)."""


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Shared:
    """What every worker inherits: the port's listening socket and the load board."""

    listener: socket.socket
    board: LoadBoard

    def descriptors(self) -> tuple[int, int]:
        """Both descriptors, inheritable: every worker gets the same two."""
        for fd in (self.listener.fileno(), self.board.fileno()):
            os.set_inheritable(fd, True)
        return self.listener.fileno(), self.board.fileno()


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.process: asyncio.subprocess.Process | None = None
        self.started = 0.0
        self.backoff = _RESTART_FIRST_SECONDS
        self.ready: asyncio.Event | None = None


async def supervise(
    command: WorkerCommand, *, workers: int, host: str, port: int, banner: str
) -> int:
    """Serve ``host:port`` with ``workers`` processes until ``SIGTERM`` or ``SIGINT``.

    Args:
        command: How to start a worker.
        workers: How many (at least 2; one process needs no supervisor).
        host: The address to bind.
        port: The port to bind.
        banner: Printed once every worker serves.

    Returns:
        The exit status: 0 after a stop, else the code of a worker that failed to boot.
    """
    shared = _Shared(_listening(host, port), LoadBoard.create(workers))
    hub = WorkerHub()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    slots = [_Worker(i) for i in range(workers)]
    try:
        for slot in slots:
            await _start(slot, command, hub, shared)
        failed = await _all_ready(slots, stop)
        if failed is not None:
            return failed
        print(banner, flush=True)
        await _keep_running(slots, command, hub, shared, stop)
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await _stop_all(slots, command.stop_seconds)
        await hub.aclose()
        shared.listener.close()
        shared.board.close()


async def _start(slot: _Worker, command: WorkerCommand, hub: WorkerHub, shared: _Shared) -> None:
    listen_fd, load_fd = shared.descriptors()
    ours, theirs = socket.socketpair()
    env = {
        **command.env,
        "ORACLE_WORKER_INDEX": str(slot.index),
        "ORACLE_WORKER_HUB_FD": str(theirs.fileno()),
        "ORACLE_WORKER_LISTEN_FD": str(listen_fd),
        "ORACLE_WORKER_LOAD_FD": str(load_fd),
    }
    try:
        slot.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "oracle_server",
            "serve",
            *command.argv,
            env=env,
            pass_fds=(theirs.fileno(), listen_fd, load_fd),
        )
    finally:
        theirs.close()
    slot.started = time.monotonic()
    slot.ready = (await hub.attach(ours))()


async def _all_ready(slots: Sequence[_Worker], stop: asyncio.Event) -> int | None:
    """Wait until every worker serves; the exit code of the first that exits first."""
    readiness: set[asyncio.Future[Any]] = set()
    exits: dict[asyncio.Future[Any], _Worker] = {}
    for slot in slots:
        assert slot.process is not None
        assert slot.ready is not None
        readiness.add(asyncio.ensure_future(slot.ready.wait()))
        exits[asyncio.ensure_future(slot.process.wait())] = slot
    stopping = asyncio.ensure_future(stop.wait())
    try:
        pending: set[asyncio.Future[Any]] = {*readiness, *exits, stopping}
        while not all(task.done() for task in readiness):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return 0
            for task in done & exits.keys():
                code = int(task.result())
                logger.error(
                    "workers.boot_failed: worker %d exited with %d before serving",
                    exits[task].index,
                    code,
                )
                return code or 1
        return None
    finally:
        for task in (*readiness, *exits, stopping):
            task.cancel()


async def _keep_running(
    slots: Sequence[_Worker],
    command: WorkerCommand,
    hub: WorkerHub,
    shared: _Shared,
    stop: asyncio.Event,
) -> None:
    """Replace workers that die, until told to stop."""
    exits = {asyncio.ensure_future(_exited(slot)): slot for slot in slots}
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            done, _ = await asyncio.wait({*exits, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return
            for task in done:
                slot = exits.pop(task)
                shared.board.absent(slot.index)  # the others stop deferring to it
                served = time.monotonic() - slot.started
                if served >= _HEALTHY_SECONDS:
                    slot.backoff = _RESTART_FIRST_SECONDS
                logger.error(
                    "workers.worker_exited: worker %d exited with %s after %.0f s; "
                    "restarting in %.0f s",
                    slot.index,
                    task.result(),
                    served,
                    slot.backoff,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), slot.backoff)
                if stop.is_set():
                    return
                slot.backoff = min(slot.backoff * 2, _RESTART_MAX_SECONDS)
                await _start(slot, command, hub, shared)
                exits[asyncio.ensure_future(_exited(slot))] = slot
    finally:
        for task in (*exits, stopping):
            task.cancel()


async def _exited(slot: _Worker) -> int:
    assert slot.process is not None
    return await slot.process.wait()


async def _stop_all(slots: Sequence[_Worker], stop_seconds: float) -> None:
    running = [s.process for s in slots if s.process is not None and s.process.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    waiting = [asyncio.ensure_future(p.wait()) for p in running]
    if not waiting:
        return
    _, late = await asyncio.wait(waiting, timeout=stop_seconds)
    for process in running:
        if process.returncode is None:
            logger.error("workers.kill: worker pid %d did not stop in time", process.pid)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    await asyncio.gather(*late, return_exceptions=True)


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables a supervisor sets per worker (a nested supervisor's)."""
    return {k: v for k, v in env.items() if k not in WORKER_VARIABLES} | {
        "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1")
    }
