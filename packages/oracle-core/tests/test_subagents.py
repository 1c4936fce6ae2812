"""Tests of sub-agents as ``call_…`` tools of the main agent (CORE-16 … 19, 84)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel, ConfigDict, ValidationError

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    UserInfo,
    Visibility,
    plugin_tool,
    sub_agent_tool_name,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    ToolNotVisibleError,
    call_tool,
    call_tools,
    create_test_runtime,
)

# --- fixtures -------------------------------------------------------------------------

SUB_TOOL = "call_deep_researcher_agent"


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str


class InnerRecorder:
    def __init__(self) -> None:
        self.contexts: list[RuntimeContext[Any]] = []


def inner_tool(name: str, recorder: InnerRecorder) -> PluginTool:
    @plugin_tool(name=name, description=f"Inner {name}.", args_schema=Query)
    def handler(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
        recorder.contexts.append(rt_ctx)
        return f"{name}: {args.query}"

    return handler


class ResearchPlugin(OraclePlugin):
    name = "research"
    version = "1"
    manifest = PluginManifest(
        title="Research", summary="Researches.", when_to_use=["research"], visibility="always"
    )

    def __init__(self, plugin_visibility: Visibility = "always", **sub_agent: Any) -> None:
        self.manifest = self.manifest.model_copy(update={"visibility": plugin_visibility})
        self.recorder = InnerRecorder()
        self.sub_agent = {
            "name": "Deep Researcher",
            "description": "Researches deeply.",
            "system_prompt": "You research things.",
            "tools": [
                inner_tool("inner_search", self.recorder),
                inner_tool("inner_fetch", self.recorder),
            ],
            **sub_agent,
        }

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [PluginSubAgent(**self.sub_agent)]


async def boot(
    plugin: ResearchPlugin,
    model: ScriptedChatModel,
    sub_model: ScriptedChatModel,
    **kwargs: Any,
) -> TestRuntime:
    return await create_test_runtime(
        plugins=[plugin], model=model, models={"subagent": sub_model}, **kwargs
    )


def delegate(task: str = "Find the capital of France.", call_id: str = "p1") -> AIMessage:
    return call_tool(SUB_TOOL, {"task": task}, id=call_id)


# --- naming (CORE-16, 17) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tool_name"),
    [
        ("weather_planner", "call_weather_planner_agent"),
        ("weather_planner_agent", "call_weather_planner_agent"),
        ("call_helper", "call_helper"),
        ("Call_Helper", "call_helper"),
        ("Deep  Researcher", "call_deep_researcher_agent"),
        ("  Trip\tPlanner Agent ", "call_trip_planner_agent"),
    ],
)
def test_sub_agent_tool_name(name: str, tool_name: str) -> None:
    assert sub_agent_tool_name(name) == tool_name
    assert PluginSubAgent(name=name, description="d", system_prompt="p").tool_name == tool_name


def test_sub_agent_name_is_normalised() -> None:
    spec = PluginSubAgent(name="  Deep   Researcher ", description="d", system_prompt="p")

    assert spec.name == "deep_researcher"
    assert spec.model == "subagent"
    assert spec.forward_tools is False


def test_sub_agent_name_must_not_be_blank() -> None:
    with pytest.raises(ValidationError):
        PluginSubAgent(name="   ", description="d", system_prompt="p")


async def test_sub_agent_tool_takes_one_required_task_string() -> None:
    async with await boot(ResearchPlugin(), ScriptedChatModel(), ScriptedChatModel()) as rt:
        built = await rt.build("hi")

    [tool] = [t for t in built.tools if t.name == SUB_TOOL]
    assert tool.description == "[Research] Researches deeply."
    schema = tool.tool_call_schema.model_json_schema()
    assert list(schema["properties"]) == ["task"]
    assert schema["required"] == ["task"]
    task = schema["properties"]["task"]
    assert task["type"] == "string"
    description = task["description"]
    for phrase in ("no conversation history", "no user context", "objective", "expected output"):
        assert phrase in description
    assert "names, ids, URLs, dates" in description
    assert "limits" in description


# --- running a sub-agent (CORE-18) ----------------------------------------------------


async def test_sub_agent_runs_on_its_own_model_and_tools() -> None:
    plugin = ResearchPlugin()
    sub_model = ScriptedChatModel(
        [call_tool("inner_search", {"query": "capital of France"}, id="in1"), "Paris."],
        strict=True,
    )
    model = ScriptedChatModel([delegate(), "The capital is Paris."], strict=True)
    async with await boot(plugin, model, sub_model) as runtime:
        result = await runtime.run_turn("What is the capital of France?")

    [answer] = result.tool_messages(SUB_TOOL)
    assert answer.text == "Paris."
    assert answer.status == "success"
    assert answer.tool_call_id == "p1"
    assert result.text == "The capital is Paris."
    # The main model never sees the inner tools, the sub-agent sees only its own.
    assert "inner_search" not in model.calls[0].tool_names
    assert sub_model.calls[0].tool_names == ("inner_search", "inner_fetch")
    # The sub-agent sees the task only: no parent history, no user message.
    sent = sub_model.calls[0].messages
    assert [type(m) for m in sent] == [SystemMessage, SystemMessage, HumanMessage]
    assert sent[1].text.startswith("[Current time: ")
    assert sent[2].text == "Find the capital of France."
    [ctx] = plugin.recorder.contexts
    assert ctx.plugin_name == "research"
    assert ctx.session.id == "test-thread"
    assert ctx.tool_call_id == "in1"
    assert ctx.history.messages[0].text == "Find the capital of France."


async def test_sub_agent_prompt_carries_the_date_and_its_task_the_time() -> None:
    user = UserInfo(
        did="did:key:traveller", timezone="Europe/Paris", current_time="2025-03-01T09:30:00+01:00"
    )
    sub_model = ScriptedChatModel(["Done."])
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(ResearchPlugin(), model, sub_model, user=user) as runtime:
        await runtime.run_turn("go")

    [call] = sub_model.calls
    # The date in the prompt, which stays the same all day; the exact time in a note.
    assert (
        call.system_prompt
        == "You research things.\n\nToday is Saturday, 2025-03-01 (Europe/Paris)."
    )
    assert call.messages[-2].text == "[Current time: 2025-03-01T09:30:00+01:00 (Europe/Paris)]"


async def test_sub_agent_uses_the_model_of_its_role() -> None:
    utility = ScriptedChatModel(["From utility."])
    sub_model = ScriptedChatModel()
    model = ScriptedChatModel([delegate(), "ok"])
    plugin = ResearchPlugin(model="utility")
    async with await create_test_runtime(
        plugins=[plugin], model=model, models={"subagent": sub_model, "utility": utility}
    ) as runtime:
        result = await runtime.run_turn("go")

    assert result.tool_messages(SUB_TOOL)[0].text == "From utility."
    assert sub_model.calls == []
    assert len(utility.calls) == 1


async def test_sub_agent_thread_persists_per_session() -> None:
    sub_model = ScriptedChatModel(["First answer.", "Second answer.", "Elsewhere."])
    model = ScriptedChatModel(
        [
            delegate("first task", "p1"),
            "ok",
            delegate("second task", "p2"),
            "ok",
            delegate("third task", "p3"),
            "ok",
        ]
    )
    async with await boot(ResearchPlugin(), model, sub_model) as runtime:
        await runtime.run_turn("one")
        await runtime.run_turn("two")
        await runtime.run_turn("three", thread_id="other-thread")
        checkpointer_for_user = runtime.runtime.hooks.checkpointer_for_user
        assert checkpointer_for_user is not None
        saver = await checkpointer_for_user(runtime.user.did)
        found = await saver.aget_tuple(
            {"configurable": {"thread_id": "test-thread_deep_researcher"}}
        )

    second_call = [m.text for m in sub_model.calls[1].conversation]
    assert second_call == ["first task", "First answer.", "second task"]
    third_call = [m.text for m in sub_model.calls[2].conversation]
    assert third_call == ["third task"]
    assert found is not None
    stored = [m.text for m in found.checkpoint["channel_values"]["messages"]]
    assert stored == ["first task", "First answer.", "second task", "Second answer."]


async def test_sub_agent_failure_becomes_an_error_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(messages: Any, tool_names: tuple[str, ...]) -> AIMessage:
        raise RuntimeError("model down")

    sub_model = ScriptedChatModel([broken])
    model = ScriptedChatModel([delegate(), "I could not research that."])
    async with await boot(ResearchPlugin(), model, sub_model) as runtime:
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("go")

    [message] = result.tool_messages(SUB_TOOL)
    assert message.status == "error"
    assert message.text == "Error running deep_researcher: RuntimeError: model down"
    assert message.tool_call_id == "p1"
    # The parent turn went on to its next model call.
    assert result.text == "I could not research that."
    assert len(model.calls) == 2
    assert any(
        "deep_researcher" in r.getMessage() and r.exc_info is not None for r in caplog.records
    )


# --- visibility -----------------------------------------------------------------------


async def test_sub_agent_tool_is_gated_by_the_plugin_visibility() -> None:
    model = ScriptedChatModel([delegate()], strict=True)
    async with await boot(ResearchPlugin("on-demand"), model, ScriptedChatModel()) as runtime:
        with pytest.raises(ToolNotVisibleError, match=SUB_TOOL):
            await runtime.run_turn("go")


async def test_inner_tools_of_an_on_demand_plugin_are_not_gated() -> None:
    plugin = ResearchPlugin("on-demand")
    sub_model = ScriptedChatModel(
        [call_tool("inner_search", {"query": "q"}), "Inner done."], strict=True
    )
    model = ScriptedChatModel(
        [call_tool("load_capability", {"names": ["research"]}), delegate(), "ok"], strict=True
    )
    async with await boot(plugin, model, sub_model) as runtime:
        result = await runtime.run_turn("go")

    assert SUB_TOOL not in model.calls[0].tool_names
    assert SUB_TOOL in model.calls[1].tool_names
    assert result.tool_messages(SUB_TOOL)[0].text == "Inner done."
    assert [m.text for m in result.tool_messages()][-1] == "Inner done."
    assert len(plugin.recorder.contexts) == 1


async def test_sub_agent_visibility_overrides_the_manifest() -> None:
    model = ScriptedChatModel([delegate(), "ok"], strict=True)
    plugin = ResearchPlugin("on-demand", visibility="always")
    async with await boot(plugin, model, ScriptedChatModel(["Visible."])) as runtime:
        result = await runtime.run_turn("go")

    assert result.tool_messages(SUB_TOOL)[0].text == "Visible."


# --- forwarding (CORE-19) -------------------------------------------------------------


def inner_script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            call_tools(
                [("inner_search", {"query": "a"}, "ia"), ("inner_fetch", {"query": "b"}, "ib")]
            ),
            "Final text.",
        ]
    )


async def test_forward_tools_list_forwards_matching_calls_with_rewritten_ids() -> None:
    plugin = ResearchPlugin(forward_tools=["inner_search"])
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, inner_script()) as runtime:
        result = await runtime.run_turn("go")

    call, final, forwarded_call, forwarded_result, reply = result.messages[1:]
    assert isinstance(call, AIMessage)
    assert isinstance(final, ToolMessage)
    assert final.tool_call_id == "p1"
    assert final.text == "Final text."
    assert isinstance(forwarded_call, AIMessage)
    assert forwarded_call.text == ""
    assert [(c["name"], c["id"], c["args"]) for c in forwarded_call.tool_calls] == [
        ("inner_search", "p1_ia", {"query": "a"})
    ]
    assert isinstance(forwarded_result, ToolMessage)
    assert forwarded_result.tool_call_id == "p1_ia"
    assert forwarded_result.text == "inner_search: a"
    assert forwarded_result.id is not None
    assert forwarded_result.id.startswith("p1_")
    assert isinstance(reply, AIMessage)
    assert reply.text == "ok"


async def test_forward_tools_true_forwards_every_inner_call() -> None:
    plugin = ResearchPlugin(forward_tools=True)
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, inner_script()) as runtime:
        result = await runtime.run_turn("go")

    forwarded_calls = [
        c["id"] for m in result.messages[3:] if isinstance(m, AIMessage) for c in m.tool_calls
    ]
    forwarded_results = [m.tool_call_id for m in result.tool_messages()[1:]]
    assert forwarded_calls == ["p1_ia", "p1_ib"]
    assert forwarded_results == ["p1_ia", "p1_ib"]


async def test_without_forward_tools_only_the_answer_reaches_the_parent() -> None:
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(ResearchPlugin(), model, inner_script()) as runtime:
        result = await runtime.run_turn("go")

    assert [type(m) for m in result.messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert result.tool_messages()[0].text == "Final text."


# --- on_complete (CORE-19) ------------------------------------------------------------


async def test_on_complete_runs_in_the_background_after_success() -> None:
    release = asyncio.Event()
    finished = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def on_complete(text: str, rt_ctx: RuntimeContext[Any]) -> None:
        await release.wait()
        seen.append((text, rt_ctx.plugin_name))
        finished.set()

    plugin = ResearchPlugin(on_complete=on_complete)
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, ScriptedChatModel(["Answer."])) as runtime:
        result = await runtime.run_turn("go")
        # The turn finished while the callback was still waiting.
        assert result.text == "ok"
        assert seen == []
        release.set()
        await asyncio.wait_for(finished.wait(), timeout=2)

    assert seen == [("Answer.", "research")]


async def test_on_complete_is_not_called_after_a_failure() -> None:
    calls: list[str] = []

    def broken(messages: Any, tool_names: tuple[str, ...]) -> AIMessage:
        raise RuntimeError("down")

    plugin = ResearchPlugin(on_complete=lambda text, ctx: calls.append(text))
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, ScriptedChatModel([broken])) as runtime:
        await runtime.run_turn("go")
        await asyncio.sleep(0.01)

    assert calls == []


async def test_on_complete_errors_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    def on_complete(text: str, rt_ctx: RuntimeContext[Any]) -> None:
        raise ValueError("callback broke")

    plugin = ResearchPlugin(on_complete=on_complete)
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, ScriptedChatModel(["Answer."])) as runtime:
        with caplog.at_level(logging.ERROR):
            result = await runtime.run_turn("go")
            for _ in range(5):
                await asyncio.sleep(0)

    assert result.text == "ok"
    [record] = [r for r in caplog.records if "on_complete" in r.getMessage()]
    assert "deep_researcher" in record.getMessage()
    assert record.name == "oracle.test.plugin.research"
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)


# --- init callables (CORE-84) ---------------------------------------------------------


async def test_system_prompt_and_tools_callables_get_the_plugin_context() -> None:
    seen: list[str] = []
    recorder = InnerRecorder()

    def prompt(ctx: RuntimeContext[Any]) -> str:
        seen.append(ctx.plugin_name)
        return f"You work for {ctx.user.did}."

    def tools(ctx: RuntimeContext[Any]) -> list[PluginTool]:
        seen.append(ctx.plugin_name)
        return [inner_tool("dynamic_search", recorder)]

    sub_model = ScriptedChatModel(["Done."])
    plugin = ResearchPlugin(system_prompt=prompt, tools=tools)
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, sub_model) as runtime:
        await runtime.run_turn("go")

    assert seen == ["research", "research"]
    assert sub_model.calls[0].tool_names == ("dynamic_search",)
    system_prompt = sub_model.calls[0].system_prompt
    assert system_prompt is not None
    assert system_prompt.startswith(f"You work for {runtime.user.did}.")


@pytest.mark.parametrize("failing", ["system_prompt", "tools"])
async def test_failing_init_callable_skips_the_sub_agent_and_degrades(
    failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(ctx: RuntimeContext[Any]) -> Any:
        raise RuntimeError("init failed")

    init: dict[str, Any] = {failing: broken}
    plugin = ResearchPlugin(**init)
    async with await boot(plugin, ScriptedChatModel(), ScriptedChatModel()) as runtime:
        with caplog.at_level(logging.ERROR):
            built = await runtime.build("hi")

    assert SUB_TOOL not in built.tool_infos
    assert SUB_TOOL not in [t.name for t in built.tools]
    assert built.degraded == [("research", "sub-agent deep_researcher")]
    text = built.prompt.text
    assert "## Degraded Services" in text
    degraded = text[text.index("## Degraded Services") :]
    assert "- **research**: sub-agent deep_researcher" in degraded
    assert any(
        "deep_researcher" in r.getMessage() and "research" in r.getMessage() for r in caplog.records
    )


# --- sub-agent middleware (CORE-16) ---------------------------------------------------


class CountingMiddleware(AgentMiddleware[AgentState[Any], Any]):
    def __init__(self, counter: list[int]) -> None:
        super().__init__()
        self.counter = counter

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        self.counter.append(len(state["messages"]))


async def test_sub_agent_middlewares_run_only_inside_the_sub_agent() -> None:
    counter: list[int] = []
    plugin = ResearchPlugin(middlewares=[CountingMiddleware(counter)])
    sub_model = ScriptedChatModel([call_tool("inner_search", {"query": "q"}), "Done."])
    model = ScriptedChatModel([delegate(), "ok"])
    async with await boot(plugin, model, sub_model) as runtime:
        await runtime.run_turn("go")

    # Two sub-agent model calls; the two main-model calls are not counted.
    assert counter == [1, 3]


# --- argument errors and cancellation (CORE-13, 84) -----------------------------------


async def test_sub_agent_call_without_a_task_is_an_argument_error() -> None:
    sub_model = ScriptedChatModel()
    model = ScriptedChatModel([call_tool(SUB_TOOL, {}), "I need to give it a task."])
    async with await boot(ResearchPlugin(), model, sub_model) as runtime:
        result = await runtime.run_turn("go")

    [message] = result.tool_messages(SUB_TOOL)
    assert message.status == "error"
    assert f"Invalid arguments for tool '{SUB_TOOL}'" in message.text
    assert "task" in message.text
    assert sub_model.calls == []


async def test_cancelling_the_turn_cancels_a_running_sub_agent() -> None:
    started = asyncio.Event()
    recorder = InnerRecorder()

    @plugin_tool(name="slow_search", description="Slow.", args_schema=Query)
    async def slow_search(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
        recorder.contexts.append(rt_ctx)
        started.set()
        await asyncio.Event().wait()
        return "never"

    plugin = ResearchPlugin(tools=[slow_search])
    sub_model = ScriptedChatModel([call_tool("slow_search", {"query": "q"}), "never"])
    model = ScriptedChatModel([delegate(), "never"])
    async with await boot(plugin, model, sub_model) as runtime:
        task = asyncio.create_task(runtime.run_turn("go"))
        await asyncio.wait_for(started.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    # Cancellation is not turned into an "Error running" message nor retried.
    assert len(recorder.contexts) == 1
    assert len(model.calls) == 1


# --- plugin middleware in sub-agents --------------------------------------------------


class CountModelCalls(AgentMiddleware[AgentState[Any], Any]):
    """Counts the model calls it sees, by the agent's system prompt."""

    def __init__(self, *, reaches: bool) -> None:
        super().__init__()
        self.reaches_sub_agents = reaches
        self.seen: list[str] = []

    @property
    def name(self) -> str:
        return "count-everywhere" if self.reaches_sub_agents else "count-main"

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.seen.append(str(request.system_prompt or "")[:20])
        return await handler(request)


