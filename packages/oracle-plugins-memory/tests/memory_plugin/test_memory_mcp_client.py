"""The MCP client: reconnects only when no connection was made, remembers an outage, and
a turn whose engine is down lists memory as degraded instead of failing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
from mcp.types import CallToolResult, TextContent

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, create_test_runtime
from oracle_plugins.memory import EngineUnavailableError, McpEngineClient, MemoryPlugin
from oracle_plugins.memory._mcp import render_result
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer

MinterFactory = Callable[..., UcanAccessor]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_unreachable_engine_is_retried_then_remembered() -> None:
    client = McpEngineClient(
        f"http://127.0.0.1:{closed_port()}/mcp/", reconnect_attempts=3, reconnect_delay=0.1
    )
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="unreachable after 4 attempts") as failed:
        await client.list_tools({})
    assert failed.value.unreachable
    assert 0.3 <= time.monotonic() - started < 3.0  # three waits between four attempts

    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="unreachable"):
        await client.list_tools({})
    assert time.monotonic() - started < 0.1  # no new attempts while it is known down


async def test_a_refusal_is_not_retried(engine: MemoryEngineDouble) -> None:
    client = McpEngineClient(engine.mcp_url, reconnect_attempts=3, reconnect_delay=1.0)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="HTTP 401") as failed:
        await client.call_tool("add_memory", {"name": "x", "content": "y"}, {})
    assert not failed.value.unreachable
    assert time.monotonic() - started < 1.0
    assert engine.memories == {}


def test_results_read_as_text() -> None:
    texts = CallToolResult(
        content=[TextContent(type="text", text="a"), TextContent(type="text", text="b")]
    )
    structured = CallToolResult(content=[], structuredContent={"n": 1})
    assert render_result(texts) == "a\nb"
    assert render_result(structured) == '{"n": 1}'


async def test_a_turn_with_the_engine_down_lists_memory_as_degraded(
    user_key: Ed25519Signer, make_minter: MinterFactory
) -> None:
    double = MemoryEngineDouble(trusted_users=[user_key.did()])
    plugin = MemoryPlugin(reconnect_attempts=1, reconnect_delay=0.01, tools_ttl=0)
    async with double.running():
        server = LoopbackServer(double.routes)
        await server.start()
        double.origin = server.origin
        runtime = await create_test_runtime(
            plugins=[plugin],
            config={
                "MEMORY_MCP_URL": double.mcp_url,
                "MEMORY_ENGINE_URL": double.engine_url,
                "ORACLE_ENTITY_DID": "did:ixo:entity:down",
            },
            ucan=make_minter(),
            user=UserInfo(did=user_key.did()),
            model=ScriptedChatModel(["Sorry, I cannot reach my memory right now."]),
        )
        async with runtime:
            up = await runtime.build("hello")
            await server.stop()
            down = await runtime.build("hello again", thread_id="another-session")
            result: Any = await runtime.run_turn("still there?", thread_id="third-session")
    assert "memory-engine__add_memory" in up.tool_infos
    assert not [n for n in down.tool_infos if n.startswith("memory-engine__")]
    assert ("memory", "request tools") in down.degraded
    assert "Degraded" in down.prompt.text
    assert "memory" in down.prompt.text.split("Degraded", 1)[1]
    assert set(down.input["user_context"].values()) == {None}
    assert result.text == "Sorry, I cannot reach my memory right now."
