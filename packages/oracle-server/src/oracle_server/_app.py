"""``OracleApp``: a booted oracle — serving with Hypercorn, signals, shutdown (CORE-98)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from starlette.types import ASGIApp

from oracle_core import OracleRuntime, PluginStatusChangeEvent
from oracle_server._http.state import ServerState
from oracle_server._socket.gateway import SocketGateway
from oracle_server._workers.connection import HubConnection

__all__ = ["OracleApp", "freeze_boot_objects"]


class OracleApp:
    """A booted oracle: the ASGI app, its lifecycle and ``listen``.

    Made by ``create_oracle_app``, which hands over the exit stack of the boot: closing
    the app unwinds it (turns drain first, the replicas' connections close last).

    Attributes:
        state: The server's parts (``runtime``, ``runner``, ``storage``, ...).
        asgi: The ASGI app: socket.io in front of Starlette.
        gateway: The socket.io gateway: plugin events to session rooms, browser-tool and
            AG-UI round trips.
    """

    def __init__(
        self,
        state: ServerState,
        asgi: ASGIApp,
        *,
        gateway: SocketGateway,
        closer: AsyncExitStack,
        skip_graceful_shutdown: bool,
        hub: HubConnection | None = None,
    ) -> None:
        self.state = state
        self._hub = hub
        self.asgi = asgi
        self.gateway = gateway
        self._closer = closer
        self._skip_graceful_shutdown = skip_graceful_shutdown
        self._before_listen: list[Callable[[], Awaitable[None] | None]] = []
        self._listening = False
        self._closed = False
        self._stop = asyncio.Event()

    @property
    def runtime(self) -> OracleRuntime:
        """The core runtime."""
        return self.state.runtime

    @property
    def plugins(self) -> Any:
        """``runtime.plugins``: ``status()``."""
        return self.state.runtime.plugins

    def on_error(self, handler: Callable[[BaseException, str], Any]) -> None:
        """Receive background failures."""
        self.state.runtime.on_error(handler)

    def on_plugin_status_change(self, handler: Callable[[PluginStatusChangeEvent], Any]) -> None:
        """Receive plugin status changes."""
        self.state.runtime.on_plugin_status_change(handler)

    def before_listen(self, fn: Callable[[], Awaitable[None] | None]) -> None:
        """Run ``fn`` (awaited if async) before serving, in registration order."""
        self._before_listen.append(fn)

    def hypercorn_config(self, *, host: str, port: int) -> Any:
        """Hypercorn settings: larger request heads for UCAN headers, a drain-aware grace,
        a keep-alive longer than clients' and a listen backlog for many at once."""
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"{host}:{port}"]  # unused by a worker of `--workers` (shared port)
        config.h11_max_incomplete_size = 64 * 1024
        # The server must hold an idle connection longer than its clients (and proxies)
        # do: when it closes first, a request the client sends on that connection at the
        # same moment fails with a reset the client cannot safely retry.
        config.keep_alive_timeout = self.state.settings.http_keep_alive_seconds
        # Hypercorn's 100 drops connection attempts when a crowd of clients connects at
        # once (every tab after a restart); the kernel caps it at somaxconn.
        config.backlog = 2048
        config.graceful_timeout = float(self.state.settings.shutdown_drain_seconds + 5)
        config.accesslog = None
        return config

    async def serve(
        self,
        *,
        host: str,
        port: int,
        shutdown_trigger: Callable[[], Awaitable[Any]],
        freeze_gc: bool | None = None,
    ) -> None:
        """Serve until ``shutdown_trigger`` resolves, then shut down.

        Args:
            host: The address to bind.
            port: The port to bind.
            shutdown_trigger: Resolves when the server should stop.
            freeze_gc: Freeze what boot left behind before serving
                (``freeze_boot_objects``); ``None`` follows ``GC_FREEZE_AT_START`` (on by
                default). Unless ``False``, the collector's thresholds are also set from
                ``GC_THRESHOLD``. Test servers pass ``False``: a process that boots many
                apps would keep each one's objects out of the collector's reach, and its
                collector is its own.
        """
        from hypercorn.asyncio import serve

        from oracle_server._http.eof import close_connections_on_eof

        close_connections_on_eof()
        if self.state.settings.gc_freeze_at_start if freeze_gc is None else freeze_gc:
            frozen = freeze_boot_objects()
            logging.getLogger("oracle.server").debug("gc: froze %d boot objects", frozen)
        if freeze_gc is not False:  # the process is the oracle's (not a test server's)
            thresholds = self.state.settings.gc_thresholds
            if thresholds is not None:
                gc.set_threshold(*thresholds)

        # Sockets close as soon as shutdown starts (SRV-12 step 1).
        shutdown_trigger = self.gateway.closing_after(shutdown_trigger)
        if self._hub is not None:
            self._hub.announce_ready()
        config = self.hypercorn_config(host=host, port=port)
        settings = self.state.settings
        try:
            if settings.worker_listen_fd is None or settings.worker_load_fd is None:
                await serve(self.asgi, config, shutdown_trigger=shutdown_trigger)  # type: ignore[arg-type]
            else:  # a worker of `oracle serve --workers`: the port its supervisor bound
                await self._serve_shared_port(
                    config, settings.worker_listen_fd, settings.worker_load_fd, shutdown_trigger
                )
        finally:
            await self.aclose()

    async def _serve_shared_port(
        self,
        config: Any,
        listen_fd: int,
        load_fd: int,
        shutdown_trigger: Callable[[], Awaitable[Any]],
    ) -> None:
        from oracle_server._workers.accept import LoadBoard, serve_shared_port

        listener = socket.socket(fileno=listen_fd)
        board = LoadBoard.attach(load_fd)
        try:
            await serve_shared_port(
                self.asgi,
                config,
                listener=listener,
                board=board,
                index=self.state.settings.worker_index,
                shutdown_trigger=shutdown_trigger,
            )
        finally:
            listener.close()
            board.close()

    async def listen(self, port: int | None = None) -> None:
        """Serve on ``port`` (argument, else ``PORT``, else 3000) until SIGTERM/SIGINT.

        Raises:
            RuntimeError: called twice.
        """
        if self._listening:
            raise RuntimeError("OracleApp.listen called twice.")
        self._listening = True
        for fn in self._before_listen:
            result = fn()
            if asyncio.iscoroutine(result):
                await result
        if not self._skip_graceful_shutdown:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self._stop.set)
        settings = self.state.settings
        await self.serve(
            host=settings.host,
            port=settings.port if port is None else port,
            shutdown_trigger=self._stop.wait,
        )

    def stop(self) -> None:
        """Ask ``listen`` to shut down."""
        self._stop.set()

    async def aclose(self) -> None:
        """Drain the turns, then close what the boot opened, newest first (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self._closer.aclose()


def freeze_boot_objects() -> int:
    """Collect once, then move every live object to the collector's permanent generation.

    What boot leaves behind (imported modules, compiled graphs, plugins) lives as long as
    the process, and every full collection would otherwise walk it again: after booting
    the example oracle that walk took 55-60 ms on a quiet 2-core machine (over 100 ms
    under load), a pause that every turn in flight waits out. Frozen, a full collection
    walks only what serving created since. ``OracleApp.serve`` (and so ``listen``,
    ``oracle serve``) calls it unless ``GC_FREEZE_AT_START=false``; an app served some
    other way, or by the test servers, leaves the collector alone (frozen objects that
    later form garbage cycles are never collected).

    Returns:
        How many objects are frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
