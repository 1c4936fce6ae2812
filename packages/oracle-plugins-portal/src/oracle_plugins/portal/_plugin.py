"""The ``portal`` plugin: the Portal Agent, which runs the client's browser tools."""

from __future__ import annotations

from typing import Any

from oracle_core import (
    OraclePlugin,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    frontend_tools,
)

__all__ = ["SUB_AGENT_NAME", "PortalPlugin"]

SUB_AGENT_NAME = "Portal Agent"

DESCRIPTION = (
    "Runs actions in the user's browser through the tools their Portal page offers "
    "(open a page, fill a form, read what is on screen, list their workspace pages). "
    "Give it one task with every value it needs: it sees no conversation."
)


def _prompt(tools: list[PluginTool]) -> str:
    listed = "\n".join(f"- `{tool.name}`: {tool.description}" for tool in tools)
    return (
        "You run tools in the user's browser, in the Portal page they have open. Do the "
        "task you are given with these tools and nothing else:\n\n"
        f"{listed}\n\n"
        "Call a tool with exactly the parameters its schema names, with values taken "
        "from the task; never invent one the task does not give. If a call fails, say "
        "what failed in one sentence and do not repeat it unless the error says a retry "
        "can help. When you are done, answer with what the tools returned that the task "
        "asked for, briefly."
    )


class PortalPlugin(OraclePlugin):
    """Gives the model ``call_portal_agent`` when the client declares browser tools.

    Each entry of ``state.browser_tools`` (``{name, description, schema}``, replaced by
    the client on every message) becomes a tool of the sub-agent with a pydantic model
    generated from its JSON Schema; a call runs in the user's client through
    ``rt_ctx.frontend`` (``browser_tool_call`` / ``tool_result`` on the socket), within
    the host's frontend timeout (15 s by default). An entry that cannot become a tool is
    left out with a ``warning`` event to the client. With no browser tools declared the
    plugin contributes nothing.
    """

    name = "portal"
    version = "0.1.0"
    manifest = PluginManifest(
        title="Portal",
        summary=(
            "Actions in the user's browser through the tools their Portal page offers, "
            "such as opening a page."
        ),
        when_to_use=[
            "The user asks to open a page, fill a form or read their screen in Portal.",
            "A task needs a browser tool the client declared on this message.",
        ],
        when_not_to_use=[
            "The client declared no browser tools on this message (the agent is absent).",
            "The oracle's own tools can do the task on the server.",
        ],
        examples=[
            {
                "user": "Open my workspace and go to the Reports page.",
                "thought": "Navigation is a browser tool of the Portal page: delegate it.",
                "tool": "call_portal_agent",
            }
        ],
        tags=["portal", "browser", "ui"],
        category="ui",
        visibility="on-demand",
        stability="stable",
    )

    def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        """The Portal Agent over this message's browser tools, or nothing."""
        declared = frontend_tools("browser_tool", rt_ctx.history.state.get("browser_tools"))
        declared.report(rt_ctx)
        return declared.sub_agent(
            name=SUB_AGENT_NAME,
            description=DESCRIPTION,
            system_prompt=_prompt,
        )
