"""Tests of the per-request agent build and its failure modes (CORE-41, 53, 74, 83, 84)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    AmbientServices,
    CoreEnv,
    InMemoryBlobStore,
    LocalSecretsService,
    MainAgentHooks,
    MiddlewareContractError,
    OraclePlugin,
    OracleRunContext,
    PermissiveUcanService,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    ProviderLLM,
    RecordingEventSink,
    RuntimeContext,
    SessionInfo,
    TurnRequest,
    UnavailableMatrixService,
    UserInfo,
    Visibility,
    create_runtime,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime

# --- fixtures -------------------------------------------------------------------------

THREAD: RunnableConfig = {"configurable": {"thread_id": "test-thread"}}
RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def reset_runs() -> None:
    RUNS.clear()


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    city: str
    days: int = 1


def tool(name: str, description: str | None = None, **options: Any) -> PluginTool:
    @plugin_tool(
        name=name, description=description or f"The {name} tool.", args_schema=NoArgs, **options
    )
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS[name] += 1
        return f"{name} ran"

    return handler


def failing_tool(name: str, **options: Any) -> PluginTool:
    @plugin_tool(name=name, description="Always fails.", args_schema=NoArgs, **options)
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS[name] += 1
        raise ConnectionError(f"{name} backend unreachable")

    return handler


def make_manifest(title: str, visibility: Visibility = "always") -> PluginManifest:
    return PluginManifest(
        title=title,
        summary=f"{title} helpers.",
        when_to_use=[f"{title.lower()} questions"],
        visibility=visibility,
    )


class FlakySaver(InMemorySaver):
    """An in-memory checkpoint store whose reads or writes can be made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.failing_reads = 0
        self.failing_writes = False

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self.failing_reads:
            self.failing_reads -= 1
            raise OSError("checkpoint store unreachable")
        return await super().aget_tuple(config)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.failing_writes:
            raise OSError("disk full")
        return await super().aput(config, checkpoint, metadata, new_versions)


