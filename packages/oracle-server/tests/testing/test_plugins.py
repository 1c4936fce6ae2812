"""The kit's plugins pass core's conformance suite and answer as their docstrings say."""

from __future__ import annotations

import json

import pytest

from oracle_core import OraclePlugin
from oracle_core.testing import (
    ScriptedChatModel,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_server.testing import Announcer, ClockPlugin, WeatherPlugin


@pytest.mark.parametrize(
    "plugin", [ClockPlugin(), WeatherPlugin(), Announcer()], ids=lambda plugin: plugin.name
)
async def test_each_plugin_passes_the_conformance_suite(plugin: OraclePlugin) -> None:
    report = await validate_plugin(plugin)

    assert report.ok, report


async def test_the_clock_and_the_weather_answer_their_fixed_figures() -> None:
    model = ScriptedChatModel(
        [
            call_tool("city_time", {"city": "Lima"}),
            call_tool("load_capability", {"names": ["weather"]}),
            call_tool("get_weather", {"city": "Oslo"}),
            reply("done"),
        ],
        strict=True,
    )
    runtime = await create_test_runtime(plugins=[ClockPlugin(), WeatherPlugin()], model=model)
    try:
        turn = await runtime.run_turn("time in Lima, weather in Oslo?")
    finally:
        await runtime.aclose()

    assert [m.content for m in turn.tool_messages("city_time")] == ["12:00 in Lima"]
    [weather] = turn.tool_messages("get_weather")
    assert json.loads(str(weather.content)) == {"city": "Oslo", "celsius": 21}
    assert turn.text == "done"
