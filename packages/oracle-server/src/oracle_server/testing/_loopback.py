"""A Starlette app served by Hypercorn on ``127.0.0.1`` in the current event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Self, cast

from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config
from hypercorn.typing import ASGIFramework
from hypercorn.utils import wrap_app
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from oracle_server._http.eof import close_connections_on_eof
from oracle_ucan.did import clear_service_did_cache

__all__ = ["LoopbackServer"]

_logger = logging.getLogger("oracle.testing.loopback")


class LoopbackServer:
    """Base of the protocol doubles: serves ``routes`` on an ephemeral loopback port.

    Args:
        routes: The app's routes.
        graceful_timeout: Seconds `stop` lets open connections finish.
    """

    name = "LoopbackServer"

    def __init__(self, routes: Sequence[BaseRoute], *, graceful_timeout: float = 0.5) -> None:
        self._graceful_timeout = graceful_timeout
        self._port: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._started = asyncio.Event()
        self.app = Starlette(routes=list(routes), lifespan=self._lifespan)

    @property
    def port(self) -> int:
        """The port served on; available once started."""
        if self._port is None:
            raise RuntimeError(f"{self.name} is not started: call `await server.start()`")
        return self._port

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:{port}``."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Serve on ``127.0.0.1`` on an ephemeral port, in the current event loop.

        Raises:
            RuntimeError: The server is already running.
        """
        if self._task is not None:
            raise RuntimeError(f"{self.name} is already started")
        # A new server may take the port of one an earlier test served another did:web
        # document on: the process-wide DID cache must not answer for this origin.
        clear_service_did_cache()
        close_connections_on_eof()
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.graceful_timeout = self._graceful_timeout
        config.accesslog = None
        config.errorlog = _logger
        sockets = config.create_sockets()
        listener = sockets.insecure_sockets[0]
        # Listening before Hypercorn starts its server makes the port usable as soon as
        # start() returns: early connections wait in the backlog.
        listener.listen(config.backlog)
        self._port = int(listener.getsockname()[1])
        self._stopping = asyncio.Event()
        self._started = asyncio.Event()
        # Starlette's ASGI signature is looser than Hypercorn's typed one; they agree at runtime.
        app = wrap_app(cast(ASGIFramework, self.app), config.wsgi_max_body_size, "asgi")
        self._task = asyncio.create_task(
            worker_serve(app, config, sockets=sockets, shutdown_trigger=self._stopping.wait)
        )
        started = asyncio.create_task(self._started.wait())
        await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
        if not self._started.is_set():
            started.cancel()
            listener.close()
            task, self._task, self._port = self._task, None, None
            await task  # raises the startup failure
            raise RuntimeError(f"{self.name} stopped while starting")

    async def stop(self) -> None:
        """Stop serving; open streams get ``graceful_timeout`` seconds, then are cut."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        try:
            await task
        finally:
            self._port = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._started.set()
        yield