def saver_hook(saver: BaseCheckpointSaver[Any]) -> MainAgentHooks:
    async def checkpointer_for_user(user_did: str) -> BaseCheckpointSaver[Any]:
        return saver

    return MainAgentHooks(checkpointer_for_user=checkpointer_for_user)


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1"
    manifest = make_manifest("Weather", "on-demand")
    operating_guide = "Always state the units."

    def __init__(self) -> None:
        self.request_contexts: list[RuntimeContext[Any]] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_forecast", description="Forecast.", args_schema=CityArgs)
        def forecast(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> str:
            RUNS["get_forecast"] += 1
            return f"{args.city}: sunny for {args.days} day(s)"

        return [forecast]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        self.request_contexts.append(rt_ctx)
        return []


def prompt_of(model: ScriptedChatModel, call: int = 0) -> str:
    prompt = model.calls[call].system_prompt
    assert prompt is not None
    return prompt


# --- step 1: checkpoint read (CORE-54, 84) --------------------------------------------


async def test_checkpoint_read_failure_runs_the_turn_on_empty_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    saver = FlakySaver()
    plugin = WeatherPlugin()
    model = ScriptedChatModel([call_tool("load_capability", {"names": ["weather"]}), "ok", "hi"])
    async with await create_test_runtime(
        plugins=[plugin], model=model, hooks=saver_hook(saver)
    ) as runtime:
        await runtime.run_turn("load weather")
        saver.failing_reads = 1
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("hello again")

    before, after_failure = plugin.request_contexts
    assert before.history.messages == ()
    # The build saw empty state: no history and nothing loaded.
    assert after_failure.history.messages == ()
    assert after_failure.loaded_plugins == frozenset()
    assert "Always state the units." not in prompt_of(model, 2)
    assert result.text == "hi"
    assert saver.failing_reads == 0
    assert any(
        "checkpoint read failed" in r.getMessage() and r.exc_info is not None
        for r in caplog.records
    )


async def test_checkpoint_write_failure_fails_the_turn() -> None:
    saver = FlakySaver()
    saver.failing_writes = True
    async with await create_test_runtime(
        plugins=[WeatherPlugin()], model=ScriptedChatModel(["hi"]), hooks=saver_hook(saver)
    ) as runtime:
        with pytest.raises(OSError, match="disk full"):
            await runtime.run_turn("hello")


# --- step 4: get_turn_state (CORE-53) -------------------------------------------------


class StatePlugin(OraclePlugin):
    version = "1"

    def __init__(self, name: str, *states: Mapping[str, Any]) -> None:
        self.name = name
        self.manifest = make_manifest(name.title())
        self.states = list(states)

    def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


async def test_turn_state_is_merged_filtered_and_checkpointed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alpha = StatePlugin(
        "alpha",
        {
            "space_id": "alpha-space",
            "current_entity_did": "did:ixo:alpha",
            "user_context": {"work": "Engineer"},
            "loaded_plugins": ["weather"],
            "messages": [HumanMessage("injected")],
        },
    )
    beta = StatePlugin("beta", {"space_id": "beta-space", "user_preferences": {"language": "fr"}})
    saver = FlakySaver()
    model = ScriptedChatModel(["ok"])
    async with await create_test_runtime(
        plugins=[beta, alpha, WeatherPlugin()],
        model=model,
        hooks=saver_hook(saver),
        state={"current_entity_did": "did:ixo:server"},
    ) as runtime:
        with caplog.at_level(logging.WARNING):
            result = await runtime.run_turn("hello")

    state = result.state
    assert state["space_id"] == "beta-space"  # the later plugin wins
    assert state["current_entity_did"] == "did:ixo:server"  # the server wins
    assert state["user_context"]["work"] == "Engineer"
    assert state["user_preferences"] == {"language": "fr"}
    assert state.get("loaded_plugins", []) == []
    assert [m.text for m in state["messages"]] == ["hello", "ok"]

    prompt = prompt_of(model)
    assert "did:ixo:server" in prompt
    assert "- Work: Engineer" in prompt
    assert "fr" in prompt[prompt.index("## User Preferences") :]

    found = await saver.aget_tuple(THREAD)
    assert found is not None
    stored = found.checkpoint["channel_values"]
    assert stored["space_id"] == "beta-space"
    assert stored["current_entity_did"] == "did:ixo:server"
    assert stored["user_preferences"] == {"language": "fr"}

    dropped = [r.getMessage() for r in caplog.records if "get_turn_state" in r.getMessage()]
    assert any("alpha" in m and "'loaded_plugins'" in m for m in dropped)
    assert any("alpha" in m and "'messages'" in m for m in dropped)


async def test_turn_state_view_applies_the_state_reducers() -> None:
    """The prompt of a build sees the merged ``user_context``, as the graph will store it."""
    memory = StatePlugin(
        "memory", {"user_context": {"identity": "Ada"}}, {"user_context": {"work": "Engineer"}}
    )
    model = ScriptedChatModel(["one", "two"])
    async with await create_test_runtime(plugins=[memory], model=model) as runtime:
        await runtime.run_turn("first")
        result = await runtime.run_turn("second")

    assert result.state["user_context"]["identity"] == "Ada"
    assert result.state["user_context"]["work"] == "Engineer"
    prompt = prompt_of(model, 1)
    assert "- Work: Engineer" in prompt
    assert "- Who they are: Ada" in prompt


async def test_failing_turn_state_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(OraclePlugin):
        name = "broken"
        version = "1"
        manifest = make_manifest("Broken")

        def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
            raise RuntimeError("memory service down")

    good = StatePlugin("good", {"space_id": "kept"})
    model = ScriptedChatModel(["ok"])
    async with await create_test_runtime(plugins=[Broken(), good], model=model) as runtime:
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("hello")

    assert result.state["space_id"] == "kept"
    assert result.text == "ok"
    assert any(
        "get_turn_state" in r.getMessage() and "broken" in r.getMessage() for r in caplog.records
    )


# --- step 5: request-time hooks (CORE-74, 75, 84) -------------------------------------


class BrokenRequestHooks(OraclePlugin):
    version = "1"

    def __init__(self, name: str, hook: str) -> None:
        self.name = name
        self.manifest = make_manifest(name.title())
        self.broken = hook

    def _fail(self) -> Any:
        raise RuntimeError(f"{self.name} failed")

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        if self.broken == "get_tools":
            self._fail()
        return [tool(f"{self.name}_tool")]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        if self.broken == "get_request_tools":
            self._fail()
        return [tool(f"{self.name}_request_tool")]

    def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        if self.broken == "get_request_sub_agents":
            self._fail()
        return []

    def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        if self.broken == "get_prompt_blocks":
            self._fail()
        return {}


async def test_failing_request_hooks_are_skipped_and_listed_as_degraded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [
        BrokenRequestHooks("alpha", "get_request_tools"),
        BrokenRequestHooks("beta", "get_request_sub_agents"),
        BrokenRequestHooks("gamma", "get_prompt_blocks"),
        BrokenRequestHooks("delta", "get_tools"),
    ]
    model = ScriptedChatModel(["I still answer."])
    hooks = MainAgentHooks(degraded_services_block="Status page: status.example.")
    async with await create_test_runtime(plugins=plugins, model=model, hooks=hooks) as runtime:
        with caplog.at_level(logging.ERROR):
            built = await runtime.build("hi")
            result = await runtime.run_turn("hi")

    assert result.text == "I still answer."
    names = [t.name for t in built.tools]
    assert "alpha_request_tool" not in names
    assert "alpha_tool" in names
    assert "beta_request_tool" in names
    assert "delta_tool" not in names
    assert sorted(built.degraded) == [
        ("alpha", "request tools"),
        ("beta", "request sub-agents"),
        ("delta", "get_tools: RuntimeError"),
        ("gamma", "prompt blocks"),
    ]
    prompt = prompt_of(model)
    section = prompt[prompt.index("## Degraded Services") :]
    assert section == built.prompt.text[built.prompt.text.index("## Degraded Services") :]
    for line in (
        "- **alpha**: request tools",
        "- **beta**: request sub-agents",
        "- **gamma**: prompt blocks",
        "- **delta**: get_tools: RuntimeError",
    ):
        assert line in section
    assert section.rstrip().endswith("Status page: status.example.")
    logged = " ".join(r.getMessage() for r in caplog.records)
    for plugin in ("alpha", "beta", "gamma"):
        assert f"'{plugin}' failed" in logged


class BlockPlugin(OraclePlugin):
    version = "1"

    def __init__(self, name: str, blocks: Mapping[str, str]) -> None:
        self.name = name
        self.manifest = make_manifest(name.title())
        self.blocks = dict(blocks)

    def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        return self.blocks


async def test_prompt_blocks_fill_slots_and_the_later_plugin_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alpha = BlockPlugin("alpha", {"operational_mode": "Alpha mode.", "bogus_slot": "Bogus text."})
    beta = BlockPlugin(
        "beta", {"operational_mode": "Beta mode.", "editor_section": "Editing page X."}
    )
    async with await create_test_runtime(plugins=[beta, alpha]) as runtime:
        with caplog.at_level(logging.WARNING):
            built = await runtime.build("hi")

    text = built.prompt.text
    assert "## Operational Mode\nBeta mode." in text
    assert "Alpha mode." not in text
    assert "## Editor\nEditing page X." in text
    assert "Bogus text." not in text
    assert built.degraded == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("bogus_slot" in w and "alpha" in w for w in warnings)
    assert any("operational_mode" in w and "alpha" in w and "beta" in w for w in warnings)


# --- step 6: tool assembly (CORE-14, 41, 83) ------------------------------------------


class OrderPlugin(OraclePlugin):
    version = "1"

    def __init__(self, name: str, depends_on: tuple[str, ...] = ()) -> None:
        self.name = name
        self.depends_on = depends_on
        self.manifest = make_manifest(name.title())

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            tool(f"{self.name}_boot", "Boot tool."),
            tool(f"{self.name}_prefixed", f"[{self.name.title()}] Already prefixed."),
        ]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return [tool(f"{self.name}_request", "Request tool.")]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [PluginSubAgent(name=f"{self.name} helper", description="Helps.", system_prompt="p")]

    def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        return [PluginSubAgent(name=f"{self.name} live", description="Live.", system_prompt="p")]