class Metering(OraclePlugin):
    """A plugin with one middleware that reaches sub-agents and one that does not."""

    name = "metering"
    version = "1"
    manifest = PluginManifest(
        title="Metering", summary="Meters.", when_to_use=["never"], visibility="silent"
    )

    def __init__(self) -> None:
        self.everywhere = CountModelCalls(reaches=True)
        self.main_only = CountModelCalls(reaches=False)

    def get_middlewares(self, ctx: PluginContext[Any]) -> list[Any]:
        return [self.everywhere, self.main_only]


async def test_middleware_that_declares_it_also_runs_in_sub_agents() -> None:
    metering = Metering()
    sub_model = ScriptedChatModel(
        [call_tool("inner_search", {"query": "tides"}, id="in1"), "Two a day."], strict=True
    )
    model = ScriptedChatModel([delegate(), "Two highs a day."], strict=True)
    async with await create_test_runtime(
        plugins=[ResearchPlugin(), metering], model=model, models={"subagent": sub_model}
    ) as runtime:
        result = await runtime.run_turn("How often are tides?")

    assert result.text == "Two highs a day."
    sub_calls = [p for p in metering.everywhere.seen if p.startswith("You research things")]
    assert len(metering.everywhere.seen) == 4
    assert len(sub_calls) == 2
    assert len(metering.main_only.seen) == 2
    assert not any(p.startswith("You research things") for p in metering.main_only.seen)
