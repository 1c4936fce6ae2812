"""Helpers for tests that serve MCP servers built with the ``mcp`` SDK on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

__all__ = ["mounted_app", "running"]


def mounted_app(server: MCPServer[Any]) -> ASGIApp:
    """``server``'s stateless streamable-HTTP app, for ``Mount("/mcp", app=…)``.

    Its session manager is created here; run it with ``running(server)``.
    """
    return server.streamable_http_app(streamable_http_path="/", stateless_http=True)


@contextlib.asynccontextmanager
async def running(server: MCPServer[Any]) -> AsyncIterator[None]:
    """Run ``server``'s session manager (a mounted app's own lifespan does not run).

    The manager runs in a task of its own: its cancel scope must be exited by the task
    that entered it, and a fixture's setup and teardown may run in different tasks.
    """
    started, stop = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with server.session_manager.run():
            started.set()
            await stop.wait()

    task = asyncio.get_running_loop().create_task(hold())
    waiter = asyncio.get_running_loop().create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        waiter.cancel()
        await task  # raises why it stopped
    try:
        yield
    finally:
        stop.set()
        await task
