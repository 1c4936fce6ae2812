"""Tests of visibility tiers, the capability gate and the meta-tools (CORE-55 … 63)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OracleBootError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    ToolNotVisibleError,
    TurnResult,
    call_tool,
    call_tools,
    create_test_runtime,
)

# --- fixtures -------------------------------------------------------------------------


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


RUNS: Counter[str] = Counter()


def tool(
    name: str,
    description: str,
    *,
    visibility: Any = None,
    effect: Any = None,
) -> PluginTool:
    @plugin_tool(
        name=name,
        description=description,
        args_schema=NoArgs,
        visibility=visibility,
        effect=effect,
    )
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS[name] += 1
        return f"{name} ran"

    return handler


class AuditPlugin(OraclePlugin):
    name = "audit"
    version = "1"
    manifest = PluginManifest(title="Audit", summary="Audit trail.", visibility="silent")

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("audit_log", "Writes the audit log.")]


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "1"
    manifest = PluginManifest(
        title="Notes",
        summary="Notes helpers.",
        when_to_use=["note taking"],
        visibility="always",
        category="data",
        tags=["notes"],
        stability="stable",
    )
    operating_guide = "Keep notes short."

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("add_note", "Adds a note.", effect="write")]


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1"
    manifest = PluginManifest(
        title="Weather",
        summary="Weather helpers.",
        when_to_use=["weather questions"],
        visibility="on-demand",
        category="data",
        tags=["weather", "forecast"],
        stability="experimental",
    )
    operating_guide = "Always state the units."

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            tool("get_forecast", "Today's forecast.", effect="read"),
            tool("get_radar", "[Weather] Radar images."),
        ]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return [tool("get_alerts", "Weather alerts.", effect="read")]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [
            PluginSubAgent(
                name="forecaster", description="Plans forecasts.", system_prompt="Forecast."
            )
        ]


class CalendarPlugin(OraclePlugin):
    name = "calendar"
    version = "1"
    manifest = PluginManifest(
        title="Calendar",
        summary="Calendar helpers.",
        when_to_use=["scheduling"],
        visibility="always",
    )
    # Depending on weather puts calendar after it: topological, not alphabetical, order.
    depends_on = ("weather",)

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            tool("list_events", "Lists events."),
            tool("book_meeting", "Books a meeting.", visibility="on-demand", effect="write"),
        ]


ALL_PLUGINS = (AuditPlugin, NotesPlugin, WeatherPlugin, CalendarPlugin)


@pytest.fixture(autouse=True)
def reset_runs() -> None:
    RUNS.clear()


async def boot(model: ScriptedChatModel, **kwargs: Any) -> TestRuntime:
    return await create_test_runtime(plugins=[p() for p in ALL_PLUGINS], model=model, **kwargs)


def only_tool_message(result: TurnResult, name: str) -> ToolMessage:
    [message] = result.tool_messages(name)
    return message


def load_results(result: TurnResult) -> list[dict[str, Any]]:
    payload = json.loads(only_tool_message(result, "load_capability").text)
    results: list[dict[str, Any]] = payload["results"]
    return results


# --- list_capabilities (CORE-61) ------------------------------------------------------


async def test_list_capabilities_lists_non_silent_plugins_in_topological_order() -> None:
    model = ScriptedChatModel([call_tool("list_capabilities", {}), "done"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("what can you do?")
        via_helper = await runtime.list_capabilities()

    listed = json.loads(only_tool_message(result, "list_capabilities").text)
    assert [item["name"] for item in listed] == ["notes", "weather", "calendar"]
    notes, weather, calendar = listed
    assert notes == {
        "name": "notes",
        "title": "Notes",
        "summary": "Notes helpers.",
        "visibility": "always",
        "loaded": True,
        "category": "data",
        "tags": ["notes"],
        "stability": "stable",
    }
    warning = weather.pop("warning")
    assert isinstance(warning, str)
    assert "experimental" in warning.lower()
    assert weather == {
        "name": "weather",
        "title": "Weather",
        "summary": "Weather helpers.",
        "visibility": "on-demand",
        "loaded": False,
        "category": "data",
        "tags": ["weather", "forecast"],
        "stability": "experimental",
    }
    # An always plugin owning on-demand tools is not loaded until load_capability.
    assert calendar == {
        "name": "calendar",
        "title": "Calendar",
        "summary": "Calendar helpers.",
        "visibility": "always",
        "loaded": False,
        "category": None,
        "tags": [],
        "stability": None,
    }
    assert [item["name"] for item in via_helper] == ["notes", "weather", "calendar"]


async def test_list_capabilities_reflects_a_load_earlier_in_the_turn() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather", "calendar"]}),
            call_tool("list_capabilities", {}),
            "done",
        ]
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load and list")

    listed = json.loads(only_tool_message(result, "list_capabilities").text)
    assert {item["name"]: item["loaded"] for item in listed} == {
        "notes": True,
        "weather": True,
        "calendar": True,
    }


async def test_list_capabilities_uses_merged_manifests() -> None:
    async with await boot(
        ScriptedChatModel(),
        manifest_overrides={"weather": {"summary": "Overridden.", "tags": ["rain"]}},
    ) as runtime:
        listed = await runtime.list_capabilities()

    weather = next(item for item in listed if item["name"] == "weather")
    assert weather["summary"] == "Overridden."
    assert weather["tags"] == ["rain"]


# --- load_capability (CORE-59, 62) ----------------------------------------------------


async def test_load_capability_loads_a_batch_and_drops_duplicates() -> None:
    model = ScriptedChatModel(
        [call_tool("load_capability", {"names": ["weather", "weather", " calendar "]}), "ok"]
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load")

    message = only_tool_message(result, "load_capability")
    assert message.status == "success"
    assert [r["name"] for r in load_results(result)] == ["weather", "calendar"]
    assert result.state["loaded_plugins"] == ["weather", "calendar"]


async def test_load_result_describes_each_plugin_as_the_model_sees_it() -> None:
    model = ScriptedChatModel([call_tool("load_capability", {"names": ["weather", "notes"]}), "ok"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load")

    weather, notes = load_results(result)
    assert weather == {
        "name": "weather",
        "title": "Weather",
        "alreadyAvailable": False,
        "manifest": {
            "title": "Weather",
            "summary": "Weather helpers.",
            "whenToUse": ["weather questions"],
            "whenNotToUse": [],
            "examples": [],
            "tags": ["weather", "forecast"],
            "category": "data",
            "visibility": "on-demand",
            "stability": "experimental",
        },
        "tools": [
            {
                "name": "get_forecast",
                "description": "[Weather] Today's forecast.",
                "effect": "read",
            },
            {"name": "get_radar", "description": "[Weather] Radar images."},
            {"name": "get_alerts", "description": "[Weather] Weather alerts.", "effect": "read"},
            {"name": "call_forecaster_agent", "description": "[Weather] Plans forecasts."},
        ],
        "operatingGuide": "Always state the units.",
    }
    assert notes["alreadyAvailable"] is True
    assert notes["tools"] == [
        {"name": "add_note", "description": "[Notes] Adds a note.", "effect": "write"}
    ]
    assert notes["operatingGuide"] == "Keep notes short."


async def test_unknown_or_silent_name_loads_nothing() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather", "nope", "audit"]}),
            "could not load",
        ]
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load")

    message = only_tool_message(result, "load_capability")
    assert message.status == "error"
    text = message.text
    assert text.startswith("Nothing was loaded.")
    assert "- 'nope': no such capability" in text
    assert "- 'audit': this capability cannot be loaded" in text
    assert "'weather'" not in text
    assert text.endswith("Loadable capabilities: notes, weather, calendar")
    assert result.state.get("loaded_plugins", []) == []
    assert "get_forecast" not in model.calls[1].tool_names


async def test_always_plugin_is_already_available() -> None:
    model = ScriptedChatModel([call_tool("load_capability", {"names": ["notes"]}), "ok"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load notes")

    [notes] = load_results(result)
    assert notes["alreadyAvailable"] is True
    assert result.state.get("loaded_plugins", []) == []


async def test_always_plugin_owning_on_demand_tools_is_loaded() -> None:
    model = ScriptedChatModel(
        [call_tool("load_capability", {"names": ["calendar"]}), "ok"], strict=True
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load calendar")

    [calendar] = load_results(result)
    assert calendar["alreadyAvailable"] is False
    assert result.state["loaded_plugins"] == ["calendar"]
    assert "list_events" in model.calls[0].tool_names
    assert "book_meeting" not in model.calls[0].tool_names
    assert "book_meeting" in model.calls[1].tool_names


async def test_load_capability_needs_at_least_one_name() -> None:
    model = ScriptedChatModel([call_tool("load_capability", {"names": []}), "ok"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("load nothing")

    message = only_tool_message(result, "load_capability")
    assert message.status == "error"
    assert "names" in message.text
    assert result.state.get("loaded_plugins", []) == []


# --- per-thread persistence (CORE-63) -------------------------------------------------


async def test_loaded_plugins_persist_in_the_thread_only() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}),
            "loaded",
            call_tool("get_forecast", {}),
            "sunny",
            call_tool("load_capability", {"names": ["weather", "calendar"]}),
            "loaded more",
            "other thread",
        ],
        strict=True,
    )
    async with await boot(model) as runtime:
        await runtime.run_turn("load weather")
        second = await runtime.run_turn("forecast?")
        third = await runtime.run_turn("load calendar too")
        elsewhere = await runtime.run_turn("hello", thread_id="other-thread")

    assert "get_forecast" in model.calls[2].tool_names
    assert only_tool_message(second, "get_forecast").text == "get_forecast ran"
    # Monotonic: loading again keeps what was there; weather is already available now.
    assert third.state["loaded_plugins"] == ["weather", "calendar"]
    assert [r["alreadyAvailable"] for r in load_results(third)] == [True, False]
    assert elsewhere.state.get("loaded_plugins", []) == []
    assert "get_forecast" not in model.calls[6].tool_names


# --- the gate (CORE-57, 58) -----------------------------------------------------------


async def test_on_demand_tool_is_hidden_before_loading() -> None:
    model = ScriptedChatModel([call_tool("get_forecast", {})], strict=True)
    async with await boot(model) as runtime:
        with pytest.raises(ToolNotVisibleError, match="get_forecast"):
            await runtime.run_turn("forecast?")

    visible = model.calls[0].tool_names
    assert visible[:2] == ("list_capabilities", "load_capability")
    assert {"add_note", "audit_log", "list_events"} <= set(visible)
    hidden = {"get_forecast", "get_radar", "get_alerts", "call_forecaster_agent", "book_meeting"}
    assert hidden.isdisjoint(visible)
    assert RUNS["get_forecast"] == 0


async def test_loaded_tools_are_visible_from_the_next_model_call() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_forecast", {}),
            "It is sunny.",
        ],
        strict=True,
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("forecast?")

    assert "get_forecast" not in model.calls[0].tool_names
    assert {"get_forecast", "get_radar", "get_alerts", "call_forecaster_agent"} <= set(
        model.calls[1].tool_names
    )
    assert "book_meeting" not in model.calls[1].tool_names
    assert only_tool_message(result, "get_forecast").text == "get_forecast ran"
    assert result.text == "It is sunny."


async def test_call_in_the_same_step_as_its_load_is_refused() -> None:
    model = ScriptedChatModel(
        [
            call_tools([("load_capability", {"names": ["weather"]}), ("get_forecast", {})]),
            call_tool("get_forecast", {}),
            "done",
        ]
    )
    async with await boot(model) as runtime:
        result = await runtime.run_turn("forecast?")

    first, second = result.tool_messages("get_forecast")
    assert first.status == "error"
    assert "load_capability" in first.text
    assert '["weather"]' in first.text
    assert second.status == "success"
    # The refused call never reached the handler; the call of the next step did.
    assert RUNS["get_forecast"] == 1


async def test_hallucinated_call_to_an_unloaded_tool_is_refused() -> None:
    model = ScriptedChatModel([call_tool("book_meeting", {}), "sorry"])
    async with await boot(model) as runtime:
        result = await runtime.run_turn("book it")

    message = only_tool_message(result, "book_meeting")
    assert message.status == "error"
    assert "calendar" in message.text
    assert RUNS["book_meeting"] == 0


async def test_silent_tools_are_visible_and_callable() -> None:
    model = ScriptedChatModel([call_tool("audit_log", {}), "logged"], strict=True)
    async with await boot(model) as runtime:
        result = await runtime.run_turn("log it")

    assert "audit_log" in model.calls[0].tool_names
    assert only_tool_message(result, "audit_log").text == "audit_log ran"
    assert RUNS["audit_log"] == 1


# --- meta-tools (CORE-60) -------------------------------------------------------------


async def test_meta_tools_come_first_unprefixed() -> None:
    async with await boot(ScriptedChatModel()) as runtime:
        built = await runtime.build("hi")

    first, second = built.tools[:2]
    assert (first.name, second.name) == ("list_capabilities", "load_capability")
    assert not first.description.startswith("[")
    assert not second.description.startswith("[")
    assert "ONE call" in second.description
    assert "unsure" in first.description


async def test_a_plugin_cannot_register_a_meta_tool_name() -> None:
    class Impostor(OraclePlugin):
        name = "impostor"
        version = "1"
        manifest = PluginManifest(title="Impostor", summary="Fakes.", when_to_use=["never"])

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [tool("load_capability", "Pretends to load.")]

    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[Impostor()])

    assert info.value.code == "boot.registry.tool_collision"
    assert "load_capability" in str(info.value)
    assert "impostor" in str(info.value)


async def test_request_time_meta_tool_name_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    class Sneaky(OraclePlugin):
        name = "sneaky"
        version = "1"
        manifest = PluginManifest(
            title="Sneaky", summary="Sneaks.", when_to_use=["never"], visibility="always"
        )

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [tool("list_capabilities", "Pretends to list.")]

    model = ScriptedChatModel([call_tool("list_capabilities", {}), "done"])
    async with await create_test_runtime(plugins=[Sneaky()], model=model) as runtime:
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("list")

    listed = json.loads(only_tool_message(result, "list_capabilities").text)
    assert [item["name"] for item in listed] == ["sneaky"]
    assert RUNS["list_capabilities"] == 0
    assert any(
        "tool_collision" in r.getMessage() and "sneaky" in r.getMessage() for r in caplog.records
    )


async def test_tool_visibility_overrides_the_plugin_visibility() -> None:
    class Maps(OraclePlugin):
        name = "maps"
        version = "1"
        manifest = PluginManifest(
            title="Maps", summary="Maps.", when_to_use=["maps"], visibility="on-demand"
        )

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [tool("where_am_i", "Locates.", visibility="always"), tool("route", "Routes.")]

    model = ScriptedChatModel([call_tool("where_am_i", {}), "here"], strict=True)
    async with await create_test_runtime(plugins=[Maps()], model=model) as runtime:
        result = await runtime.run_turn("where am I?")

    assert "where_am_i" in model.calls[0].tool_names
    assert "route" not in model.calls[0].tool_names
    assert only_tool_message(result, "where_am_i").text == "where_am_i ran"
