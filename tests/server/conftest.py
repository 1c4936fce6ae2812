"""Fixtures of the server end-to-end tests: plugins, the model double, a served oracle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, serving


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str


class ClockPlugin(OraclePlugin):
    name = "clock"
    version = "1.0.0"
    manifest = {
        "title": "Clock",
        "summary": "Tell the time in a city.",
        "when_to_use": ["The user asks what time it is somewhere"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="city_time", description="Time in a city.", args_schema=CityArgs)
        def city_time(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return f"12:00 in {args.city}"

        return [city_time]


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = {
        "title": "Weather",
        "summary": "Weather forecasts for a city.",
        "when_to_use": ["The user asks about the weather"],
        "visibility": "on-demand",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_weather", description="Forecast for a city.", args_schema=CityArgs)
        async def get_weather(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            return {"city": args.city, "celsius": 21}

        return [get_weather]


ServeFactory = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


@pytest.fixture
def base_env(tmp_path: Path, llm: OpenAIDouble) -> dict[str, str]:
    return {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "THROTTLE_LIMIT": "1000",
        **llm.env(),
    }


@pytest.fixture
def serve(base_env: dict[str, str]) -> ServeFactory:
    """``async with serve(**env_overrides) as (app, base_url)``: a served oracle."""

    @asynccontextmanager
    async def run(
        plugins: list[OraclePlugin] | None = None, **overrides: str
    ) -> AsyncIterator[tuple[OracleApp, str]]:
        app = await create_oracle_app(
            {"name": "E2E Oracle"},
            plugins=plugins if plugins is not None else [ClockPlugin(), WeatherPlugin()],
            env={**base_env, **overrides},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app) as base_url:
            yield app, base_url

    return run
