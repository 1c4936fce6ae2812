"""MCP servers on loopback for the client tests: one built with the Python ``mcp`` SDK
(2.x, the stateless 2026-07-28 revision) and one with the official TypeScript SDK (which
negotiates 2025-11-25), serving the same four tools."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from oracle_mcp.testing import mounted_app, running
from oracle_server.testing import LoopbackServer
from oracle_ucan.testing import node_with_locked_packages

JS_DIR = Path(__file__).parent / "js"


@dataclass
class Peer:
    """A served MCP server and what it saw."""

    url: str
    methods: list[str] = field(default_factory=list)
    """The JSON-RPC methods it received, in order (the Python peer only)."""
    users: list[str] = field(default_factory=list)
    """The ``x-user`` header of each tool call (the Python peer only)."""


def build_server(peer: Peer) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("py-peer", log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True)

    @server.tool(description="The x-user header of the request.", annotations=read_only)
    def whoami(ctx: Context[Any, Any]) -> str:
        user = (ctx.headers or {}).get("x-user", "")
        peer.users.append(user)
        return user

    @server.tool(description="Add two numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(
        description="Erase everything.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    def wipe(confirm: bool) -> str:
        return "wiped"

    @server.tool(description="Answer after a delay.", annotations=read_only)
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds:g}"

    @server.tool(description="Always fails.")
    def fail() -> str:
        raise ToolError("this tool always fails")

    return server


class Recording:
    """Pure ASGI: notes each JSON-RPC method and refuses ``Authorization: Bearer bad``."""

    def __init__(self, peer: Peer, app: ASGIApp) -> None:
        self._peer = peer
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if headers.get(b"authorization") == b"Bearer bad":
            await JSONResponse({"detail": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        if body:
            sent = json.loads(body)
            for item in sent if isinstance(sent, list) else [sent]:
                self._peer.methods.append(str(item.get("method")))

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self._app(scope, replay, send)


@pytest.fixture
async def py_peer() -> AsyncIterator[Peer]:
    """The Python SDK's server at ``/mcp/``."""
    peer = Peer(url="")
    server = build_server(peer)
    app = Recording(peer, mounted_app(server))
    async with running(server), LoopbackServer([Mount("/mcp", app=app)]) as http:
        peer.url = f"{http.origin}/mcp/"
        yield peer


@pytest.fixture(scope="session")
def node() -> str:
    return node_with_locked_packages(JS_DIR, code="mcp", purpose="the MCP interop tests")


@pytest.fixture
def js_peer(node: str) -> Iterator[Peer]:
    """The TypeScript SDK's server (2025-11-25) at ``/mcp``."""
    process = subprocess.Popen(
        [node, str(JS_DIR / "mcp_server.mjs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"the JS MCP server did not start: {line!r}")
        yield Peer(url=f"http://127.0.0.1:{line.split()[1]}/mcp")
    finally:
        process.terminate()
        process.communicate(timeout=10)


VERSIONS = {"py": "2026-07-28", "js": "2025-11-25"}


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> tuple[Peer, str]:
    """The peer named by the test's ``kind`` parameter, and the revision it speaks."""
    kind: str = request.getfixturevalue("kind")
    served: Peer = request.getfixturevalue(f"{kind}_peer")
    return served, VERSIONS[kind]
