"""Fixtures of the firecrawl plugin tests: the Firecrawl MCP double on loopback and a
runtime on it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime
from oracle_plugins.firecrawl import FirecrawlPlugin
from oracle_plugins.firecrawl.testing import FirecrawlDouble
from oracle_server.testing import LoopbackServer

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]


@pytest.fixture
async def firecrawl() -> AsyncIterator[FirecrawlDouble]:
    """The double, served on loopback."""
    double = FirecrawlDouble()
    async with double.running(), LoopbackServer(double.routes) as server:
        double.origin = server.origin
        yield double


@pytest.fixture
def closed_url() -> str:
    """An MCP URL on a loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp/"


def quick_plugin(**options: Any) -> FirecrawlPlugin:
    """The plugin with reconnects that do not make a test wait."""
    return FirecrawlPlugin(**{"reconnect_attempts": 1, "reconnect_delay": 0.01, **options})


@pytest.fixture
def runtime_on(firecrawl: FirecrawlDouble) -> RuntimeFactory:
    """``async with runtime_on(plugin=None, url=None, **options) as rt``: on the double."""

    @asynccontextmanager
    async def build(
        plugin: FirecrawlPlugin | None = None,
        *,
        url: str | None = None,
        model: Any = None,
        models: Any = None,
    ) -> AsyncIterator[TestRuntime]:
        runtime = await create_test_runtime(
            plugins=[plugin or quick_plugin()],
            config={"FIRECRAWL_MCP_URL": url or firecrawl.mcp_url},
            model=model or ScriptedChatModel(),
            models=models,
        )
        async with runtime:
            yield runtime

    return build
