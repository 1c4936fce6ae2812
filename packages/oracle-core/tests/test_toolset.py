"""Tests of a user's toolset outside a turn (plugins spec §20.4): what it binds, and that
each call goes through the turn's tool-call middleware and the tool policy."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_core.testing import create_test_runtime

RUNS: list[tuple[str, str, str]] = []


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str


def recorded(name: str, effect: Any = "read") -> PluginTool:
    @plugin_tool(name=name, description=f"The {name} tool.", args_schema=Query, effect=effect)
    def handler(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS.append((name, args.query, rt_ctx.user.did))
        return json.dumps({"tool": name, "query": args.query, "call": rt_ctx.tool_call_id})

    return handler


ATTEMPTS: list[str] = []


@plugin_tool(name="flaky_lookup", description="Fails every time.", args_schema=Query)
def flaky(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
    ATTEMPTS.append(args.query)
    raise ConnectionError("upstream is down")


class Stamp(AgentMiddleware[AgentState[Any], Any]):
    """A plugin middleware that marks every tool result it passes on."""

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        if isinstance(result, ToolMessage):
            return result.model_copy(update={"content": f"stamped: {result.content}"})
        return result


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "1"
    manifest = PluginManifest(
        title="Notes", summary="Keeps notes.", when_to_use=["notes"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [recorded("notes_search"), recorded("notes_clear", "destructive"), flaky]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return [recorded("notes_for_user")]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [
            PluginSubAgent(
                name="archivist", description="Archives.", system_prompt="You archive.", tools=[]
            )
        ]

    def get_middlewares(self, ctx: PluginContext[Any]) -> list[Any]:
        return [Stamp()]


class AtlasPlugin(OraclePlugin):
    name = "atlas"
    version = "1"
    manifest = PluginManifest(
        title="Atlas", summary="Finds places.", when_to_use=["maps"], visibility="on-demand"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [recorded("atlas_find")]


def oracle(**policy: Any) -> dict[str, Any]:
    return {"name": "Toolset Oracle", "toolPolicy": policy}


async def test_it_binds_what_a_turn_binds_but_the_meta_tools_and_denied_tools() -> None:
    async with await create_test_runtime(
        plugins=[NotesPlugin(), AtlasPlugin()], oracle=oracle(deny=["flaky_*"])
    ) as rt:
        toolset = await rt.toolset()
        turn_tools = await rt.list_tools()

    assert set(toolset.tools) == {
        "notes_search",
        "notes_clear",
        "notes_for_user",
        "call_archivist_agent",
        "atlas_find",
    }
    assert {"list_capabilities", "load_capability"} <= set(turn_tools)
    assert set(toolset.tools) < set(turn_tools)
    search = toolset.tools["notes_search"]
    assert search.owner == "notes"
    assert search.effect == "read"
    assert search.description == "[Notes] The notes_search tool."
    assert search.input_schema["properties"] == {"query": {"type": "string"}}
    assert search.input_schema["required"] == ["query"]
    assert not search.sub_agent
    assert toolset.tools["call_archivist_agent"].sub_agent
    assert toolset.tools["notes_clear"].verdict.action == "approve"
    assert toolset.tools["notes_clear"].verdict.rule == "effect destructive"


async def test_a_call_runs_through_the_middleware_with_the_users_context() -> None:
    async with await create_test_runtime(
        plugins=[NotesPlugin(), AtlasPlugin()], oracle=oracle()
    ) as rt:
        RUNS.clear()
        toolset = await rt.toolset()
        found = await toolset.call("notes_search", {"query": "rent"}, call_id="call_1")
        # An on-demand capability is callable without loading it first.
        placed = await toolset.call("atlas_find", {"query": "Lisbon"})
        user = rt.user.did
        ran = list(RUNS)

    assert not found.is_error
    assert found.text.startswith("stamped: ")  # the plugin's middleware saw it
    assert json.loads(found.text.removeprefix("stamped: ")) == {
        "tool": "notes_search",
        "query": "rent",
        "call": "call_1",
    }
    assert not placed.is_error
    assert ran == [("notes_search", "rent", user), ("atlas_find", "Lisbon", user)]


async def test_bad_arguments_are_refused_by_validation_and_never_run() -> None:
    async with await create_test_runtime(plugins=[NotesPlugin()], oracle=oracle()) as rt:
        RUNS.clear()
        toolset = await rt.toolset()
        outcome = await toolset.call("notes_search", {"query": 3, "extra": True})

    assert outcome.is_error
    assert outcome.refused is None
    assert "Invalid arguments for tool 'notes_search'" in outcome.text
    assert RUNS == []


async def test_calls_that_need_approval_or_are_not_bound_are_refused() -> None:
    async with await create_test_runtime(
        plugins=[NotesPlugin()], oracle=oracle(deny=["notes_for_*"])
    ) as rt:
        RUNS.clear()
        toolset = await rt.toolset()
        clear = await toolset.call("notes_clear", {"query": "all"})
        denied = await toolset.call("notes_for_user", {"query": "x"})
        made_up = await toolset.call("load_capability", {"names": ["notes"]})

    assert (clear.is_error, clear.refused) == (True, "approval_required")
    assert "effect destructive" in clear.text
    assert (denied.refused, made_up.refused) == ("unknown_tool", "unknown_tool")
    assert RUNS == []


async def test_a_failing_read_tool_is_retried_once_then_answers_with_an_error() -> None:
    async with await create_test_runtime(plugins=[NotesPlugin()], oracle=oracle()) as rt:
        ATTEMPTS.clear()
        toolset = await rt.toolset()
        outcome = await toolset.call("flaky_lookup", {"query": "q"})

    assert outcome.is_error
    assert "ConnectionError" in outcome.text
    assert "upstream is down" in outcome.text
    assert ATTEMPTS == ["q", "q"]
