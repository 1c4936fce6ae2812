"""Tests of ``create_test_runtime`` and ``TestRuntime`` (CORE-90, 92, 93)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, ValidationError

from oracle_core import (
    CapabilityDeniedError,
    CapabilityGrant,
    MiddlewareContractError,
    NotConfiguredError,
    OraclePlugin,
    OracleRunContext,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    UnknownModelRoleError,
    plugin_tool,
)
from oracle_core.testing import (
    RecordingMatrixService,
    ScriptedChatModel,
    ScriptExhaustedError,
    TestRuntime,
    TurnResult,
    call_tool,
    create_test_runtime,
    reply,
)

# --- fixtures -------------------------------------------------------------------------


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    city: str


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WeatherConfig(BaseModel):
    WEATHER_UNITS: str = "metric"


class Probe:
    """What the plugins under test saw."""

    def __init__(self) -> None:
        self.contexts: list[RuntimeContext[Any]] = []
        self.wrapped_tool_calls: list[str] = []
        self.lifespan: list[str] = []
        self.before_model: list[tuple[Mapping[str, Any], Runtime[Any]]] = []


class RecordingToolMiddleware(AgentMiddleware[AgentState[Any], Any]):
    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        self.probe.wrapped_tool_calls.append(request.tool_call["name"])
        return await handler(request)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        self.probe.wrapped_tool_calls.append(request.tool_call["name"])
        return handler(request)


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.2.3"
    manifest = PluginManifest(
        title="Weather",
        summary="Forecasts.",
        when_to_use=["forecast questions"],
        visibility="on-demand",
    )
    config_schema = WeatherConfig

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        probe = self.probe

        @plugin_tool(name="get_forecast", description="Forecast for a city.", args_schema=CityArgs)
        def forecast(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            probe.contexts.append(rt_ctx)
            units = rt_ctx.plugin_config.WEATHER_UNITS
            return {"city": args.city, "units": units}

        @plugin_tool(name="set_space", description="Sets the space.", args_schema=NoArgs)
        def set_space(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> Command[Any]:
            return Command(update={"space_id": "chosen"})

        return [forecast, set_space]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [PluginSubAgent(name="planner", description="Plans trips.", system_prompt="Plan.")]

    def get_middlewares(self, ctx: PluginContext[Any]) -> list[AgentMiddleware[Any, Any]]:
        return [RecordingToolMiddleware(self.probe)]

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[Any]) -> AsyncIterator[None]:
        self.probe.lifespan.append(f"enter {ctx.plugin_name}")
        yield
        self.probe.lifespan.append(f"exit {ctx.plugin_name}")


class ServicesPlugin(OraclePlugin):
    """Exposes each ambient service through a tool, for the fakes tests."""

    name = "services"
    version = "0.1.0"
    manifest = PluginManifest(
        title="Services", summary="Service probes.", when_to_use=["tests"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="read_secret", description="Reads a secret.", args_schema=NoArgs)
        async def read_secret(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            assert rt_ctx.secrets is not None
            index = [entry.name for entry in await rt_ctx.secrets.get_index()]
            return {"index": index, "values": await rt_ctx.secrets.get_values(["API_KEY"])}

        @plugin_tool(name="post", description="Posts to a room.", args_schema=NoArgs)
        async def post(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            assert rt_ctx.matrix is not None
            event_id = await rt_ctx.matrix.post_to_room("!room:test", {"body": "hello"})
            event = await rt_ctx.matrix.get_event_by_id("!room:test", event_id)
            state = await rt_ctx.matrix.get_room_state("!room:test")
            return json.dumps({"event_id": event_id, "event": event, "state": state})

        @plugin_tool(name="check", description="Checks capabilities.", args_schema=NoArgs)
        async def check(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            ucan = rt_ctx.ucan
            assert ucan is not None
            try:
                minted: str | None = await ucan.mint_invocation("did:web:svc", "entity/read")
            except NotConfiguredError:
                minted = None
            return {
                "read": ucan.has_capability("ixo:entity:1", "entity/read"),
                "write": ucan.has_capability("ixo:entity:1", "entity/write"),
                "entity_2": ucan.has_capability("ixo:entity:2", "*"),
                "signing": ucan.has_signing_key(),
                "minted": minted,
            }

        @plugin_tool(name="blobs", description="Stores a blob.", args_schema=NoArgs)
        async def blobs(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            store = rt_ctx.blob_store
            assert store is not None
            blob_id = await store.put(user_did=rt_ctx.user.did, name="car", value="secret")
            mine = await store.get(user_did=rt_ctx.user.did, blob_id=blob_id)
            theirs = await store.get(user_did="did:key:someone-else", blob_id=blob_id)
            return {
                "valid": store.is_valid_blob_id(blob_id),
                "mine": None if mine is None else mine.value,
                "theirs": theirs,
            }

        @plugin_tool(name="models", description="Reads the model roles.", args_schema=NoArgs)
        def models(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            llm = rt_ctx.llm
            assert llm is not None
            try:
                llm.get("nonexistent-role")
                unknown = "no error"
            except UnknownModelRoleError:
                unknown = "UnknownModelRoleError"
            return {
                "main": llm.get("main").name,
                "utility": llm.get("utility").name,
                "unknown": unknown,
            }

        return [read_secret, post, check, blobs, models]


@pytest.fixture
def probe() -> Probe:
    return Probe()


async def boot(probe: Probe, **kwargs: Any) -> TestRuntime:
    return await create_test_runtime(plugins=[WeatherPlugin(probe)], **kwargs)


# --- list_tools -----------------------------------------------------------------------


async def test_list_tools_lists_meta_tools_first(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        names = await runtime.list_tools()

    assert names == [
        "list_capabilities",
        "load_capability",
        "get_forecast",
        "set_space",
        "call_planner_agent",
    ]


# --- invoke_tool ----------------------------------------------------------------------


async def test_invoke_tool_runs_the_handler_and_encodes_the_result(probe: Probe) -> None:
    async with await boot(probe, config={"WEATHER_UNITS": "imperial"}) as runtime:
        result = await runtime.invoke_tool("get_forecast", {"city": "Oslo"})

    assert result == '{"city": "Oslo", "units": "imperial"}'
    [ctx] = probe.contexts
    assert ctx.tool_call_id == "call_test"
    assert ctx.plugin_name == "weather"


async def test_invoke_tool_validates_arguments(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        with pytest.raises(ValidationError):
            await runtime.invoke_tool("get_forecast", {"town": "Oslo"})

    assert probe.contexts == []


async def test_invoke_tool_bypasses_gate_and_middleware(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        # weather is on-demand and not loaded: a model could not call it yet.
        await runtime.invoke_tool(
            "get_forecast",
            {"city": "Oslo"},
            state={"space_id": "space-1"},
            tool_call_id="my-call",
        )

    assert probe.wrapped_tool_calls == []
    [ctx] = probe.contexts
    assert ctx.tool_call_id == "my-call"
    assert ctx.history.state["space_id"] == "space-1"


async def test_invoke_tool_returns_commands_as_is(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        result = await runtime.invoke_tool("set_space", {})

    assert isinstance(result, Command)
    assert result.update == {"space_id": "chosen"}


async def test_invoke_tool_refuses_unknown_names_and_sub_agents(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        with pytest.raises(KeyError, match="no_such_tool"):
            await runtime.invoke_tool("no_such_tool", {})
        with pytest.raises(TypeError, match="invoke_sub_agent"):
            await runtime.invoke_tool("call_planner_agent", {"task": "x"})


class ScoutPlugin(OraclePlugin):
    """Two sub-agents; ``lookup`` is a tool only they can call, ``locate`` only ``finder``."""

    name = "scout"
    version = "0.1.0"
    manifest = PluginManifest(
        title="Scout", summary="Finds places.", when_to_use=["places"], visibility="always"
    )
    config_schema = WeatherConfig

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        probe = self.probe

        def tool(name: str, answer: str) -> PluginTool:
            def handler(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
                probe.contexts.append(rt_ctx)
                return {"city": args.city, "by": answer}

            return PluginTool(
                name=name, description=f"{name} a city.", args_schema=CityArgs, handler=handler
            )

        return [
            PluginSubAgent(
                name="finder",
                description="Finds places.",
                system_prompt="Find.",
                tools=[tool("lookup", "finder"), tool("locate", "finder")],
            ),
            PluginSubAgent(
                name="mapper",
                description="Maps places.",
                system_prompt="Map.",
                tools=lambda _ctx: [tool("lookup", "mapper")],
            ),
        ]


async def test_invoke_tool_reaches_tools_only_a_sub_agent_sees(probe: Probe) -> None:
    runtime = await create_test_runtime(
        plugins=[ScoutPlugin(probe)],
        config={"WEATHER_UNITS": "imperial"},
        state={"space_id": "parent-space"},
    )
    async with runtime:
        assert "locate" not in await runtime.list_tools()
        located = await runtime.invoke_tool("locate", {"city": "Oslo"}, tool_call_id="c-1")
        first = await runtime.invoke_tool("lookup", {"city": "Bergen"})
        mapped = await runtime.invoke_tool("lookup", {"city": "Bergen"}, sub_agent="mapper")
        by_tool_name = await runtime.invoke_tool(
            "lookup", {"city": "Bergen"}, sub_agent="call_mapper_agent"
        )
        with pytest.raises(ValidationError):
            await runtime.invoke_tool("locate", {"town": "Oslo"})
        with pytest.raises(KeyError, match="in sub-agents: locate, lookup"):
            await runtime.invoke_tool("nowhere", {})
        with pytest.raises(KeyError, match="no sub-agent named 'nobody'"):
            await runtime.invoke_tool("lookup", {"city": "x"}, sub_agent="nobody")
        with pytest.raises(KeyError, match="locate"):
            await runtime.invoke_tool("locate", {"city": "x"}, sub_agent="mapper")

    assert json.loads(located) == {"city": "Oslo", "by": "finder"}
    assert json.loads(first) == {"city": "Bergen", "by": "finder"}  # first sub-agent wins
    assert json.loads(mapped) == json.loads(by_tool_name) == {"city": "Bergen", "by": "mapper"}
    ctx = probe.contexts[0]
    # The context a sub-agent's tool gets: the plugin's scope, the call id, the user,
    # and no parent state (a sub-agent sees none of the thread).
    assert ctx.plugin_name == "scout"
    assert ctx.plugin_config.WEATHER_UNITS == "imperial"
    assert ctx.tool_call_id == "c-1"
    assert ctx.user.did == runtime.user.did
    assert ctx.history.state.get("space_id") is None
    assert probe.contexts[1].tool_call_id == "call_test"


async def test_model_calls_do_go_through_plugin_middleware(probe: Probe) -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_forecast", {"city": "Oslo"}),
            "done",
        ]
    )
    async with await boot(probe, model=model) as runtime:
        await runtime.run_turn("forecast")

    assert probe.wrapped_tool_calls == ["load_capability", "get_forecast"]


# --- invoke_sub_agent -----------------------------------------------------------------


async def test_invoke_sub_agent_by_tool_or_plain_name(probe: Probe) -> None:
    sub_model = ScriptedChatModel(["Plan A.", "Plan B."])
    async with await boot(probe, models={"subagent": sub_model}) as runtime:
        first = await runtime.invoke_sub_agent("call_planner_agent", "Plan a trip to Oslo.")
        second = await runtime.invoke_sub_agent("planner", "Plan a trip to Bergen.")
        with pytest.raises(KeyError, match="nobody"):
            await runtime.invoke_sub_agent("nobody", "task")

    assert (first, second) == ("Plan A.", "Plan B.")
    assert sub_model.calls[0].messages[-1].text == "Plan a trip to Oslo."


# --- invoke_middleware ----------------------------------------------------------------


class NodeMiddleware(AgentMiddleware[AgentState[Any], Any]):
    def __init__(self, probe: Probe, result: Any) -> None:
        super().__init__()
        self.probe = probe
        self.result = result

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> Any:
        self.probe.before_model.append((state, runtime))
        return self.result


def middleware_plugin(probe: Probe, result: Any) -> OraclePlugin:
    class Guard(OraclePlugin):
        name = "guard"
        version = "1"
        manifest = PluginManifest(
            title="Guard", summary="Guards.", when_to_use=["always"], visibility="always"
        )

        def get_middlewares(self, ctx: PluginContext[Any]) -> list[AgentMiddleware[Any, Any]]:
            return [NodeMiddleware(probe, result)]

    return Guard()


async def test_invoke_middleware_enforces_the_contract(probe: Probe) -> None:
    async with await create_test_runtime(plugins=[middleware_plugin(probe, {"x": 1})]) as rt:
        with pytest.raises(MiddlewareContractError) as info:
            await rt.invoke_middleware("guard", "before_model")

    assert info.value.plugin == "guard"
    assert info.value.hook == "before_model"
    assert info.value.keys == ("x",)
    assert info.value.code == "turn.middleware.contract"


@pytest.mark.parametrize("allowed", [None, {"jump_to": "end"}])
async def test_invoke_middleware_returns_allowed_results(probe: Probe, allowed: Any) -> None:
    async with await create_test_runtime(
        plugins=[middleware_plugin(probe, allowed)], state={"space_id": "base"}
    ) as runtime:
        results = await runtime.invoke_middleware(
            "guard", "before_model", state={"editor_room_id": "!page"}
        )

    assert results == [allowed]
    [(state, hook_runtime)] = probe.before_model
    assert state["messages"] == []
    assert state["space_id"] == "base"
    assert state["editor_room_id"] == "!page"
    assert isinstance(hook_runtime.context, OracleRunContext)
    assert hook_runtime.context.runtime_context is not None


async def test_invoke_middleware_rejects_unknown_plugins_and_wrap_hooks(probe: Probe) -> None:
    async with await create_test_runtime(plugins=[middleware_plugin(probe, None)]) as runtime:
        with pytest.raises(KeyError, match="ghost"):
            await runtime.invoke_middleware("ghost", "before_model")
        with pytest.raises(TypeError, match="run_turn"):
            await runtime.invoke_middleware("guard", "wrap_tool_call")


# --- list_capabilities, get_manifest, status ------------------------------------------


async def test_list_capabilities_returns_the_payload(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        listed = await runtime.list_capabilities()

    assert [(item["name"], item["loaded"]) for item in listed] == [("weather", False)]


async def test_get_manifest_returns_the_merged_manifest(probe: Probe) -> None:
    async with await boot(
        probe, manifest_overrides={"weather": {"summary": "Overridden.", "visibility": "always"}}
    ) as runtime:
        manifest = runtime.get_manifest("weather")
        listed = await runtime.list_capabilities()

    assert manifest.summary == "Overridden."
    assert manifest.visibility == "always"
    assert manifest.title == "Weather"
    assert listed[0]["visibility"] == "always"


async def test_status_reports_loaded_excluded_and_versions(probe: Probe) -> None:
    async with await create_test_runtime(
        plugins=[WeatherPlugin(probe), ServicesPlugin()], features={"services": False}
    ) as runtime:
        status = runtime.status()

    assert status.loaded == ["weather"]
    assert status.versions == {"weather": "1.2.3"}
    [excluded] = status.excluded
    assert (excluded.plugin, excluded.code) == ("services", "feature_disabled")


# --- assertions -----------------------------------------------------------------------


async def test_assert_manifest_valid(probe: Probe) -> None:
    class Wordy(OraclePlugin):
        name = "wordy"
        version = "1"
        manifest = PluginManifest(title="Wordy", summary="x" * 130, when_to_use=["talking"])

    async with await create_test_runtime(plugins=[WeatherPlugin(probe), Wordy()]) as runtime:
        runtime.assert_manifest_valid()
        with pytest.raises(AssertionError, match=r"\[wordy\] summary"):
            runtime.assert_manifest_valid(allow_warnings=False)


async def test_assert_no_collisions(probe: Probe) -> None:
    class Shadow(OraclePlugin):
        name = "shadow"
        version = "1"
        manifest = PluginManifest(title="Shadow", summary="Shadows.", when_to_use=["never"])
        depends_on = ("weather",)

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return list(self.tools)

        tools: tuple[PluginTool, ...] = ()

    shadow = Shadow()
    async with await create_test_runtime(plugins=[WeatherPlugin(probe), shadow]) as runtime:
        await runtime.assert_no_collisions()
        shadow.tools = (
            PluginTool(
                name="get_forecast",
                description="A second forecast.",
                args_schema=NoArgs,
                handler=lambda args, ctx: "shadow",
            ),
        )
        with pytest.raises(AssertionError, match="get_forecast"):
            await runtime.assert_no_collisions()


# --- run_turn and lifecycle -----------------------------------------------------------


async def test_run_turn_returns_messages_tool_calls_state_and_events(probe: Probe) -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}, id="c1"),
            call_tool("get_forecast", {"city": "Oslo"}, id="c2"),
            reply("Oslo is fine."),
        ]
    )
    async with await boot(probe, model=model) as runtime:
        result = await runtime.run_turn("forecast for Oslo")

    assert isinstance(result, TurnResult)
    assert isinstance(result.messages[0], HumanMessage)
    assert result.messages[0].text == "forecast for Oslo"
    assert [type(m) for m in result.messages] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    assert [(c["name"], c["args"], c["id"]) for c in result.tool_calls] == [
        ("load_capability", {"names": ["weather"]}, "c1"),
        ("get_forecast", {"city": "Oslo"}, "c2"),
    ]
    assert result.state["loaded_plugins"] == ["weather"]
    assert result.state["messages"][-1].text == "Oslo is fine."
    assert result.text == "Oslo is fine."
    assert [m.name for m in result.tool_messages()] == ["load_capability", "get_forecast"]
    assert result.events == []


async def test_run_turn_reports_only_this_turn(probe: Probe) -> None:
    model = ScriptedChatModel(["first", "second", "elsewhere"])
    async with await boot(probe, model=model) as runtime:
        await runtime.run_turn("one")
        second = await runtime.run_turn("two")
        other = await runtime.run_turn("three", thread_id="other-thread", client="slack")

    assert [m.text for m in second.messages] == ["two", "second"]
    assert [m.text for m in second.state["messages"]] == ["one", "first", "two", "second"]
    assert [m.text for m in other.messages] == ["three", "elsewhere"]
    assert other.state["client"] == "slack"
    prompt = model.calls[2].system_prompt
    assert prompt is not None
    assert "## Slack Formatting" in prompt


async def test_default_model_is_an_empty_script(probe: Probe) -> None:
    async with await boot(probe) as runtime:
        assert isinstance(runtime.model, ScriptedChatModel)
        with pytest.raises(ScriptExhaustedError):
            await runtime.run_turn("hello")


async def test_async_with_closes_lifespans(probe: Probe) -> None:
    runtime = await boot(probe)
    assert probe.lifespan == ["enter weather"]

    async with runtime:
        assert probe.lifespan == ["enter weather"]

    assert probe.lifespan == ["enter weather", "exit weather"]
    await runtime.aclose()
    assert probe.lifespan == ["enter weather", "exit weather"]


# --- fakes of create_test_runtime (CORE-92) -------------------------------------------


async def run_probe(runtime: TestRuntime, tool_name: str) -> Any:
    return json.loads(await runtime.invoke_tool(tool_name, {}))


async def test_secrets_come_from_the_secrets_argument() -> None:
    model = ScriptedChatModel(["hi"])
    async with await create_test_runtime(
        plugins=[ServicesPlugin()], model=model, secrets={"API_KEY": "k-123", "OTHER": "o"}
    ) as runtime:
        seen = await run_probe(runtime, "read_secret")
        await runtime.run_turn("hello")

    assert seen == {"index": ["API_KEY", "OTHER"], "values": {"API_KEY": "k-123"}}
    prompt = model.calls[0].system_prompt
    assert prompt is not None
    section = prompt[prompt.index("## Available User Secrets") :]
    assert "- API_KEY" in section
    assert "- OTHER" in section
    assert "k-123" not in prompt


async def test_capabilities_are_granted_everything_by_default() -> None:
    async with await create_test_runtime(plugins=[ServicesPlugin()]) as runtime:
        seen = await run_probe(runtime, "check")

    assert seen == {
        "read": True,
        "write": True,
        "entity_2": True,
        "signing": False,
        "minted": None,
    }


async def test_capabilities_limit_the_grants() -> None:
    grants = ["entity/read", ("ixo:entity:2", "*"), CapabilityGrant(with_="x", can="y")]
    async with await create_test_runtime(plugins=[ServicesPlugin()], capabilities=grants) as rt:
        seen = await run_probe(rt, "check")
        ctx = (await rt.build()).context.runtime_context

    assert seen["read"] is True
    assert seen["write"] is False
    assert seen["entity_2"] is True
    assert ctx is not None
    assert ctx.ucan is not None
    assert ctx.ucan.has_capability("x", "y") is True
    # A bare ability string is granted on any resource (`ucan:*`).
    assert ctx.ucan.has_capability("did:key:z6MkOther", "entity/read") is True
    with pytest.raises(CapabilityDeniedError):
        ctx.ucan.require_capability("x", "z")


class FakeMinter:
    """Stands in for the server's UCAN signer."""

    def has_capability(self, resource: str, action: str) -> bool:
        return True

    def require_capability(self, resource: str, action: str) -> None:
        return None

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str:
        return f"invocation:{did}:{capability}"

    async def resolve_service_did(self, url: str) -> str:
        return "did:web:svc"

    def has_signing_key(self) -> bool:
        return True

    async def mint_oracle_invocation(
        self, service_url: str, can: str, *, with_: str | None = None
    ) -> str | None:
        return f"own:{can}"

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
        can: str = "*",
    ) -> dict[str, str]:
        return {"invocation": car}


