"""MCP servers built with the Python ``mcp`` SDK on loopback, for the hub's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_mcp.testing import catalogue_server as shared_catalogue
from oracle_mcp.testing import mounted_app, running
from oracle_server.testing import LoopbackServer


@dataclass
class Served:
    """A served MCP server: its URL and the tool calls it ran."""

    url: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """``(tool, x-user header)`` of each call."""
    requests: int = 0


def maths_server(served: Served) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("maths", log_level="WARNING")

    @server.tool(description="Add two numbers.", annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int, ctx: Context[Any, Any]) -> int:
        served.calls.append(("add", (ctx.headers or {}).get("x-user", "")))
        return a + b

    @server.tool(
        description="Erase every stored number.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def wipe(ctx: Context[Any, Any]) -> str:
        served.calls.append(("wipe", ""))
        return "wiped"

    return server


def catalogue_server(served: Served, count: int = 50) -> MCPServer[Any]:
    """``count`` lookup tools that record their calls."""

    def make(index: int) -> Callable[..., str]:
        def lookup(query: str, limit: int = 10) -> str:
            served.calls.append((f"lookup_{index:02d}", ""))
            return f"record {index} for {query}"

        return lookup

    return shared_catalogue(count, make)


class Counting:
    """Counts the HTTP requests a served app receives."""

    def __init__(self, served: Served, app: ASGIApp) -> None:
        self._served = served
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._served.requests += 1
        await self._app(scope, receive, send)


ServeFactory = Callable[[Callable[[Served], MCPServer[Any]]], Any]


@pytest.fixture
async def serve() -> AsyncIterator[ServeFactory]:
    """``await serve(build)`` serves ``build(served)`` on loopback and returns ``served``."""
    async with AsyncExitStack() as stack:

        async def start(build: Callable[[Served], MCPServer[Any]]) -> Served:
            served = Served()
            server = build(served)
            app = Counting(served, mounted_app(server))
            await stack.enter_async_context(running(server))
            http = await stack.enter_async_context(LoopbackServer([Mount("/mcp", app=app)]))
            served.url = f"{http.origin}/mcp/"
            return served

        yield start


@pytest.fixture
async def maths(serve: ServeFactory) -> Served:
    """``add`` (read-only) and ``wipe`` (destructive)."""
    served: Served = await serve(maths_server)
    return served


@pytest.fixture
async def catalogue(serve: ServeFactory) -> Served:
    """Fifty read-only lookup tools."""
    served: Served = await serve(catalogue_server)
    return served
