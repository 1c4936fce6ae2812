"""The shared MCP client against real MCP servers on loopback: the Python SDK's (stateless
2026-07-28) and the TypeScript SDK's (2025-11-25)."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent

from oracle_mcp import McpClient, McpUnavailableError, render_result

if TYPE_CHECKING:
    from tests.mcp_client.conftest import Peer

PEERS = ["py", "js"]
both = pytest.mark.parametrize("kind", PEERS)


@both
async def test_tools_are_listed_with_their_schema_and_effect(
    kind: str, peer: tuple[Peer, str]
) -> None:
    served, version = peer
    client = McpClient(served.url, name=kind)
    tools = {t.name: t for t in await client.list_tools({})}
    await client.aclose()

    assert client.protocol_version == version
    assert {"whoami", "add", "wipe", "slow"} <= set(tools)
    assert tools["whoami"].effect == "read"
    assert tools["add"].effect == "write"  # no annotation: write, not destructive
    assert tools["wipe"].effect == "destructive"
    schema = tools["add"].input_schema
    assert set(schema["properties"]) == {"a", "b"}
    assert set(schema["required"]) == {"a", "b"}
    assert tools["add"].description == "Add two numbers."


@both
async def test_each_call_carries_its_own_users_headers(kind: str, peer: tuple[Peer, str]) -> None:
    served, _ = peer
    client = McpClient(served.url, name=kind)
    users = [f"user-{i}" for i in range(6)]
    results = await asyncio.gather(*(client.call_tool("whoami", {}, {"x-user": u}) for u in users))
    total = await client.call_tool("add", {"a": 40, "b": 2}, {})
    await client.aclose()

    assert [render_result(r) for r in results] == users
    assert render_result(total) == "42"


@both
async def test_the_tool_timeout_is_the_tools_own(kind: str, peer: tuple[Peer, str]) -> None:
    served, _ = peer
    # Connecting may take 0.5 s; the tool may take 30 s: a 1 s tool succeeds.
    client = McpClient(served.url, name=kind, timeout=0.5, tool_timeout=30)
    slow = await client.call_tool("slow", {"seconds": 1.0}, {})
    assert render_result(slow) == "slept 1"

    # A per-tool override cuts a call that runs past it, and says so.
    client.tool_timeouts["slow"] = 0.3
    with pytest.raises(McpUnavailableError) as failed:
        await client.call_tool("slow", {"seconds": 5}, {})
    await client.aclose()
    assert failed.value.timed_out
    assert not failed.value.unreachable


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_unreachable_server_is_retried_then_remembered() -> None:
    client = McpClient(
        f"http://127.0.0.1:{closed_port()}/mcp/",
        name="gone",
        reconnect_attempts=3,
        reconnect_delay=0.05,
    )
    with pytest.raises(McpUnavailableError, match="unreachable after 4 attempts") as failed:
        await client.list_tools({})
    assert failed.value.unreachable

    # While it is known down, no new attempts are made (the message has no count).
    with pytest.raises(McpUnavailableError, match=r"^MCP server gone unreachable$"):
        await client.list_tools({})
    await client.aclose()


@pytest.mark.parametrize("kind", ["py"])
async def test_a_refusal_is_reported_with_its_status_and_not_retried(
    kind: str, peer: tuple[Peer, str]
) -> None:
    served, _ = peer
    client = McpClient(served.url, name="peer", reconnect_attempts=3, reconnect_delay=5.0)
    with pytest.raises(McpUnavailableError, match="HTTP 401") as failed:
        await client.call_tool("wipe", {"confirm": True}, {"Authorization": "Bearer bad"})
    await client.aclose()
    assert failed.value.status == 401
    assert not failed.value.unreachable
    assert served.methods == []  # refused at the door, once


@pytest.mark.parametrize("kind", ["py"])
async def test_the_revision_is_negotiated_once(kind: str, peer: tuple[Peer, str]) -> None:
    served, _ = peer
    client = McpClient(served.url, name="peer")
    await client.call_tool("add", {"a": 1, "b": 2}, {})
    first = list(served.methods)
    served.methods.clear()
    await client.call_tool("add", {"a": 3, "b": 4}, {})

    assert "server/discover" in first
    assert "server/discover" not in served.methods
    assert served.methods.count("tools/call") == 1

    # Once listed, a call is one request: the listing primes each new client.
    await client.list_tools({})
    served.methods.clear()
    await client.call_tool("add", {"a": 5, "b": 6}, {})
    await client.aclose()
    assert served.methods == ["tools/call"]


@both
async def test_a_tool_error_is_a_result_not_an_exception(kind: str, peer: tuple[Peer, str]) -> None:
    served, _ = peer
    client = McpClient(served.url, name=kind)
    # The JS peer has no `fail` tool: calling an unknown tool is its error result.
    name = "fail" if kind == "py" else "no_such_tool"
    result = await client.call_tool(name, {}, {})
    await client.aclose()
    assert result.is_error
    assert render_result(result)


def test_results_read_as_text() -> None:
    texts = CallToolResult(
        content=[TextContent(type="text", text="a"), TextContent(type="text", text="b")]
    )
    structured = CallToolResult(content=[], structured_content={"n": 1})
    image = CallToolResult(content=[ImageContent(type="image", data="AA==", mime_type="image/png")])
    assert render_result(texts) == "a\nb"
    assert render_result(structured) == '{"n": 1}'
    assert render_result(image) == "[image]"
