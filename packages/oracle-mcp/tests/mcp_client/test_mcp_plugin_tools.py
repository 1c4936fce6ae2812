"""MCP tools bound as plugin tools and called by a scripted model through a real runtime:
the schema is the server's, arguments are validated before anything is sent, each user's
headers reach the server, and a tool the server annotates destructive waits for approval."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from oracle_core import OraclePlugin, PluginTool, RuntimeContext, UserInfo
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, reply
from oracle_mcp import AuthFailure, McpClient, mcp_plugin_tools

if TYPE_CHECKING:
    from tests.mcp_client.conftest import Peer


class PeerPlugin(OraclePlugin):
    """Every tool of one MCP server, as ``peer__<tool>``."""

    name = "peer"
    version = "0.1.0"
    manifest = {
        "title": "Peer",
        "summary": "Tools of a test MCP server.",
        "when_to_use": ["Arithmetic"],
        "visibility": "always",
    }

    def __init__(self, url: str) -> None:
        self.client = McpClient(url, name="peer")

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return mcp_plugin_tools(
            self.client, await self.client.list_tools({}), headers=_user, prefix="peer__"
        )


async def _user(rt_ctx: RuntimeContext[Any]) -> Mapping[str, str] | AuthFailure:
    return {"x-user": rt_ctx.user.did}


@pytest.mark.parametrize("kind", ["py", "js"])
async def test_a_scripted_turn_calls_the_servers_tools(kind: str, peer: tuple[Peer, str]) -> None:
    served, _ = peer
    plugin = PeerPlugin(served.url)
    model = ScriptedChatModel(
        [
            call_tool("peer__add", {"a": "forty", "b": 2}),  # refused before it is sent
            call_tool("peer__add", {"a": 40, "b": 2}),
            call_tool("peer__whoami", {}),
            reply("40 + 2 = 42."),
        ]
    )
    runtime = await create_test_runtime(
        plugins=[plugin], model=model, user=UserInfo(did="did:key:z6MkAlice")
    )
    async with runtime:
        built = await runtime.build("what is 40 + 2?")
        result = await runtime.run_turn("what is 40 + 2?")
    await plugin.client.aclose()

    assert built.tool_infos["peer__add"].effect == "write"
    assert built.tool_infos["peer__whoami"].effect == "read"
    assert built.tool_infos["peer__wipe"].effect == "destructive"
    adds = [str(m.content) for m in result.tool_messages("peer__add")]
    assert adds[0].startswith("Invalid arguments for tool 'peer__add'; the tool was not run.")
    assert "- a: 'forty' is not of type" in adds[0]
    assert adds[1] == "42"
    assert [str(m.content) for m in result.tool_messages("peer__whoami")] == ["did:key:z6MkAlice"]
    if kind == "py":
        assert served.methods.count("tools/call") == 2  # the invalid call never left
        assert served.users == ["did:key:z6MkAlice"]


async def test_a_destructive_server_tool_waits_for_approval(py_peer: Peer) -> None:
    plugin = PeerPlugin(py_peer.url)
    model = ScriptedChatModel(
        [call_tool("peer__wipe", {"confirm": True}), reply("Done: wiped."), reply("Not wiped.")]
    )
    runtime = await create_test_runtime(plugins=[plugin], model=model)
    async with runtime:
        paused = await runtime.run_turn("wipe everything")
        assert [a.tool_name for a in paused.approvals] == ["peer__wipe"]
        assert "tools/call" not in py_peer.methods
        done = await runtime.resume_turn({paused.approvals[0].interrupt_id: "approved"})
    await plugin.client.aclose()
    assert [str(m.content) for m in done.tool_messages("peer__wipe")] == ["wiped"]
    assert py_peer.methods.count("tools/call") == 1
