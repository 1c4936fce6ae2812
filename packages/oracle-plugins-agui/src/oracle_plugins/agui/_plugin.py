"""The ``agui`` plugin: the AG-UI Agent, which runs the client's AG-UI actions."""

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

__all__ = ["SUB_AGENT_NAME", "AguiPlugin"]

SUB_AGENT_NAME = "AG-UI Agent"

DESCRIPTION = (
    "Shows the user interactive components in their client (data tables, charts, "
    "forms) through the AG-UI actions it offers. Give it one task with all the data to "
    "show: it sees no conversation."
)


def _prompt(tools: list[PluginTool]) -> str:
    listed = "\n".join(f"- `{tool.name}`: {tool.description}" for tool in tools)
    return (
        "You render components in the user's client with its AG-UI actions:\n\n"
        f"{listed}\n\n"
        "Whenever the task carries enough to fill an action's parameters, call the action "
        "at once with exactly the parameters its schema names; ask for nothing and never "
        "write the data out as text instead. Then reply with one line confirming what you "
        "showed. If an action fails, reply with one line saying what failed."
    )


class AguiPlugin(OraclePlugin):
    """Gives the model ``call_ag-ui_agent`` when the client declares AG-UI actions.

    Each entry of ``state.ag_actions`` (``{name, description, schema, hasRender?}``,
    replaced by the client on every message) becomes a tool of the sub-agent with a
    pydantic model generated from its JSON Schema; a call runs in the client through
    ``rt_ctx.frontend`` (``action_call`` / ``action_call_result``, call ids
    ``ag_<requestId>_<8 hex>``), and ``result.success: false`` fails it. Every action call
    is forwarded into the parent thread, so the client renders it in the conversation.
    """

    name = "agui"
    version = "0.1.0"
    manifest = PluginManifest(
        title="AG-UI",
        summary=(
            "Interactive components in the user's client, such as data tables, charts "
            "and forms, through the AG-UI actions it offers."
        ),
        when_to_use=[
            "The answer is best shown as a table, chart or form the client offers.",
            "The user asks to see data laid out in their client.",
        ],
        when_not_to_use=[
            "The client declared no AG-UI actions on this message (the agent is absent).",
            "A short text answer serves the user as well.",
        ],
        examples=[
            {
                "user": "Show my last five transactions as a table.",
                "thought": "The client offers create_data_table: delegate with the rows.",
                "tool": "call_ag-ui_agent",
            }
        ],
        tags=["agui", "ui", "components"],
        category="ui",
        visibility="on-demand",
        stability="stable",
    )

    def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        """The AG-UI Agent over this message's actions, or nothing."""
        declared = frontend_tools("action", rt_ctx.history.state.get("ag_actions"))
        declared.report(rt_ctx)
        return declared.sub_agent(
            name=SUB_AGENT_NAME,
            description=DESCRIPTION,
            system_prompt=_prompt,
            forward_tools=True,
        )