async def test_tools_are_assembled_in_topological_order() -> None:
    # alpha depends on zeta, so zeta comes first although it sorts last by name.
    plugins = [OrderPlugin("alpha", depends_on=("zeta",)), OrderPlugin("zeta")]
    async with await create_test_runtime(plugins=plugins) as runtime:
        built = await runtime.build("hi")

    assert [t.name for t in built.tools] == [
        "list_capabilities",
        "load_capability",
        "zeta_boot",
        "zeta_prefixed",
        "zeta_request",
        "call_zeta_helper_agent",
        "call_zeta_live_agent",
        "alpha_boot",
        "alpha_prefixed",
        "alpha_request",
        "call_alpha_helper_agent",
        "call_alpha_live_agent",
    ]
    descriptions = {t.name: t.description for t in built.tools}
    assert descriptions["zeta_boot"] == "[Zeta] Boot tool."
    assert descriptions["zeta_prefixed"] == "[Zeta] Already prefixed."
    assert descriptions["alpha_request"] == "[Alpha] Request tool."
    assert descriptions["call_alpha_live_agent"] == "[Alpha] Live."
    assert set(built.tool_infos) == set(descriptions)
    assert built.tool_infos["zeta_boot"].owner == "zeta"
    assert built.tool_infos["list_capabilities"].owner is None


