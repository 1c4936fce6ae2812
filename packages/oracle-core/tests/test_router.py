"""Tests of the capability router: the lexical router and its use per turn (CORE-64)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    LexicalCapabilityRouter,
    MainAgentHooks,
    ManifestExample,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RouterInput,
    RuntimeContext,
    plugin_tool,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    create_test_runtime,
)

# --- fixtures -------------------------------------------------------------------------

WEATHER = PluginManifest(
    title="Weather",
    summary="Forecasts and current conditions.",
    when_to_use=["forecast or rain questions", "temperature in a city"],
    tags=["weather", "forecast"],
    examples=[ManifestExample(user="Will it rain in Paris tomorrow?", tool="get_forecast")],
)
CALENDAR = PluginManifest(
    title="Calendar",
    summary="Meetings and events.",
    when_to_use=["booking a meeting", "checking the schedule"],
    tags=["calendar", "meeting"],
)
NOTES = PluginManifest(
    title="Notes",
    summary="Keeps notes.",
    when_to_use=["remembering things for later"],
    tags=["notes"],
)
MANIFESTS = {"weather": WEATHER, "calendar": CALENDAR, "notes": NOTES}
WEATHER_GUIDE = "Always state the units."


def route_input(text: str, loaded: Sequence[str] = ()) -> RouterInput:
    return RouterInput(text=text, loaded_plugins=frozenset(loaded), manifests=MANIFESTS)


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def tool(name: str) -> PluginTool:
    @plugin_tool(name=name, description=f"The {name} tool.", args_schema=NoArgs)
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return f"{name} ran"

    return handler


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1"
    manifest = WEATHER
    operating_guide = WEATHER_GUIDE

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("get_forecast")]


class CalendarPlugin(OraclePlugin):
    name = "calendar"
    version = "1"
    manifest = CALENDAR

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("book_meeting")]


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "1"
    manifest = NOTES.model_copy(update={"visibility": "always"})

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [tool("add_note")]


class AuditPlugin(OraclePlugin):
    name = "audit"
    version = "1"
    manifest = PluginManifest(title="Audit", summary="Audit trail.", visibility="silent")


class RecordingRouter:
    """A host router returning fixed names and recording what it was given."""

    def __init__(self, names: Sequence[str] = (), error: Exception | None = None) -> None:
        self.names = list(names)
        self.error = error
        self.inputs: list[RouterInput] = []

    async def __call__(self, request: RouterInput) -> Sequence[str]:
        self.inputs.append(request)
        if self.error is not None:
            raise self.error
        return self.names


async def boot(model: ScriptedChatModel, router: Any) -> TestRuntime:
    return await create_test_runtime(
        plugins=[WeatherPlugin(), CalendarPlugin(), NotesPlugin(), AuditPlugin()],
        model=model,
        hooks=MainAgentHooks(capability_router=router),
    )


# --- LexicalCapabilityRouter ----------------------------------------------------------


async def test_lexical_router_picks_the_matching_plugin() -> None:
    router = LexicalCapabilityRouter()

    assert await router(route_input("Will it rain in Paris tomorrow?")) == ["weather"]
    assert await router(route_input("Please book a meeting with Sam")) == ["calendar"]
    assert await router(route_input("What is the temperature forecast in Rome?")) == ["weather"]


async def test_lexical_router_matches_light_inflections() -> None:
    router = LexicalCapabilityRouter()

    # "forecasts" and "calendars" reach the tags "forecast" and "calendar".
    assert await router(route_input("any forecasts?")) == ["weather"]
    assert await router(route_input("show my calendars")) == ["calendar"]


async def test_lexical_router_returns_nothing_for_unrelated_or_empty_text() -> None:
    router = LexicalCapabilityRouter()

    assert await router(route_input("Tell me a joke about penguins")) == []
    assert await router(route_input("")) == []
    assert await router(route_input("   ")) == []


async def test_lexical_router_ignores_loaded_plugins() -> None:
    router = LexicalCapabilityRouter()

    assert await router(route_input("Will it rain tomorrow?", loaded=["weather"])) == []


def test_score_is_zero_without_shared_terms() -> None:
    scores = LexicalCapabilityRouter().score("rain tomorrow", MANIFESTS)

    assert set(scores) == {"weather", "calendar", "notes"}
    assert scores["weather"] > 0
    assert scores["calendar"] == 0
    assert scores["notes"] == 0


async def test_max_plugins_limits_the_preload() -> None:
    text = "rain forecast and a calendar meeting"
    scores = LexicalCapabilityRouter().score(text, MANIFESTS)
    assert scores["weather"] > 0
    assert scores["calendar"] > 0

    both = LexicalCapabilityRouter(max_plugins=2, min_score=0.1, relative_cutoff=0.0)
    one = LexicalCapabilityRouter(max_plugins=1, min_score=0.1, relative_cutoff=0.0)

    assert sorted(await both(route_input(text))) == ["calendar", "weather"]
    best = max(("calendar", "weather"), key=lambda n: scores[n])
    assert await one(route_input(text)) == [best]


async def test_min_score_and_relative_cutoff_filter_weak_matches() -> None:
    text = "rain forecast temperature for my meeting"
    scores = LexicalCapabilityRouter().score(text, MANIFESTS)
    ratio = scores["calendar"] / scores["weather"]
    assert 0 < ratio < 1

    lenient = LexicalCapabilityRouter(min_score=0.0, relative_cutoff=ratio - 0.01)
    strict_ratio = LexicalCapabilityRouter(min_score=0.0, relative_cutoff=ratio + 0.01)
    high_floor = LexicalCapabilityRouter(min_score=scores["weather"] + 0.01)

    assert await lenient(route_input(text)) == ["weather", "calendar"]
    assert await strict_ratio(route_input(text)) == ["weather"]
    assert await high_floor(route_input(text)) == []


async def test_equal_scores_are_ordered_by_name() -> None:
    twin = CALENDAR.model_copy(update={"title": "Agenda"})
    manifests = {"zeta": CALENDAR, "alpha": twin}
    router = LexicalCapabilityRouter(max_plugins=1, min_score=0.1)

    picked = await router(RouterInput("meeting", frozenset(), manifests))

    assert picked == ["alpha"]


# --- the router in a turn -------------------------------------------------------------


async def test_preloaded_plugin_is_usable_this_turn_only() -> None:
    model = ScriptedChatModel(
        [call_tool("get_forecast", {}), "Sunny.", "You're welcome."], strict=True
    )
    async with await boot(model, LexicalCapabilityRouter()) as runtime:
        first = await runtime.run_turn("Will it rain in Paris tomorrow?")
        second = await runtime.run_turn("thanks")

    assert "get_forecast" in model.calls[0].tool_names
    assert "book_meeting" not in model.calls[0].tool_names
    [forecast] = first.tool_messages("get_forecast")
    assert forecast.status == "success"
    assert forecast.text == "get_forecast ran"
    # Not persisted: the thread loaded nothing, and the next turn hides the tool again.
    assert first.state.get("loaded_plugins", []) == []
    assert second.state.get("loaded_plugins", []) == []
    assert "get_forecast" not in model.calls[2].tool_names


async def test_preload_is_reported_by_a_router_event() -> None:
    model = ScriptedChatModel(["Sunny.", "Bye."])
    async with await boot(model, LexicalCapabilityRouter()) as runtime:
        first = await runtime.run_turn("Will it rain tomorrow?")
        second = await runtime.run_turn("goodbye")

    [event] = first.events
    assert event.name == "router"
    assert event.payload == {"preloaded": ["weather"]}
    assert event.session_id == "test-thread"
    assert event.user_did == runtime.user.did
    assert second.events == []


async def test_preloaded_plugins_get_no_operating_guide() -> None:
    model = ScriptedChatModel(
        ["Sunny.", call_tool("load_capability", {"names": ["weather"]}), "Loaded.", "Hello."]
    )
    async with await boot(model, LexicalCapabilityRouter()) as runtime:
        await runtime.run_turn("Will it rain tomorrow?")
        await runtime.run_turn("load it for good")
        await runtime.run_turn("hi")

    preloaded_prompt = model.calls[0].system_prompt
    loaded_prompt = model.calls[3].system_prompt
    assert preloaded_prompt is not None
    assert loaded_prompt is not None
    assert WEATHER_GUIDE not in preloaded_prompt
    assert f"### Weather\n{WEATHER_GUIDE}" in loaded_prompt


async def test_router_gets_the_text_loaded_set_and_on_demand_manifests() -> None:
    router = RecordingRouter()
    model = ScriptedChatModel(
        ["hi", call_tool("load_capability", {"names": ["weather", "calendar"]}), "ok", "hey"]
    )
    async with await boot(model, router) as runtime:
        await runtime.run_turn("first message")
        await runtime.run_turn("load both")
        await runtime.run_turn("third message")

    first, second = router.inputs
    assert first.text == "first message"
    assert first.loaded_plugins == frozenset()
    # Only on-demand plugins, in topological order; never always or silent ones.
    assert list(first.manifests) == ["calendar", "weather"]
    assert first.manifests["weather"] == WEATHER
    assert second.text == "load both"
    # Nothing left to preload after the load: the router is not called on turn three.
    assert len(router.inputs) == 2


async def test_router_failure_means_no_preload(caplog: pytest.LogCaptureFixture) -> None:
    router = RecordingRouter(error=RuntimeError("router backend down"))
    model = ScriptedChatModel(["I can load weather first."], strict=True)
    async with await boot(model, router) as runtime:
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("Will it rain tomorrow?")

    assert len(router.inputs) == 1
    assert "get_forecast" not in model.calls[0].tool_names
    assert result.events == []
    assert result.text == "I can load weather first."
    assert any(
        "capability router failed" in r.getMessage() and r.exc_info is not None
        for r in caplog.records
    )


async def test_names_that_are_not_on_demand_plugins_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    router = RecordingRouter(["notes", "ghost", "audit", "weather", "weather"])
    model = ScriptedChatModel([call_tool("get_forecast", {}), "Sunny."], strict=True)
    async with await boot(model, router) as runtime:
        with caplog.at_level(logging.WARNING):
            result = await runtime.run_turn("anything")

    [event] = result.events
    assert event.payload == {"preloaded": ["weather"]}
    assert "get_forecast" in model.calls[0].tool_names
    assert "book_meeting" not in model.calls[0].tool_names
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("notes, ghost, audit" in w for w in warnings)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("meetings", "meeting"),
        ("invoices", "invoice"),
        ("forecasting", "forecasts"),
        ("studies", "study"),
    ],
)
def test_inflections_of_one_word_share_a_term(a: str, b: str) -> None:
    from oracle_core._router import terms

    assert terms(a) == terms(b)
