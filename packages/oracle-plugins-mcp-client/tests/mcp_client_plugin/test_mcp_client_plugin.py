"""The hub against real MCP servers on loopback: prefixed tools, allow/deny, on-demand
servers loaded like plugins, an unreachable server that degrades without failing the turn,
and configuration errors that never echo a header."""

from __future__ import annotations

import json
import re
import socket
from typing import TYPE_CHECKING, Any

import pytest

from oracle_core import EnvValidationError, UserInfo
from oracle_core.testing import (
    ScriptedChatModel,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_plugins.mcp_client import McpClientPlugin, parse_servers

if TYPE_CHECKING:
    from tests.mcp_client_plugin.conftest import Served


def env(*servers: dict[str, Any]) -> dict[str, str]:
    return {"ORACLE_MCP_SERVERS": json.dumps(list(servers))}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_the_plugin_passes_the_conformance_suite(maths: Served) -> None:
    await validate_plugin(
        McpClientPlugin(),
        config=env({"name": "maths", "url": maths.url}),
        entry_point=True,
    )


async def test_an_always_server_and_an_on_demand_one(maths: Served, catalogue: Served) -> None:
    model = ScriptedChatModel(
        [
            call_tool("maths__add", {"a": 40, "b": 2}),
            call_tool("list_capabilities", {}),
            call_tool("load_capability", {"names": ["catalogue"]}),
            call_tool("catalogue__lookup_07", {"query": "solar panels"}),
            reply("40 + 2 = 42, and section 7 has solar panels."),
        ],
        strict=True,
    )
    config = env(
        {"name": "maths", "url": maths.url, "deny": ["wipe"], "summary": "Arithmetic."},
        {
            "name": "catalogue",
            "url": catalogue.url,
            "on_demand": True,
            "summary": "The product catalogue.",
            "tags": ["catalogue", "products"],
        },
    )
    user = UserInfo(did="did:key:z6MkHubUser")
    plugin = McpClientPlugin()
    async with await create_test_runtime(
        plugins=[plugin], config=config, model=model, user=user
    ) as runtime:
        built = await runtime.build("hello")
        result = await runtime.run_turn("add 40 and 2, then find solar panels")
        status = [s.to_wire() for s in plugin.status()]

    assert "maths__wipe" not in built.tool_infos  # denied by the server's own list
    assert built.tool_infos["maths__add"].effect == "read"
    assert built.tool_infos["maths__add"].capability == "maths"
    assert built.tool_infos["catalogue__lookup_07"].visibility == "on-demand"
    first = model.calls[0]
    assert "maths__add" in first.tool_names
    assert not [n for n in first.tool_names if n.startswith("catalogue__")]
    assert "catalogue__lookup_07" in model.calls[3].tool_names

    assert [str(m.content) for m in result.tool_messages("maths__add")] == ["42"]
    assert [str(m.content) for m in result.tool_messages("catalogue__lookup_07")] == [
        "record 7 for solar panels"
    ]
    listed = json.loads(str(result.tool_messages("list_capabilities")[0].content))
    assert [(i["name"], i["loaded"]) for i in listed] == [("maths", True), ("catalogue", False)]
    assert maths.calls == [("add", "")]
    assert [s["state"] for s in status] == ["up", "up"]
    assert [s["tools"] for s in status] == [1, 50]
    assert status[0]["protocol"] == "2026-07-28"


async def test_an_unreachable_server_is_degraded_and_the_turn_goes_on(maths: Served) -> None:
    model = ScriptedChatModel([call_tool("maths__add", {"a": 1, "b": 1}), reply("2.")])
    gone = f"http://127.0.0.1:{closed_port()}/mcp/"
    plugin = McpClientPlugin(reconnect_attempts=1, reconnect_delay=0.01)
    config = env({"name": "gone", "url": gone}, {"name": "maths", "url": maths.url})
    async with await create_test_runtime(plugins=[plugin], config=config, model=model) as rt:
        built = await rt.build("hello")
        result = await rt.run_turn("1 + 1?")
        status = {s.name: s for s in plugin.status()}

    assert ("mcp-client", "MCP server gone unavailable") in built.degraded
    assert "- **mcp-client**: MCP server gone unavailable" in built.prompt.text
    assert not [n for n in built.tool_infos if n.startswith("gone__")]
    assert result.text == "2."
    assert status["gone"].state == "down"
    assert status["gone"].error is not None
    assert "unreachable" in status["gone"].error
    assert status["maths"].state == "up"


def test_bad_server_lists_are_refused_with_reasons_that_never_quote_a_header() -> None:
    secret = "sk-live-do-not-print"
    cases = {
        "not json": "not JSON",
        json.dumps([{"name": "Bad Name", "url": "http://x"}]): "0.name",
        json.dumps([{"name": "a", "url": "ftp://x"}]): "http:// or https://",
        json.dumps([{"name": "a", "url": "http://x", "transport": "sse"}]): "streamable-http",
        json.dumps([{"name": "a", "url": "http://x"}, {"name": "a", "url": "http://y"}]): "unique",
        json.dumps(
            [{"name": "a", "url": "http://x", "headers": {"x-api-key": secret}, "auth": "basic"}]
        ): "0.auth",
    }
    for raw, expected in cases.items():
        with pytest.raises(ValueError, match=re.escape(expected)) as refused:
            parse_servers(raw)
        assert secret not in str(refused.value)


async def test_a_bad_server_list_fails_boot_naming_the_variable() -> None:
    config = {"ORACLE_MCP_SERVERS": json.dumps([{"name": "a", "url": "nope"}])}
    with pytest.raises(EnvValidationError) as failed:
        await create_test_runtime(plugins=[McpClientPlugin()], config=config)
    assert "ORACLE_MCP_SERVERS" in str(failed.value)
    assert "http:// or https://" in str(failed.value)