async def test_request_time_name_collisions_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    class Collider(OraclePlugin):
        name = "collider"
        version = "1"
        manifest = make_manifest("Collider")

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [tool("zeta_boot", "Shadow."), tool("collider_own", "Own.")]

    async with await create_test_runtime(plugins=[Collider(), OrderPlugin("zeta")]) as runtime:
        with caplog.at_level(logging.ERROR):
            built = await runtime.build("hi")

    names = [t.name for t in built.tools]
    assert names.count("zeta_boot") == 1
    assert built.tool_infos["zeta_boot"].owner == "zeta"
    assert "collider_own" in names
    assert any(
        "zeta_boot" in r.getMessage() and "collider" in r.getMessage() and "zeta" in r.getMessage()
        for r in caplog.records
    )


async def test_an_overridable_tool_gives_way_to_any_other_of_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # "aaa-client" comes first in plugin order, so it would claim the name first.
    class ClientTools(OraclePlugin):
        name = "aaa-client"
        version = "1"
        manifest = make_manifest("Client")

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            def client_copy(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
                return "the client's copy ran"

            return [
                PluginTool(
                    name=name,
                    description="Client's.",
                    args_schema=NoArgs,
                    handler=client_copy,
                    overridable=True,
                )
                for name in ("shared_name", "zeta_boot", "client_only")
            ]

    class ServerTools(OraclePlugin):
        name = "zzz-server"
        version = "1"
        manifest = make_manifest("Server")

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [tool("shared_name", "Server's.")]

    model = ScriptedChatModel([call_tool("shared_name", {}), "done"])
    RUNS.clear()
    async with await create_test_runtime(
        plugins=[ClientTools(), ServerTools(), OrderPlugin("zeta")], model=model
    ) as runtime:
        with caplog.at_level(logging.WARNING):
            result = await runtime.run_turn("use it")

    assert [m.content for m in result.tool_messages("shared_name")] == ["shared_name ran"]
    assert RUNS["shared_name"] == 1
    bound_tools = model.calls[0].tool_names
    assert bound_tools.count("shared_name") == 1
    assert "client_only" in bound_tools
    warnings = [e.payload for e in result.events if e.name == "warning"]
    assert sorted(w["toolName"] for w in warnings) == ["shared_name", "zeta_boot"]
    assert {w["code"] for w in warnings} == {"tools.client_tool_shadowed"}
    assert "tools.client_tool_shadowed: tool 'shared_name' of plugin 'aaa-client'" in caplog.text


# --- tool failures (CORE-79, 84) ------------------------------------------------------


class FailingPlugin(OraclePlugin):
    name = "flaky"
    version = "1"
    manifest = make_manifest("Flaky")

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            failing_tool("read_thing", effect="read"),
            failing_tool("write_thing", effect="write"),
            failing_tool("unknown_effect"),
        ]


