"""A worker's share of the port: one listening socket for all, fewest connections first.

Every worker of ``oracle serve --workers N`` accepts on the same listening socket, one
connection at a time, and a worker holding more open connections than the least busy
other one steps aside for a moment so that one takes the next. Both ways the kernel
offers fall short of this:

- One socket shared by all, accepted on by Hypercorn (``asyncio.start_server``): every
  worker is woken by a new connection and the first awake accepts every connection then
  waiting (a burst of 64 went 42/22).
- A socket per worker (``SO_REUSEPORT``): the kernel picks by a hash of the addresses and
  knows nothing of load; 200 connections at once went 119/74, 122/74 and 91/109 in three
  runs, and a round ended when the busier worker finished, the other's core idle.

So the accept loop is this module's, and the connections it accepts are served by
Hypercorn's own connection handler (``TCPServer``), with Hypercorn's lifespan and worker
context, as ``hypercorn.asyncio.serve`` serves them: everything after ``accept`` is
Hypercorn's. :func:`serve_shared_port` is the part of Hypercorn's ``worker_serve`` that
does not start a server of its own; its shutdown keeps Hypercorn's order (stop
accepting, mark the context terminated, wait up to ``graceful_timeout`` for the open
connections, then the lifespan's shutdown).

The counts live in a :class:`LoadBoard`: a few bytes of memory every worker maps, one
slot per worker written only by that worker (and by the supervisor once it is dead).
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["LoadBoard", "serve_shared_port"]

_ABSENT = -1
"""A slot whose worker is not accepting (not started, stopping or dead)."""

_SLACK = 1
"""How many more open connections than the least busy other worker a worker may hold
before it steps aside."""

_STEP_ASIDE_SECONDS = 0.002
_STEP_ASIDE_TIMES = 5
"""A worker ahead of the others waits up to 10 ms in steps of 2 ms, then accepts anyway:
a stuck worker (its count no longer moves) costs the others at most that per connection."""


class LoadBoard:
    """How many connections each worker of one machine holds open, in shared memory.

    The supervisor makes it (:meth:`create`) and hands its descriptor to every worker,
    which maps the same memory (:meth:`attach`). Slot ``i`` is written only by worker
    ``i`` while it runs, and by the supervisor after it died, so no lock is needed: an
    aligned 8-byte store is atomic on the platforms this runs on, and a reader that sees
    a count one step old only picks a slightly worse worker for one connection.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._memory = mmap.mmap(fd, 0)
        self._counts = memoryview(self._memory).cast("q")

    @classmethod
    def create(cls, workers: int) -> LoadBoard:
        """A board of ``workers`` slots, none accepting yet (Linux: ``memfd_create``)."""
        fd = os.memfd_create("oracle-worker-load")
        os.ftruncate(fd, 8 * workers)
        board = cls(fd)
        for index in range(workers):
            board._counts[index] = _ABSENT
        return board

    @classmethod
    def attach(cls, fd: int) -> LoadBoard:
        """The board behind ``fd``, inherited from the supervisor."""
        return cls(fd)

    def fileno(self) -> int:
        """The descriptor a worker inherits."""
        return self._fd

    def __len__(self) -> int:
        return len(self._counts)

    def absent(self, index: int) -> None:
        """Worker ``index`` accepts no more (stopping, or dead)."""
        self._counts[index] = _ABSENT

    def hold(self, index: int, connections: int) -> None:
        """Worker ``index`` now holds ``connections`` open connections."""
        self._counts[index] = connections

    def counts(self) -> list[int]:
        """Each worker's open connections; ``-1`` for one not accepting."""
        return list(self._counts)

    def ahead(self, index: int) -> bool:
        """Whether worker ``index`` holds more than ``_SLACK`` connections beyond the
        least busy other accepting worker (it should let that one take the next)."""
        mine = self._counts[index]
        others = [c for i, c in enumerate(self._counts) if i != index and c != _ABSENT]
        return bool(others) and mine - min(others) > _SLACK

    def close(self) -> None:
        """Unmap the board and close its descriptor (idempotent)."""
        if self._fd < 0:
            return
        self._counts.release()
        self._memory.close()
        os.close(self._fd)
        self._fd = -1