async def test_ucan_argument_supplies_minting() -> None:
    async with await create_test_runtime(plugins=[ServicesPlugin()], ucan=FakeMinter()) as rt:
        seen = await run_probe(rt, "check")

    assert seen["signing"] is True
    assert seen["minted"] == "invocation:did:web:svc:entity/read"


async def test_matrix_is_a_recording_fake() -> None:
    async with await create_test_runtime(plugins=[ServicesPlugin()]) as runtime:
        runtime.matrix.room_state["!room:test"] = [{"type": "m.room.name"}]
        seen = await run_probe(runtime, "post")

    assert isinstance(runtime.matrix, RecordingMatrixService)
    assert runtime.matrix.posts == [("!room:test", {"body": "hello"})]
    assert seen == {
        "event_id": "$event_1",
        "event": {"event_id": "$event_1", "room_id": "!room:test", "content": {"body": "hello"}},
        "state": [{"type": "m.room.name"}],
    }


async def test_blob_store_scopes_blobs_to_the_user() -> None:
    async with await create_test_runtime(plugins=[ServicesPlugin()]) as runtime:
        seen = await run_probe(runtime, "blobs")

    assert seen == {"valid": True, "mine": "secret", "theirs": None}


async def test_models_map_roles_and_model_serves_the_rest() -> None:
    default = ScriptedChatModel(name="default-model")
    utility = ScriptedChatModel(name="utility-model")
    async with await create_test_runtime(
        plugins=[ServicesPlugin()], model=default, models={"utility": utility}
    ) as runtime:
        seen = await run_probe(runtime, "models")

    assert seen == {
        "main": "default-model",
        "utility": "utility-model",
        "unknown": "UnknownModelRoleError",
    }


async def test_config_is_plugin_env_not_process_env(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEATHER_UNITS", "kelvin")
    async with await boot(probe) as runtime:
        result = await runtime.invoke_tool("get_forecast", {"city": "Oslo"})

    assert json.loads(result)["units"] == "metric"


async def test_defaults_for_user_session_state_and_identity(probe: Probe) -> None:
    model = ScriptedChatModel(["hi"])
    async with await boot(
        probe, model=model, state={"user_context": {"work": "Pilot"}}, oracle={"name": "Ada"}
    ) as runtime:
        await runtime.run_turn("hello")

    assert runtime.user.did.startswith("did:key:")
    assert runtime.session.id == "test-thread"
    prompt = model.calls[0].system_prompt
    assert prompt is not None
    assert prompt.startswith("You are Ada.")
    assert "- Work: Pilot" in prompt
