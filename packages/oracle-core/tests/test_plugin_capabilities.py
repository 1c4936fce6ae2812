"""Capabilities a plugin declares besides itself (``get_capabilities``): each is listed,
loaded, gated, preloaded and shown in the prompt by its own name, like a plugin."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    LexicalCapabilityRouter,
    MainAgentHooks,
    OracleBootError,
    OraclePlugin,
    PluginCapability,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def tool(name: str, capability: str | None = None) -> PluginTool:
    @plugin_tool(name=name, description=f"{name} tool.", args_schema=NoArgs, effect="read")
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return f"{name} ran"

    return handler.model_copy(update={"capability": capability})


class HubPlugin(OraclePlugin):
    """Fronts two tool sets: ``tides`` (on demand) and ``clock`` (always)."""

    name = "hub"
    version = "1"
    manifest = PluginManifest(
        title="Hub", summary="Tool sets.", when_to_use=["hub things"], visibility="always"
    )

    def get_capabilities(self, ctx: PluginContext[Any]) -> list[PluginCapability]:
        return [
            PluginCapability(
                name="tides",
                manifest={
                    "title": "Tides",
                    "summary": "Tide tables for harbours.",
                    "when_to_use": ["high tide and low tide times at a harbour"],
                    "tags": ["tide", "harbour"],
                },
                operating_guide="Give tide times in the harbour's local time.",
            ),
            PluginCapability(
                name="clock",
                manifest={
                    "title": "Clock",
                    "summary": "World clock.",
                    "when_to_use": ["the time in another city"],
                    "visibility": "always",
                },
            ),
        ]

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("hub_status"), tool("world_time", "clock")]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return [tool("tide_table", "tides"), tool("stray", "undeclared")]


async def test_a_declared_capability_is_gated_listed_and_loaded_by_its_name() -> None:
    model = ScriptedChatModel(
        [
            call_tool("tide_table", {}),  # not loaded yet: refused, naming the capability
            call_tool("list_capabilities", {}),
            call_tool("load_capability", {"names": ["tides"]}),
            call_tool("tide_table", {}),
            "High tide at 14:02.",
        ]
    )
    async with await create_test_runtime(plugins=[HubPlugin()], model=model) as runtime:
        built = await runtime.build("tides?")
        result = await runtime.run_turn("when is high tide?")

    first, *_, after_load, _last = model.calls
    assert "tide_table" not in first.tool_names
    assert {"hub_status", "world_time", "stray"} <= set(first.tool_names)
    assert "tide_table" in after_load.tool_names
    assert built.tool_infos["tide_table"].capability == "tides"
    assert built.tool_infos["tide_table"].owner == "hub"
    assert built.tool_infos["stray"].capability is None  # undeclared: the plugin's own

    refused, ran = [str(m.content) for m in result.tool_messages("tide_table")]
    assert "belongs to the capability 'tides'" in refused
    assert ran == "tide_table ran"
    listed = json.loads(str(result.tool_messages("list_capabilities")[0].content))
    assert [(i["name"], i["loaded"]) for i in listed] == [
        ("hub", True),
        ("tides", False),
        ("clock", True),
    ]
    [loaded] = json.loads(str(result.tool_messages("load_capability")[0].content))["results"]
    assert loaded["name"] == "tides"
    assert [t["name"] for t in loaded["tools"]] == ["tide_table"]
    assert loaded["operatingGuide"] == "Give tide times in the harbour's local time."
    assert result.state["loaded_plugins"] == ["tides"]


async def test_the_prompt_shows_an_always_capability_and_keeps_an_on_demand_one_out() -> None:
    async with await create_test_runtime(plugins=[HubPlugin()]) as runtime:
        built = await runtime.build("hello")
    text = built.prompt.text
    assert "- **clock** — World clock." in text
    assert "Tide tables" not in text  # on demand: only the on-demand note
    assert "**tides**" not in text


async def test_the_router_preloads_a_declared_capability() -> None:
    async with await create_test_runtime(
        plugins=[HubPlugin()], hooks=MainAgentHooks(capability_router=LexicalCapabilityRouter())
    ) as runtime:
        built = await runtime.build("what time is high tide at the harbour today?")
    assert "tides" in built.preloaded_plugins


class Clashing(HubPlugin):
    def get_capabilities(self, ctx: PluginContext[Any]) -> list[PluginCapability]:
        return [PluginCapability(name="hub", manifest={"title": "Hub 2", "summary": "x."})]


async def test_a_capability_named_like_a_plugin_fails_boot() -> None:
    with pytest.raises(OracleBootError) as failed:
        await create_test_runtime(plugins=[Clashing()])
    assert failed.value.code == "boot.plugin.capability_clash"


class PartlyDown(HubPlugin):
    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        rt_ctx.report_degraded("tide server unreachable")
        return [tool("tide_table", "tides")]


async def test_a_request_hook_reports_a_part_degraded_and_keeps_the_rest() -> None:
    async with await create_test_runtime(plugins=[PartlyDown()]) as runtime:
        built = await runtime.build("hello")
    assert ("hub", "tide server unreachable") in built.degraded
    assert "- **hub**: tide server unreachable" in built.prompt.text
    assert "tide_table" in built.tool_infos
