"""Helpers for tests that serve MCP servers built with the ``mcp`` SDK on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from starlette.types import ASGIApp

__all__ = ["catalogue_server", "mounted_app", "running"]


def catalogue_server(
    count: int = 50, make: Callable[[int], Callable[..., Any]] | None = None
) -> MCPServer[Any]:
    """A server with ``count`` read-only tools ``lookup_00``… of realistic size.

    Args:
        count: How many tools.
        make: ``make(index)`` gives tool ``index``'s function; default
            ``lookup(query: str, limit: int = 10) -> str``.
    """
    server: MCPServer[Any] = MCPServer("catalogue", log_level="WARNING")
    for index in range(count):
        server.add_tool(
            (make or _lookup)(index),
            name=f"lookup_{index:02d}",
            description=(
                f"Search section {index} of the product catalogue by free text and return "
                "the matching records with their identifiers, prices and stock levels."
            ),
            annotations=ToolAnnotations(read_only_hint=True),
        )
    return server


def _lookup(index: int) -> Callable[..., str]:
    def lookup(query: str, limit: int = 10) -> str:
        return f"record {index} for {query}"

    return lookup


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