@pytest.mark.parametrize(
    ("tool_name", "attempts"), [("read_thing", 2), ("unknown_effect", 2), ("write_thing", 1)]
)
async def test_failing_tool_is_retried_once_unless_it_writes(tool_name: str, attempts: int) -> None:
    model = ScriptedChatModel([call_tool(tool_name, {}), "It failed."])
    async with await create_test_runtime(plugins=[FailingPlugin()], model=model) as runtime:
        result = await runtime.run_turn("do it")

    [message] = result.tool_messages(tool_name)
    assert message.status == "error"
    assert message.text == (
        f"Tool '{tool_name}' failed: ConnectionError: {tool_name} backend unreachable"
    )
    assert RUNS[tool_name] == attempts
    assert result.text == "It failed."


async def test_invalid_arguments_become_an_error_message() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_forecast", {"days": "many"}),
            call_tool("get_forecast", {"city": "Oslo", "days": 2}),
            "Oslo is sunny.",
        ]
    )
    async with await create_test_runtime(plugins=[WeatherPlugin()], model=model) as runtime:
        result = await runtime.run_turn("forecast")

    invalid, valid = result.tool_messages("get_forecast")
    assert invalid.status == "error"
    assert "Invalid arguments for tool 'get_forecast'" in invalid.text
    assert "city" in invalid.text
    assert "days" in invalid.text
    assert valid.text == "Oslo: sunny for 2 day(s)"
    assert RUNS["get_forecast"] == 1


class JsonSchemaPlugin(OraclePlugin):
    """A tool described by a JSON schema, as an MCP server's tools are bound."""

    name = "ledger"
    version = "1"
    manifest = make_manifest("Ledger")

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        schema = {
            "type": "object",
            "properties": {
                "account": {"type": "string", "minLength": 3},
                "amount": {"type": "integer", "minimum": 1},
            },
            "required": ["account", "amount"],
            "additionalProperties": False,
        }

        def credit(args: Any, rt_ctx: RuntimeContext[Any]) -> str:
            RUNS["credit"] += 1
            return f"credited {args['amount']} to {args['account']}"

        return [
            PluginTool(name="credit", description="Credit.", args_schema=schema, handler=credit)
        ]


async def test_json_schema_arguments_are_validated_before_the_tool_runs() -> None:
    RUNS["credit"] = 0
    model = ScriptedChatModel(
        [
            call_tool("credit", {"account": "ab", "amount": 0, "memo": "x"}),
            call_tool("credit", {"account": "abc", "amount": 5}),
            "Credited.",
        ]
    )
    async with await create_test_runtime(plugins=[JsonSchemaPlugin()], model=model) as runtime:
        result = await runtime.run_turn("credit abc")

    invalid, valid = result.tool_messages("credit")
    assert invalid.status == "error"
    assert "Invalid arguments for tool 'credit'" in invalid.text
    assert "account: 'ab' is too short" in invalid.text
    assert "amount: 0 is less than the minimum of 1" in invalid.text
    assert "'memo' was unexpected" in invalid.text
    assert valid.text == "credited 5 to abc"
    assert RUNS["credit"] == 1


# --- failures that end the turn (CORE-84) ---------------------------------------------


async def test_model_failure_propagates() -> None:
    def broken(messages: Sequence[BaseMessage], tools: tuple[str, ...]) -> AIMessage:
        raise TimeoutError("provider timed out")

    model = ScriptedChatModel([broken])
    async with await create_test_runtime(plugins=[WeatherPlugin()], model=model) as runtime:
        with pytest.raises(TimeoutError, match="provider timed out"):
            await runtime.run_turn("hello")


class ExplodingMiddleware(AgentMiddleware[AgentState[Any], Any]):
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        raise LookupError("plugin middleware exploded")


class StateWritingMiddleware(AgentMiddleware[AgentState[Any], Any]):
    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        return {"space_id": "sneaky"}


class MiddlewarePlugin(OraclePlugin):
    name = "guard"
    version = "1"
    manifest = make_manifest("Guard")

    def __init__(self, middleware: AgentMiddleware[Any, Any]) -> None:
        self.middleware = middleware

    def get_middlewares(self, ctx: PluginContext[Any]) -> list[AgentMiddleware[Any, Any]]:
        return [self.middleware]