async def serve_shared_port(
    app: Any,
    config: Any,
    *,
    listener: socket.socket,
    board: LoadBoard,
    index: int,
    shutdown_trigger: Callable[[], Awaitable[Any]],
) -> None:
    """Serve ``app`` on the connections this worker accepts from ``listener``.

    Args:
        app: The ASGI app.
        config: The Hypercorn ``Config`` (its ``bind`` is not used).
        listener: The port's listening socket, shared by every worker.
        board: The workers' open connections.
        index: This worker's slot on ``board``.
        shutdown_trigger: Resolves when the worker should stop.
    """
    from hypercorn.asyncio.lifespan import Lifespan
    from hypercorn.asyncio.statsd import StatsdLogger
    from hypercorn.utils import wrap_app

    config.set_statsd_logger_class(StatsdLogger)
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    loop = asyncio.get_running_loop()
    state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, loop, state)
    lifespan_task = loop.create_task(lifespan.handle_lifespan())
    await lifespan.wait_for_startup()
    if lifespan_task.done() and (failure := lifespan_task.exception()) is not None:
        raise failure
    try:
        await _Acceptor(wrapped, config, state, listener, board, index).run(shutdown_trigger)
    finally:
        await lifespan.wait_for_shutdown()
        lifespan_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lifespan_task


class _Acceptor:
    """One worker's accept loop and the connections it serves."""

    def __init__(
        self,
        app: Any,
        config: Any,
        state: dict[str, Any],
        listener: socket.socket,
        board: LoadBoard,
        index: int,
    ) -> None:
        from hypercorn.asyncio.tcp_server import TCPServer
        from hypercorn.asyncio.worker_context import WorkerContext

        self._tcp_server = TCPServer
        self._app = app
        self._config = config
        self._state = state
        self._listener = listener
        self._board = board
        self._index = index
        self._context = WorkerContext(None)
        self._connections: set[asyncio.Task[None]] = set()
        self._accepting = False

    async def run(self, shutdown_trigger: Callable[[], Awaitable[Any]]) -> None:
        """Accept until ``shutdown_trigger`` resolves, then close as Hypercorn does."""
        accepting = asyncio.ensure_future(self._accept())
        stopping = asyncio.ensure_future(shutdown_trigger())
        try:
            await asyncio.wait({accepting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if accepting.done():
                accepting.result()  # the accept loop failed: raise its error
        finally:
            self._accepting = False
            self._board.absent(self._index)  # the others stop deferring to this one at once
            for task in (accepting, stopping):
                task.cancel()
            await asyncio.gather(accepting, stopping, return_exceptions=True)
            await self._context.terminated.set()
            if self._connections:
                gathered = asyncio.gather(*self._connections)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(gathered, self._config.graceful_timeout)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener.setblocking(False)
        self._board.hold(self._index, 0)
        self._accepting = True
        while True:
            for _ in range(_STEP_ASIDE_TIMES):
                if not self._board.ahead(self._index):
                    break
                await asyncio.sleep(_STEP_ASIDE_SECONDS)
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except (ConnectionAbortedError, ConnectionResetError):
                continue  # the client gave up while queued
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._serve(conn))
            self._connections.add(task)
            task.add_done_callback(self._closed)
            self._board.hold(self._index, len(self._connections))

    def _closed(self, task: asyncio.Task[None]) -> None:
        self._connections.discard(task)
        if self._accepting:
            self._board.hold(self._index, len(self._connections))

    async def _serve(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
        except OSError:  # reset before it could be served
            conn.close()
            return
        loop = asyncio.get_running_loop()
        await self._tcp_server(
            self._app, loop, self._config, self._context, self._state, reader, writer
        )
