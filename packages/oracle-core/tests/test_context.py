"""Tests of the contexts plugin code receives (CORE-42 … 48)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    AbortSignal,
    Emitter,
    History,
    OracleIdentity,
    OraclePlugin,
    PluginContext,
    PluginTool,
    ReadonlyState,
    RecordingEventSink,
    RuntimeContext,
    SessionInfo,
    TurnRequest,
    UserInfo,
    Visibility,
    plugin_tool,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    create_test_runtime,
)

# --- fixtures -------------------------------------------------------------------------


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = ""


class WeatherConfig(BaseModel):
    WEATHER_UNITS: str = "metric"


def make_manifest(title: str, visibility: Visibility = "always") -> dict[str, Any]:
    return {
        "title": title,
        "summary": f"{title} helpers.",
        "when_to_use": [f"{title.lower()} questions"],
        "visibility": visibility,
    }


class Recorder:
    """Collects the contexts plugin code was handed."""

    def __init__(self) -> None:
        self.boot: dict[str, PluginContext[Any]] = {}
        self.tool: list[RuntimeContext[Any]] = []
        self.request: list[RuntimeContext[Any]] = []


def capturing_tool(name: str, recorder: Recorder, reply_text: str = "ok") -> PluginTool:
    @plugin_tool(name=name, description=f"The {name} tool.", args_schema=Query)
    def handler(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
        recorder.tool.append(rt_ctx)
        return reply_text

    return handler


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = make_manifest("Weather")
    config_schema = WeatherConfig

    def __init__(self, recorder: Recorder, visibility: Visibility = "always") -> None:
        self.recorder = recorder
        self.manifest = make_manifest("Weather", visibility)

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        self.recorder.boot[self.name] = ctx
        return [capturing_tool("get_forecast", self.recorder)]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        self.recorder.request.append(rt_ctx)
        return []


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "2.0.0"
    manifest = make_manifest("Notes")

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        self.recorder.boot[self.name] = ctx
        return [capturing_tool("add_note", self.recorder)]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


async def boot(
    recorder: Recorder,
    model: ScriptedChatModel,
    *,
    weather_visibility: Visibility = "always",
    config: Mapping[str, str] | None = None,
    session: SessionInfo | None = None,
) -> TestRuntime:
    return await create_test_runtime(
        plugins=[WeatherPlugin(recorder, weather_visibility), NotesPlugin(recorder)],
        model=model,
        config=config,
        session=session,
    )


# --- PluginContext (CORE-42) ----------------------------------------------------------


async def test_plugin_context_is_scoped_to_each_plugin(recorder: Recorder) -> None:
    runtime = await boot(recorder, ScriptedChatModel(), config={"WEATHER_UNITS": "imperial"})
    async with runtime:
        weather = recorder.boot["weather"]
        notes = recorder.boot["notes"]

    assert type(weather) is PluginContext
    assert weather.plugin_name == "weather"
    assert weather.logger.name == "oracle.test.plugin.weather"
    assert isinstance(weather.plugin_config, WeatherConfig)
    assert weather.plugin_config.WEATHER_UNITS == "imperial"
    assert weather.config["WEATHER_UNITS"] == "imperial"
    assert weather.available_plugins == frozenset({"weather", "notes"})
    assert weather.identity.name == "Test Oracle"

    assert notes.plugin_name == "notes"
    assert notes.logger.name == "oracle.test.plugin.notes"
    assert notes.plugin_config is None
    assert notes.config is weather.config
    # Boot contexts carry no user, session or request data.
    for field in ("user", "session", "history", "tool_call_id"):
        assert not hasattr(weather, field)


async def test_plugin_config_defaults_apply_when_the_variable_is_unset(recorder: Recorder) -> None:
    async with await boot(recorder, ScriptedChatModel()):
        weather = recorder.boot["weather"]

    assert isinstance(weather.plugin_config, WeatherConfig)
    assert weather.plugin_config.WEATHER_UNITS == "metric"


# --- RuntimeContext (CORE-43, 47) -----------------------------------------------------


async def test_tool_handler_gets_a_runtime_context_scoped_to_its_plugin(
    recorder: Recorder,
) -> None:
    session = SessionInfo(id="thread-7", client="matrix", ws_id="ws-1", request_id="req-1")
    model = ScriptedChatModel([call_tool("get_forecast", {"text": "Paris"}, id="c-1"), "done"])
    async with await boot(recorder, model, session=session) as runtime:
        await runtime.run_turn("forecast please", thread_id="thread-7", client="matrix")

    [ctx] = recorder.tool
    assert isinstance(ctx, RuntimeContext)
    assert ctx.plugin_name == "weather"
    assert ctx.logger.name == "oracle.test.plugin.weather"
    assert isinstance(ctx.plugin_config, WeatherConfig)
    assert ctx.tool_call_id == "c-1"
    assert ctx.user == runtime.user
    assert ctx.session.id == "thread-7"
    assert ctx.session.client == "matrix"
    assert ctx.session.ws_id == "ws-1"
    assert ctx.session.request_id == "req-1"
    assert ctx.available_plugins == frozenset({"weather", "notes"})
    # The history is the thread as of the call: the user message and the calling AI message.
    assert [type(m) for m in ctx.history.messages] == [HumanMessage, AIMessage]
    assert ctx.history.messages[0].text == "forecast please"
    assert isinstance(ctx.history.state, ReadonlyState)
    assert ctx.history.state["client"] == "matrix"


async def test_for_plugin_differs_only_in_logger_and_plugin_config(recorder: Recorder) -> None:
    model = ScriptedChatModel([call_tool("get_forecast", {}), "done"])
    async with await boot(recorder, model) as runtime:
        await runtime.run_turn("hi")

    [ctx] = recorder.tool
    notes = ctx.for_plugin("notes")

    assert notes is not ctx
    assert notes.plugin_name == "notes"
    assert notes.logger.name == "oracle.test.plugin.notes"
    assert notes.plugin_config is None
    assert notes.user == ctx.user
    assert notes.session == ctx.session
    assert notes.history is ctx.history
    assert notes.loaded_plugins == ctx.loaded_plugins
    assert notes.tool_call_id == ctx.tool_call_id
    assert notes.blob_store is ctx.blob_store
    assert ctx.for_plugin("weather") is ctx
    # Scoping back restores the original plugin's view.
    back = notes.for_plugin("weather")
    assert back.logger.name == "oracle.test.plugin.weather"
    assert isinstance(back.plugin_config, WeatherConfig)


async def test_runtime_context_is_built_per_invocation(recorder: Recorder) -> None:
    model = ScriptedChatModel(
        [
            call_tool("get_forecast", {"text": "a"}, id="first"),
            call_tool("add_note", {"text": "b"}, id="second"),
            "done",
            call_tool("get_forecast", {"text": "c"}, id="third"),
            "done again",
        ]
    )
    async with await boot(recorder, model) as runtime:
        await runtime.run_turn("turn one")
        await runtime.run_turn("turn two")

    first, second, third = recorder.tool
    assert len({id(first), id(second), id(third)}) == 3
    assert [c.tool_call_id for c in recorder.tool] == ["first", "second", "third"]
    assert [c.plugin_name for c in recorder.tool] == ["weather", "notes", "weather"]
    # Each context sees the thread as of its own call.
    assert len(first.history.messages) == 2
    assert len(second.history.messages) == 4
    assert third.history.messages[-2].text == "turn two"
    assert len(third.history.messages) == 8


async def test_request_time_hooks_get_no_tool_call_id(recorder: Recorder) -> None:
    async with await boot(recorder, ScriptedChatModel(["hello"])) as runtime:
        await runtime.run_turn("hi")

    [ctx] = recorder.request
    assert ctx.tool_call_id is None
    assert ctx.plugin_name == "weather"
    assert ctx.logger.name == "oracle.test.plugin.weather"


async def test_loaded_plugins_is_thread_state_union_always_plugins(recorder: Recorder) -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_forecast", {}),
            "done",
            "second turn",
        ]
    )
    async with await boot(recorder, model, weather_visibility="on-demand") as runtime:
        await runtime.run_turn("turn one")
        await runtime.run_turn("turn two")

    before_load, after_load = recorder.request
    assert before_load.loaded_plugins == frozenset({"notes"})
    assert after_load.loaded_plugins == frozenset({"notes", "weather"})
    [tool_ctx] = recorder.tool
    # Loaded in this very turn: visible to the handler through the current state.
    assert tool_ctx.loaded_plugins == frozenset({"notes", "weather"})
    assert tool_ctx.history.state.loaded_plugins == frozenset({"weather"})


async def test_runtime_context_carries_the_turn_abort_signal(recorder: Recorder) -> None:
    signal = AbortSignal()
    model = ScriptedChatModel([call_tool("get_forecast", {}), "done"])
    async with await boot(recorder, model) as runtime:
        await runtime.runtime.run_turn(
            TurnRequest(
                user=runtime.user,
                session=SessionInfo(id="abort-thread"),
                message="hi",
                abort_signal=signal,
            )
        )

    [ctx] = recorder.tool
    assert ctx.abort_signal is signal
    assert ctx.session.id == "abort-thread"


async def test_handler_emits_events_tagged_with_session_and_request(recorder: Recorder) -> None:
    class EmittingPlugin(OraclePlugin):
        name = "emitter"
        version = "1"
        manifest = make_manifest("Emitter")

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            @plugin_tool(name="show_card", description="Shows a card.", args_schema=Query)
            def show(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
                assert rt_ctx.emit is not None
                rt_ctx.emit.render_component({"component": "card", "text": args.text})
                return "shown"

            return [show]

    session = SessionInfo(id="s-1", request_id="r-1")
    model = ScriptedChatModel([call_tool("show_card", {"text": "hi"}), "done"])
    async with await create_test_runtime(
        plugins=[EmittingPlugin()], model=model, session=session
    ) as runtime:
        result = await runtime.run_turn("show me")

    [event] = result.events
    assert event.name == "render_component"
    assert event.payload == {"component": "card", "text": "hi"}
    assert event.session_id == "s-1"
    assert event.request_id == "r-1"
    assert event.user_did == runtime.user.did


# --- shared state (CORE-48) -----------------------------------------------------------


class SharedRecorder:
    def __init__(self) -> None:
        self.reads = 0
        self.accessor_args: list[tuple[Any, RuntimeContext[Any]]] = []
        self.seen: dict[str, Any] = {}


class ProducerPlugin(OraclePlugin):
    name = "producer"
    version = "1"
    manifest = make_manifest("Producer")

    def __init__(self, shared: SharedRecorder) -> None:
        self.shared = shared

    def get_shared_state(self) -> dict[str, Any]:
        shared = self.shared

        def counter(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> int:
            shared.reads += 1
            shared.accessor_args.append((state, rt_ctx))
            return shared.reads

        def loaded(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> list[str]:
            return sorted(state.loaded_plugins)

        def broken(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> str:
            raise RuntimeError("producer backend down")

        return {"counter": counter, "loaded": loaded, "broken": broken}


class ConsumerPlugin(OraclePlugin):
    name = "consumer"
    version = "1"
    manifest = make_manifest("Consumer")
    soft_depends_on = ("producer",)

    def __init__(self, shared: SharedRecorder) -> None:
        self.shared = shared

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        seen = self.shared.seen

        @plugin_tool(name="read_shared", description="Reads shared state.", args_schema=Query)
        def read(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
            shared = rt_ctx.shared
            assert shared is not None
            seen["first"] = shared.counter
            seen["second"] = shared.counter
            seen["via_get"] = shared.get("counter")
            seen["loaded"] = shared.loaded
            seen["absent"] = shared.no_such_key
            seen["absent_default"] = shared.get("no_such_key", "fallback")
            seen["broken"] = shared.broken
            seen["broken_default"] = shared.get("broken", "fallback")
            seen["keys"] = shared.keys()
            with pytest.raises(AttributeError, match="read-only"):
                shared.counter = 99
            seen["after_assign"] = shared.get("counter")
            return "read"

        return [read]


class OnDemandPlugin(OraclePlugin):
    name = "maps"
    version = "1"
    manifest = make_manifest("Maps", "on-demand")


async def test_shared_state_reads_go_through_the_producer_accessor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = SharedRecorder()
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["maps"]}),
            call_tool("read_shared", {}),
            "done",
        ]
    )
    async with await create_test_runtime(
        plugins=[ProducerPlugin(shared), ConsumerPlugin(shared), OnDemandPlugin()], model=model
    ) as runtime:
        with caplog.at_level(logging.ERROR):
            await runtime.run_turn("read it")

    seen = shared.seen
    # Evaluated on every read: three reads, three values.
    assert (seen["first"], seen["second"], seen["via_get"]) == (1, 2, 3)
    assert seen["after_assign"] == 4
    # The accessor sees the state of the moment (the load made earlier this turn).
    assert seen["loaded"] == ["maps"]
    assert seen["absent"] is None
    assert seen["absent_default"] == "fallback"
    assert seen["broken"] is None
    assert seen["broken_default"] == "fallback"
    assert seen["keys"] == frozenset({"counter", "loaded", "broken"})

    state, producer_ctx = shared.accessor_args[0]
    assert isinstance(state, ReadonlyState)
    assert producer_ctx.plugin_name == "producer"
    assert producer_ctx.logger.name == "oracle.test.plugin.producer"
    assert producer_ctx.tool_call_id == "call_2"

    failures = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len(failures) == 2
    assert all("producer" in r.getMessage() for r in failures)
    assert all(r.exc_info is not None for r in failures)


# --- AbortSignal (CORE-46) ------------------------------------------------------------


def test_abort_signal_starts_clear() -> None:
    signal = AbortSignal()

    assert signal.aborted is False
    assert signal.reason is None
    signal.raise_if_aborted()  # no error while not aborted


def test_abort_sets_reason_once_and_raise_if_aborted_raises_cancelled() -> None:
    signal = AbortSignal()

    signal.abort("client disconnected")
    signal.abort("second reason")

    assert signal.aborted is True
    assert signal.reason == "client disconnected"
    with pytest.raises(asyncio.CancelledError) as info:
        signal.raise_if_aborted()
    assert info.value.args == ("client disconnected",)


async def test_abort_signal_wait_returns_once_aborted() -> None:
    signal = AbortSignal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()

    signal.abort()
    await asyncio.wait_for(waiter, timeout=1)

    assert waiter.done()
    assert signal.reason == "aborted"


# --- Emitter and History --------------------------------------------------------------


def test_emitter_records_every_event_kind_with_session_ids() -> None:
    sink = RecordingEventSink()
    emitter = Emitter(sink, SessionInfo(id="s-9", request_id="r-9"), "did:key:u")
    payload = {"n": 1}

    emitter.tool_call(payload)
    emitter.action_call(payload)
    emitter.render_component(payload)
    emitter.reasoning(payload)
    emitter.browser_tool_call(payload)
    emitter.router(payload)
    emitter.message_cache_invalidation(payload)
    payload["n"] = 2

    assert sink.names() == [
        "tool_call",
        "action_call",
        "render_component",
        "reasoning",
        "browser_tool_call",
        "router",
        "message_cache_invalidation",
    ]
    for event in sink.events:
        assert event.session_id == "s-9"
        assert event.request_id == "r-9"
        assert event.user_did == "did:key:u"
        # The payload is copied at emit time.
        assert event.payload == {"n": 1}


def test_history_recent_and_user_context() -> None:
    messages = (HumanMessage("a"), AIMessage("b"), HumanMessage("c"))
    state = ReadonlyState({"messages": list(messages), "user_context": {"work": "Engineer"}})
    history = History(messages, state)

    assert [m.text for m in history.recent(2)] == ["b", "c"]
    assert [m.text for m in history.recent(10)] == ["a", "b", "c"]
    assert history.recent(0) == ()
    assert history.recent(-1) == ()
    assert history.user_context["work"] == "Engineer"
    assert history.user_context["identity"] is None


def test_with_state_refreshes_history_and_adds_loaded_plugins() -> None:
    base: RuntimeContext[Any] = RuntimeContext(
        config={},
        plugin_config=None,
        identity=OracleIdentity(name="Test Oracle"),
        available_plugins=frozenset({"notes", "weather"}),
        logger=logging.getLogger("oracle.test"),
        user=UserInfo(did="did:key:u"),
        loaded_plugins=frozenset({"notes"}),
    )

    ctx = base.with_state(
        {"messages": [HumanMessage("hi")], "loaded_plugins": ["weather"]}, tool_call_id="c-9"
    )

    assert ctx.loaded_plugins == frozenset({"notes", "weather"})
    assert [m.text for m in ctx.history.messages] == ["hi"]
    assert ctx.tool_call_id == "c-9"
    assert base.tool_call_id is None
    assert base.history.messages == ()
    # Without a scope there is nothing to re-scope to.
    assert base.for_plugin("weather") is base


async def test_failing_accessor_is_logged_under_the_producer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CORE-48: the failure is logged under the producer, i.e. on its plugin logger."""
    shared = SharedRecorder()
    model = ScriptedChatModel([call_tool("read_shared", {}), "done"])
    async with await create_test_runtime(
        plugins=[ProducerPlugin(shared), ConsumerPlugin(shared)], model=model
    ) as runtime:
        with caplog.at_level(logging.ERROR):
            await runtime.run_turn("read it")

    failures = [r for r in caplog.records if "broken" in r.getMessage()]
    assert failures
    assert {r.name for r in failures} == {"oracle.test.plugin.producer"}
