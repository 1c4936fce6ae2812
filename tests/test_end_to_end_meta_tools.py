"""End to end: three plugins (always, on-demand, silent), a scripted conversation through the
meta-tools, the capability gate proven by a strict model, and ``loaded_plugins`` persisted
per thread in the per-user SQLite checkpointer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    MainAgentHooks,
    OraclePlugin,
    OracleRuntime,
    PluginContext,
    PluginTool,
    RuntimeContext,
    SessionInfo,
    SqliteCheckpointers,
    TurnRequest,
    UserInfo,
    create_runtime,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, ToolNotVisibleError, call_tool, reply
from oracle_server.testing import CityArgs, ClockPlugin


class TextArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = {
        "title": "Weather",
        "summary": "Weather forecasts for a city.",
        "whenToUse": ["The user asks about the weather"],
        "tags": ["weather", "forecast"],
        "visibility": "on-demand",
    }
    operating_guide = "Always give temperatures in Celsius."

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_weather", description="Forecast for a city.", args_schema=CityArgs)
        async def get_weather(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            self.calls.append(args.city)
            return {"city": args.city, "celsius": 21, "user": rt_ctx.user.did}

        return [get_weather]


class AuditPlugin(OraclePlugin):
    name = "audit"
    version = "1.0.0"
    manifest = {"title": "Audit", "summary": "Records audit entries.", "visibility": "silent"}

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="audit_note", description="Record an audit note.", args_schema=TextArgs)
        def audit_note(args: TextArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return "recorded"

        return [audit_note]


USER = UserInfo(did="did:key:z6MkEndToEndUser", timezone="UTC")
OTHER_USER = UserInfo(did="did:key:z6MkSomebodyElse", timezone="UTC")


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            call_tool("list_capabilities", {}),
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_weather", {"city": "Paris"}),
            reply("It is 21 °C in Paris."),
            # turn 2, same thread: the tool is visible without loading again
            call_tool("get_weather", {"city": "Rome"}),
            reply("It is 21 °C in Rome."),
        ],
        strict=True,
    )


@pytest.fixture
async def runtime(tmp_path: Path, model: ScriptedChatModel) -> AsyncIterator[OracleRuntime]:
    env = {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "scripted",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }
    rt = await create_runtime(
        {"name": "End To End Oracle"},
        plugins=[ClockPlugin(), WeatherPlugin(), AuditPlugin()],
        hooks=MainAgentHooks(resolve_model=lambda role, **_: model),
        env=env,
        discover_entry_points=False,
    )
    try:
        yield rt
    finally:
        await rt.aclose()


async def _turn(rt: OracleRuntime, user: UserInfo, thread: str, text: str) -> dict[str, Any]:
    return await rt.run_turn(TurnRequest(user=user, session=SessionInfo(id=thread), message=text))


async def test_meta_tools_gate_and_persistence(
    runtime: OracleRuntime, model: ScriptedChatModel, tmp_path: Path
) -> None:
    state = await _turn(runtime, USER, "thread-a", "What's the weather in Paris?")

    # The gate hid the on-demand tool until load_capability ran, then showed it on the
    # very next model call of the same turn; silent and always tools were visible.
    before_load = set(model.calls[0].tool_names)
    assert "get_weather" not in before_load
    assert {"list_capabilities", "load_capability", "city_time", "audit_note"} <= before_load
    assert "get_weather" not in model.calls[1].tool_names
    assert "get_weather" in model.calls[2].tool_names

    tool_messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    listed = json.loads(str(tool_messages[0].content))
    assert [item["name"] for item in listed] == ["clock", "weather"]  # silent not listed
    loaded = json.loads(str(tool_messages[1].content))["results"][0]
    assert loaded["name"] == "weather"
    assert loaded["alreadyAvailable"] is False
    assert loaded["operatingGuide"] == "Always give temperatures in Celsius."
    assert loaded["tools"] == [
        {"name": "get_weather", "description": "[Weather] Forecast for a city."}
    ]
    assert json.loads(str(tool_messages[2].content)) == {
        "city": "Paris",
        "celsius": 21,
        "user": USER.did,
    }
    assert state["loaded_plugins"] == ["weather"]
    assert state["messages"][-1].text == "It is 21 °C in Paris."

    # Turn 2 on the same thread: loaded_plugins came back from the SQLite checkpoint, so
    # the tool is visible on the first model call and the operating guide is in the prompt.
    state = await _turn(runtime, USER, "thread-a", "And in Rome?")
    assert "get_weather" in model.calls[4].tool_names
    system_prompt = model.calls[4].system_prompt or ""
    assert "### Weather\nAlways give temperatures in Celsius." in system_prompt
    assert state["loaded_plugins"] == ["weather"]
    assert state["messages"][-1].text == "It is 21 °C in Rome."

    # The checkpoint is a real per-user SQLite file.
    savers = SqliteCheckpointers(tmp_path / "checkpoints")
    assert savers.path_for(USER.did).exists()
    assert not savers.path_for(OTHER_USER.did).exists()


async def test_loaded_plugins_do_not_leak_into_another_thread(
    runtime: OracleRuntime, model: ScriptedChatModel
) -> None:
    await _turn(runtime, USER, "thread-a", "What's the weather in Paris?")
    built = await runtime.build_agent(
        TurnRequest(user=USER, session=SessionInfo(id="thread-b"), message="Weather in Rome?")
    )
    assert built.context.runtime_context is not None
    assert built.context.runtime_context.history.state.loaded_plugins == frozenset()
    # The strict model proves the gate: on a fresh thread a call to the on-demand tool is
    # a call to a tool the model cannot see.
    with pytest.raises(ToolNotVisibleError):
        await built.agent.ainvoke(built.input, config=built.config, context=built.context)

    other = await runtime.build_agent(
        TurnRequest(user=OTHER_USER, session=SessionInfo(id="thread-a"), message="hi")
    )
    assert other.context.runtime_context is not None
    assert other.context.runtime_context.history.messages == ()
