"""The oracle the reliability runs serve: a tool that takes a while, and the clock.

``oracle serve --app reliability.app:create_app`` with the environment of the run; the
tool's duration comes from ``RELIABILITY_TOOL_SECONDS`` (0.2 s by default), so a kill
can land while a tool runs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import ClockPlugin

__all__ = ["SlowLookupPlugin", "create_app"]


class LookupArgs(BaseModel):
    """Arguments of ``slow_lookup``."""

    topic: str


class SlowLookupPlugin(OraclePlugin):
    """``slow_lookup``: answers after ``RELIABILITY_TOOL_SECONDS``."""

    name = "slow-lookup"
    version = "1.0.0"
    manifest = {
        "title": "Slow lookup",
        "summary": "Looks a topic up, slowly.",
        "when_to_use": ["The user asks to look something up"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """The one tool."""
        seconds = float(os.environ.get("RELIABILITY_TOOL_SECONDS", "0.2"))

        @plugin_tool(name="slow_lookup", description="Look a topic up.", args_schema=LookupArgs)
        async def slow_lookup(args: LookupArgs, rt_ctx: RuntimeContext[Any]) -> dict[str, str]:
            await asyncio.sleep(seconds)
            return {"topic": args.topic, "found": f"notes about {args.topic}"}

        return [slow_lookup]


async def create_app() -> OracleApp:
    """The oracle of a reliability run, configured by the environment."""
    return await create_oracle_app(
        {"name": "Reliability Oracle"},
        plugins=[SlowLookupPlugin(), ClockPlugin()],
        discover_entry_points=False,
    )