async def test_plugin_middleware_failure_propagates() -> None:
    model = ScriptedChatModel(["never"])
    plugin = MiddlewarePlugin(ExplodingMiddleware())
    async with await create_test_runtime(plugins=[plugin], model=model) as runtime:
        with pytest.raises(LookupError, match="exploded"):
            await runtime.run_turn("hello")

    assert model.calls == []


async def test_plugin_middleware_returning_state_fails_the_turn() -> None:
    plugin = MiddlewarePlugin(StateWritingMiddleware())
    async with await create_test_runtime(
        plugins=[plugin], model=ScriptedChatModel(["hi"])
    ) as runtime:
        with pytest.raises(MiddlewareContractError) as info:
            await runtime.run_turn("hello")

    assert info.value.plugin == "guard"
    assert info.value.hook == "after_model"
    assert info.value.keys == ("space_id",)


async def test_client_abort_cancels_the_turn() -> None:
    started = asyncio.Event()

    class Slow(OraclePlugin):
        name = "slow"
        version = "1"
        manifest = make_manifest("Slow")

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            @plugin_tool(name="wait_forever", description="Waits.", args_schema=NoArgs)
            async def wait(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
                RUNS["wait_forever"] += 1
                started.set()
                await asyncio.Event().wait()
                return "never"

            return [wait]

    model = ScriptedChatModel([call_tool("wait_forever", {}), "never"])
    async with await create_test_runtime(plugins=[Slow()], model=model) as runtime:
        task = asyncio.create_task(runtime.run_turn("wait"))
        await asyncio.wait_for(started.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    # Cancellation is neither retried nor turned into a message.
    assert RUNS["wait_forever"] == 1
    assert len(model.calls) == 1


# --- step 8, 9: model and BuiltAgent (CORE-83, 89) ------------------------------------


async def test_resolve_model_hook_supplies_the_main_model() -> None:
    roles: list[tuple[str, dict[str, Any]]] = []
    hosted = ScriptedChatModel(["From the host model."])
    default = ScriptedChatModel()

    def resolve_model(role: str, **params: Any) -> BaseChatModel:
        roles.append((role, params))
        return hosted

    async with await create_test_runtime(
        plugins=[WeatherPlugin()], model=default, hooks=MainAgentHooks(resolve_model=resolve_model)
    ) as runtime:
        result = await runtime.run_turn("hello")

    assert roles == [("main", {})]
    assert result.text == "From the host model."
    assert default.calls == []


async def test_main_model_comes_from_the_main_role_by_default() -> None:
    main = ScriptedChatModel(["From main."])
    other = ScriptedChatModel()
    async with await create_test_runtime(
        plugins=[WeatherPlugin()], model=other, models={"main": main}
    ) as runtime:
        result = await runtime.run_turn("hello")

    assert result.text == "From main."
    assert other.calls == []


class RecordingLLM:
    """An ``LLMAccessor`` over the real provider that records what the runtime asks for."""

    def __init__(self, provider: ProviderLLM) -> None:
        self.provider = provider
        self.requests: list[tuple[str, dict[str, Any], BaseChatModel]] = []

    def get(self, role: str, **params: Any) -> BaseChatModel:
        model = self.provider.get(role, **params)
        self.requests.append((role, params, model))
        return model


def selecting(model: str | None, session_id: str = "thread-m") -> TurnRequest:
    return TurnRequest(
        user=UserInfo(did="did:key:ada"),
        session=SessionInfo(id=session_id),
        message="hello",
        model=model,
    )


async def test_a_selected_model_replaces_only_the_main_model_id(tmp_path: Path) -> None:
    env = {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "big-model",
        "OPENAI_COMPATIBLE_ROLE_MODELS": "subagent=small-model",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }
    recorders: list[RecordingLLM] = []

    def services(core: CoreEnv) -> AmbientServices:
        recorders.append(RecordingLLM(ProviderLLM(core)))
        return AmbientServices(
            secrets=LocalSecretsService(),
            blob_store=InMemoryBlobStore(),
            matrix=UnavailableMatrixService(),
            ucan=PermissiveUcanService(),
            events=RecordingEventSink(),
            llm=recorders[0],
        )

    runtime = await create_runtime(
        {"name": "Model Oracle"},
        plugins=[WeatherPlugin()],
        discover_entry_points=False,
        env=env,
        services=services,
    )
    async with runtime:
        await runtime.build_agent(selecting("small-model"))
        await runtime.build_agent(selecting(None))

    main = [(params, model) for role, params, model in recorders[0].requests if role == "main"]
    assert [params for params, _ in main] == [{"model": "small-model"}, {}]
    (_, picked), (_, default) = main
    assert isinstance(picked, ChatOpenAI)
    assert isinstance(default, ChatOpenAI)
    assert (picked.model_name, default.model_name) == ("small-model", "big-model")
    # Same provider settings: only the model id differs.
    assert picked.openai_api_base == default.openai_api_base == "http://127.0.0.1:9/v1"
    assert picked.stream_usage
    assert default.stream_usage


async def test_a_selected_model_reaches_the_resolve_model_hook() -> None:
    roles: list[tuple[str, dict[str, Any]]] = []
    hosted = ScriptedChatModel(["From the host model."], on_exhausted="repeat_last")

    def resolve_model(role: str, **params: Any) -> BaseChatModel:
        roles.append((role, params))
        return hosted

    async with await create_test_runtime(
        plugins=[WeatherPlugin()], hooks=MainAgentHooks(resolve_model=resolve_model)
    ) as runtime:
        await runtime.runtime.build_agent(selecting("small-model"))
        await runtime.runtime.build_agent(selecting(None))

    assert roles == [("main", {"model": "small-model"}), ("main", {})]


async def test_an_injected_test_model_ignores_the_selected_model() -> None:
    main = ScriptedChatModel(["Still scripted."])
    async with await create_test_runtime(plugins=[WeatherPlugin()], model=main) as runtime:
        state = await runtime.runtime.run_turn(selecting("any-model-id"))

    assert state["messages"][-1].text == "Still scripted."
    assert len(main.calls) == 1


async def test_built_agent_carries_input_context_and_config() -> None:
    user = UserInfo(did="did:key:ada", timezone="Europe/Paris", current_time="2025-03-01T09:30")
    session = SessionInfo(id="thread-9", client="slack", ws_id="ws-9", request_id="req-9")
    async with await create_test_runtime(plugins=[WeatherPlugin()]) as runtime:
        built = await runtime.runtime.build_agent(
            TurnRequest(user=user, session=session, message="hello", state={"space_id": "s-1"})
        )

    assert built.config["configurable"] == {"thread_id": "thread-9"}
    assert isinstance(built.context, OracleRunContext)
    assert built.context.user_did == "did:key:ada"
    assert built.context.session_id == "thread-9"
    assert built.context.request_id == "req-9"
    assert built.context.client == "slack"
    assert built.context.ws_id == "ws-9"
    assert built.context.timezone == "Europe/Paris"
    assert built.context.current_time == "2025-03-01T09:30"
    assert built.context.preloaded_plugins == frozenset()
    assert built.context.runtime_context is not None
    assert built.context.runtime_context.session == session
    assert built.input["config"] == {"did": "did:key:ada", "ws_id": "ws-9"}
    assert built.input["client"] == "slack"
    assert built.input["space_id"] == "s-1"
    [message] = built.input["messages"]
    assert isinstance(message, HumanMessage)
    assert message.text == "hello"
    assert "Today is Saturday, 2025-03-01 (Europe/Paris)." in built.prompt.text
    assert built.context.turn is not None
    assert built.context.turn.current_time == "2025-03-01T09:30 (Europe/Paris)"
    assert "## Slack Formatting" in built.prompt.text


async def test_build_without_a_message_continues_the_thread() -> None:
    async with await create_test_runtime(plugins=[WeatherPlugin()]) as runtime:
        built = await runtime.build(None)

    assert "messages" not in built.input


async def test_closed_runtime_refuses_to_build() -> None:
    runtime = await create_test_runtime(plugins=[WeatherPlugin()])
    await runtime.aclose()

    with pytest.raises(RuntimeError, match="closed"):
        await runtime.build("hi")


async def test_request_time_hooks_run_concurrently() -> None:
    """Each plugin's hook waits for the other's: only a concurrent build finishes."""
    events = {"left": asyncio.Event(), "right": asyncio.Event()}

    class Waiting(OraclePlugin):
        version = "1"

        def __init__(self, name: str, mine: str, theirs: str) -> None:
            self.name = name
            self.manifest = make_manifest(name.title())
            self.mine = mine
            self.theirs = theirs

        async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            events[self.mine].set()
            await events[self.theirs].wait()
            return [tool(f"{self.name}_tool")]

    plugins = [Waiting("left", "left", "right"), Waiting("right", "right", "left")]
    async with await create_test_runtime(plugins=plugins) as runtime:
        built = await asyncio.wait_for(runtime.build("hi"), timeout=5)

    assert {"left_tool", "right_tool"} <= set(built.tool_infos)
    assert built.degraded == []


async def test_turn_message_may_be_a_message_object() -> None:
    router_texts: list[str] = []

    async def router(request: Any) -> Sequence[str]:
        router_texts.append(request.text)
        return []

    message = HumanMessage(content="from a message object", id="m-1")
    model = ScriptedChatModel(["ok"])
    async with await create_test_runtime(
        plugins=[WeatherPlugin()], model=model, hooks=MainAgentHooks(capability_router=router)
    ) as runtime:
        built = await runtime.runtime.build_agent(
            TurnRequest(user=runtime.user, session=runtime.session, message=message)
        )
        state = await built.agent.ainvoke(built.input, config=built.config, context=built.context)

    assert built.input["messages"] == [message]
    assert router_texts == ["from a message object"]
    assert state["messages"][0].id == "m-1"
    assert state["messages"][-1].text == "ok"


async def test_turn_state_hooks_see_the_server_turn_input() -> None:
    """CORE-83 step 3: the base context is built over the snapshot plus the server input."""
    seen: list[Any] = []

    class Editor(OraclePlugin):
        name = "editor"
        version = "1"
        manifest = make_manifest("Editor")

        def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
            seen.append(rt_ctx.history.state["editor_room_id"])
            return {}

    async with await create_test_runtime(
        plugins=[Editor()], state={"editor_room_id": "!page:server"}
    ) as runtime:
        await runtime.build("hi")

    assert seen == ["!page:server"]


async def test_concurrent_turns_keep_their_own_request_tools_and_prompt() -> None:
    """Builds may share compiled parts; each turn still runs its own tools and prompt."""
    both_started = asyncio.Barrier(2)

    class PerUser(OraclePlugin):
        name = "per-user"
        version = "1"
        manifest = make_manifest("Per User")

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            owner = rt_ctx.user.did

            @plugin_tool(name="whoami", description="Says who asks.", args_schema=NoArgs)
            async def whoami(args: NoArgs, ctx: RuntimeContext[Any]) -> str:
                await asyncio.wait_for(both_started.wait(), timeout=5)
                return f"built for {owner}, called by {ctx.user.did}"

            return [whoami]

    prompts: dict[str, str] = {}

    def step(messages: Sequence[BaseMessage], tools: tuple[str, ...]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            prompts[last.text] = messages[0].text
            return call_tool("whoami", {})
        return AIMessage(content=last.text)

    model = ScriptedChatModel([step] * 4)
    async with await create_test_runtime(plugins=[PerUser()], model=model) as runtime:

        async def turn(did: str, zone: str) -> dict[str, Any]:
            return await runtime.runtime.run_turn(
                TurnRequest(
                    user=UserInfo(did=did, timezone=zone),
                    session=SessionInfo(id=f"thread-{did}"),
                    message=did,
                )
            )

        ada, bob = await asyncio.gather(
            turn("did:key:ada", "Europe/Paris"), turn("did:key:bob", "Asia/Tokyo")
        )

    assert ada["messages"][-1].text == "built for did:key:ada, called by did:key:ada"
    assert bob["messages"][-1].text == "built for did:key:bob, called by did:key:bob"
    assert "(Europe/Paris)" in prompts["did:key:ada"]
    assert "(Asia/Tokyo)" in prompts["did:key:bob"]
    assert "(Asia/Tokyo)" not in prompts["did:key:ada"]
