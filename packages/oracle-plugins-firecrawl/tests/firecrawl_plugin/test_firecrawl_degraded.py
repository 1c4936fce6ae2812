"""An unreachable Firecrawl server: no sub-agent that turn, "Firecrawl Agent" under the
prompt's degraded services, and the turn still answers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from oracle_core.testing import ScriptedChatModel, create_test_runtime
from oracle_plugins.firecrawl import SUB_AGENT_TOOL, FirecrawlPlugin
from oracle_plugins.firecrawl.testing import FirecrawlDouble
from oracle_server.testing import LoopbackServer

if TYPE_CHECKING:
    from oracle_core import BuiltAgent

DEGRADED_LINE = "- **firecrawl**: Firecrawl Agent"


def quick_plugin(**options: float) -> FirecrawlPlugin:
    """Reconnects that do not make the test wait."""
    return FirecrawlPlugin(reconnect_attempts=1, reconnect_delay=0.01, **options)


def assert_degraded(built: BuiltAgent) -> None:
    assert SUB_AGENT_TOOL not in built.tool_infos
    assert ("firecrawl", "Firecrawl Agent") in built.degraded
    degraded = built.prompt.text.split("## Degraded Services", 1)[1]
    assert DEGRADED_LINE in degraded


async def test_an_unreachable_server_leaves_the_agent_out_and_the_turn_answers(
    closed_url: str,
) -> None:
    model = ScriptedChatModel(["I cannot search the web right now."], strict=True)
    runtime = await create_test_runtime(
        plugins=[quick_plugin()], config={"FIRECRAWL_MCP_URL": closed_url}, model=model
    )
    async with runtime:
        assert runtime.status().loaded == ["firecrawl"]  # boot never contacts the server
        built = await runtime.build("search the web")
        result = await runtime.run_turn("What is new on the web today?")
    assert_degraded(built)
    assert result.text == "I cannot search the web right now."
    assert SUB_AGENT_TOOL not in model.calls[0].tool_names
    assert DEGRADED_LINE in (model.calls[0].system_prompt or "")


async def test_a_server_that_goes_down_is_degraded_from_the_next_listing() -> None:
    double = FirecrawlDouble()
    async with double.running():
        server = LoopbackServer(double.routes)
        await server.start()
        double.origin = server.origin
        runtime = await create_test_runtime(
            plugins=[quick_plugin(tools_ttl=0)], config={"FIRECRAWL_MCP_URL": double.mcp_url}
        )
        async with runtime:
            up = await runtime.build("hello")
            await server.stop()
            down = await runtime.build("hello again", thread_id="another-session")
    assert SUB_AGENT_TOOL in up.tool_infos
    assert up.degraded == []
    assert_degraded(down)


async def test_the_url_which_may_carry_the_api_key_is_never_logged(
    closed_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keyed = closed_url.replace("/mcp/", "/fc-5ecre7k3y/v2/mcp")
    runtime = await create_test_runtime(
        plugins=[quick_plugin()], config={"FIRECRAWL_MCP_URL": keyed}
    )
    async with runtime:
        built = await runtime.build("search the web")
    assert_degraded(built)
    # The oracle's own logs; the MCP SDK (DEBUG) and httpx2 (INFO) log request URLs
    # themselves, which the host's logging configuration must keep below its level.
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("oracle")]
    assert "firecrawl: Firecrawl MCP server configured" in messages
    assert any("Firecrawl Agent unavailable this turn" in m for m in messages)
    assert not [m for m in messages if "5ecre7k3y" in m]
