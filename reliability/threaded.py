"""An oracle served in a thread with its own event loop, for synchronous clients (the
hypothesis tests drive it with blocking HTTP and WebSocket clients)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager

from oracle_server import OracleApp
from oracle_server.testing import serving

__all__ = ["ThreadServedOracle"]

READY_SECONDS = 120


class ThreadServedOracle:
    """Serves the app that ``make_app`` yields (inside whatever it keeps open around it,
    such as a model double) until `stop`.

    Args:
        make_app: Opened in the thread's loop; yields the app to serve.
    """

    def __init__(self, make_app: Callable[[], AbstractAsyncContextManager[OracleApp]]) -> None:
        self._make_app = make_app
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready: Future[tuple[str, str]] = Future()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> tuple[str, str]:
        """Serve; the base URL and the oracle's DID."""
        self._thread.start()
        return self._ready.result(timeout=READY_SECONDS)

    def stop(self) -> None:
        """Shut the server down and wait for the thread."""
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        try:
            async with self._make_app() as app:
                self._stop = asyncio.Event()
                async with serving(app) as base_url:
                    self._ready.set_result((base_url, app.state.oracle_did))
                    await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise
