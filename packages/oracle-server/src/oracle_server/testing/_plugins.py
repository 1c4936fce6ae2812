"""Small plugins that the server's tests and benchmarks serve.

- `ClockPlugin` (always visible): ``city_time`` answers ``12:00 in <city>`` at once.
- `WeatherPlugin` (on demand, so a turn loads it first): ``get_weather`` answers
  ``{"city": <city>, "celsius": 21}``.
- `Announcer` (always visible): ``announce`` emits one client event of every kind
  through ``rt_ctx.emit``, to follow them to the sockets of the turn's session.
- `SessionListener` (silent): records the session events ``on_session_event`` hears in
  ``heard``: ``(kind, session id, user DID, title, texts of the thread it took away)``.
- `SecretProbePlugin` (always visible): ``probe_secrets {names}`` reads those of the
  user's secrets through ``rt_ctx.secrets`` and keeps the values in ``read``, as a sandbox
  plugin would send them; the model is told only which names were found.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    SessionEvent,
    plugin_tool,
)

__all__ = [
    "Announcer",
    "CityArgs",
    "ClockPlugin",
    "SecretProbePlugin",
    "SessionListener",
    "WeatherPlugin",
]


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


class SecretNames(BaseModel):
    """Arguments of ``probe_secrets``."""

    model_config = ConfigDict(extra="forbid")
    names: list[str]


class SecretProbePlugin(OraclePlugin):
    """Reads the user's secrets by name; keeps the values it got in :attr:`read`."""

    name = "secret-probe"
    version = "1"
    manifest = PluginManifest(
        title="Secret probe", summary="Reads secrets.", when_to_use=["secrets"], visibility="always"
    )

    def __init__(self) -> None:
        self.read: list[dict[str, str]] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="probe_secrets", description="Read secrets.", args_schema=SecretNames)
        async def probe_secrets(args: SecretNames, rt_ctx: RuntimeContext[Any]) -> str:
            assert rt_ctx.secrets is not None
            values = await rt_ctx.secrets.get_values(args.names)
            self.read.append(values)
            return json.dumps(sorted(values))  # names only: values never reach the model

        return [probe_secrets]


class SessionListener(OraclePlugin):
    """Records the session events it hears, with the thread a deletion took away."""

    name = "listener"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Listener", summary="Listens.", when_to_use=["never"], visibility="silent"
    )

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str, str | None, list[str]]] = []

    async def on_session_event(self, event: SessionEvent, rt_ctx: RuntimeContext[Any]) -> None:
        texts = [str(m.text) for m in event.messages]
        self.heard.append((event.kind, event.session_id, rt_ctx.user.did, event.title, texts))
