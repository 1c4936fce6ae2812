"""Memory on the shared MCP client: the engine's refusal is not retried, and a turn whose
engine is down lists memory as degraded instead of failing. (The client's own behaviour is
tested in oracle-mcp.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, create_test_runtime
from oracle_mcp import McpClient, McpUnavailableError
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer

MinterFactory = Callable[..., UcanAccessor]


async def test_a_refusal_is_not_retried(engine: MemoryEngineDouble) -> None:
    client = McpClient(engine.mcp_url, name="memory", reconnect_attempts=3, reconnect_delay=1.0)
    with pytest.raises(McpUnavailableError, match="HTTP 401") as failed:
        await client.call_tool("add_memory", {"name": "x", "content": "y"}, {})
    await client.aclose()
    assert failed.value.status == 401
    assert not failed.value.unreachable
    # Refused, not retried: the probe of the new revision and the older handshake the SDK
    # falls back to are both refused, once each (a retry would double that).
    assert engine.rejected == ["missing invocation"] * 2
    assert engine.memories == {}


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
