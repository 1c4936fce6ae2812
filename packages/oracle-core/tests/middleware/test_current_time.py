"""``current-time``: one system prompt through a day, the precise time after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    MainAgentHooks,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    UserInfo,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime

MORNING = datetime(2026, 3, 2, 7, 0, 5, tzinfo=UTC)
EVENING = datetime(2026, 3, 2, 21, 42, 31, tzinfo=UTC)
NEXT_DAY = datetime(2026, 3, 3, 6, 15, 0, tzinfo=UTC)


def clock(*moments: datetime) -> Iterator[datetime]:
    return iter(moments)


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Weather", summary="Forecasts.", when_to_use=["forecasts"], visibility="on-demand"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_forecast", description="Today's forecast.", args_schema=NoArgs)
        def forecast(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return "sunny"

        return [forecast]


async def test_turns_of_one_day_send_a_byte_identical_system_prompt() -> None:
    moments = clock(MORNING, EVENING, NEXT_DAY)
    model = ScriptedChatModel(["one", "two", "three"])
    hooks = MainAgentHooks(clock=lambda: next(moments))
    async with await create_test_runtime(plugins=[], model=model, hooks=hooks) as rt:
        await rt.run_turn("first")
        await rt.run_turn("second")
        result = await rt.run_turn("third")

    morning, evening, next_day = model.calls
    assert morning.system_prompt is not None
    assert evening.system_prompt is not None
    assert morning.system_prompt.encode() == evening.system_prompt.encode()
    assert "Today is Monday, 2026-03-02 (UTC)." in morning.system_prompt
    assert next_day.system_prompt != evening.system_prompt
    assert "Today is Tuesday, 2026-03-03 (UTC)." in (next_day.system_prompt or "")

    # The precise time reaches the model just before the user's latest message.
    assert evening.messages[-2:] == (
        SystemMessage("[Current time: 2026-03-02T21:42:31+00:00 (UTC)]"),
        HumanMessage("second", id=evening.messages[-1].id),
    )
    # The note only travels with the request: the thread stores what was said.
    assert [m.text for m in result.state["messages"]] == [
        "first",
        "one",
        "second",
        "two",
        "third",
        "three",
    ]
    # So the second turn's request begins with everything the first one sent but its note.
    assert evening.conversation[:2] == [*morning.conversation, result.state["messages"][1]]


async def test_every_call_of_a_turn_carries_the_same_note() -> None:
    model = ScriptedChatModel([call_tool("load_capability", {"names": ["weather"]}), "Loaded."])
    hooks = MainAgentHooks(clock=lambda: MORNING)
    async with await create_test_runtime(plugins=[WeatherPlugin()], model=model, hooks=hooks) as rt:
        await rt.run_turn("load the weather")

    first, second = model.calls
    note = SystemMessage("[Current time: 2026-03-02T07:00:05+00:00 (UTC)]")
    assert first.messages[1] == note
    assert second.messages[1] == note
    # The second call's request extends the first one's: the cached prefix grows.
    assert second.messages[: len(first.messages)] == first.messages


async def test_the_clients_time_is_the_one_shown() -> None:
    user = UserInfo(
        did="did:key:ada", timezone="Europe/Paris", current_time="2026-03-02T09:30:00+01:00"
    )
    model = ScriptedChatModel(["ok"])
    async with await create_test_runtime(plugins=[], model=model, user=user) as rt:
        await rt.run_turn("what time is it?")

    [call] = model.calls
    assert "Today is Monday, 2026-03-02 (Europe/Paris)." in (call.system_prompt or "")
    assert call.messages[-2].text == "[Current time: 2026-03-02T09:30:00+01:00 (Europe/Paris)]"
