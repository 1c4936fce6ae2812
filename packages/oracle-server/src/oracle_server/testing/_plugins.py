"""Small plugins that the server's tests and benchmarks serve.

- `ClockPlugin` (always visible): ``city_time`` answers ``12:00 in <city>`` at once.
- `WeatherPlugin` (on demand, so a turn loads it first): ``get_weather`` answers
  ``{"city": <city>, "celsius": 21}``.
- `Announcer` (always visible): ``announce`` emits one client event of every kind
  through ``rt_ctx.emit``, to follow them to the sockets of the turn's session.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool

__all__ = ["Announcer", "CityArgs", "ClockPlugin", "WeatherPlugin"]


class CityArgs(BaseModel):
    """Arguments of ``city_time`` and ``get_weather``."""

    model_config = ConfigDict(extra="forbid")
    city: str


class ClockPlugin(OraclePlugin):
    """One always-visible tool that answers at once: ``city_time``."""

    name = "clock"
    version = "1.0.0"
    manifest = {
        "title": "Clock",
        "summary": "Tell the time in a city.",
        "when_to_use": ["The user asks what time it is somewhere"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """``city_time``."""

        @plugin_tool(name="city_time", description="Time in a city.", args_schema=CityArgs)
        def city_time(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return f"12:00 in {args.city}"

        return [city_time]


class WeatherPlugin(OraclePlugin):
    """An on-demand tool, ``get_weather``: a turn must load the plugin to see it."""

    name = "weather"
    version = "1.0.0"
    manifest = {
        "title": "Weather",
        "summary": "Weather forecasts for a city.",
        "when_to_use": ["The user asks about the weather"],
        "visibility": "on-demand",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """``get_weather``."""

        @plugin_tool(name="get_weather", description="Forecast for a city.", args_schema=CityArgs)
        async def get_weather(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            return {"city": args.city, "celsius": 21}

        return [get_weather]


class _NoArgs(BaseModel):
    pass


class Announcer(OraclePlugin):
    """A tool, ``announce``, that emits one client event of every kind.

    ``tool_call`` (event id ``e1``), ``render_component`` (``e2``), ``router`` (``e3``),
    ``message_cache_invalidation`` (``e4``), ``reasoning`` and ``action_call``; it
    returns ``"announced"``.
    """

    name = "announcer"
    version = "1.0.0"
    manifest = {
        "title": "Announcer",
        "summary": "Sends client events.",
        "when_to_use": ["When asked to announce something"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """``announce``."""
        return [
            PluginTool(
                name="announce",
                description="Send the client events.",
                args_schema=_NoArgs,
                handler=self.announce,
            )
        ]

    def announce(self, args: _NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        """Emit the events through ``rt_ctx.emit``, which a served oracle provides."""
        emit = rt_ctx.emit
        assert emit is not None
        emit.tool_call({"toolName": "search", "args": {}, "status": "isRunning", "eventId": "e1"})
        emit.render_component({"componentName": "Chart", "args": {"x": 1}, "eventId": "e2"})
        emit.router({"step": "preloaded", "eventId": "e3"})
        emit.message_cache_invalidation({"status": "stale", "eventId": "e4"})
        emit.reasoning({"reasoning": "hmm", "isComplete": False})
        emit.action_call({"toolCallId": "a1", "toolName": "open_panel", "status": "done"})
        return "announced"
