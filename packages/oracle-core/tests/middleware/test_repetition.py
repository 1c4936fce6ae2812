"""Tests of ``tool-repetition-guard`` (CORE-78)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import tool

from oracle_core._context import OracleRunContext, TurnBindings
from oracle_core._middleware import ToolRepetitionGuardMiddleware
from oracle_core.testing import ScriptedChatModel, call_tool, call_tools

RUNS: list[str] = []


@tool
def lookup(query: str, limit: int = 5) -> str:
    """Look something up."""
    RUNS.append(f"{query}:{limit}")
    return f"found {query}"


def answers(messages: Sequence[BaseMessage]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


async def test_third_identical_call_is_blocked_and_different_args_still_run() -> None:
    model = ScriptedChatModel(
        [
            call_tool("lookup", {"query": "a", "limit": 1}, id="c1"),
            # Same arguments in another key order: still the same call.
            call_tool("lookup", {"limit": 1, "query": "a"}, id="c2"),
            call_tool("lookup", {"query": "a", "limit": 1}, id="c3"),
            call_tool("lookup", {"query": "b", "limit": 1}, id="c4"),
            "done",
        ]
    )
    graph: Any = create_agent(model, [lookup], middleware=[ToolRepetitionGuardMiddleware()])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "find")]})

    replies = answers(result["messages"])
    assert RUNS == ["a:1", "a:1", "b:1"]
    assert replies["c2"].status == "success"
    blocked = replies["c3"]
    assert blocked.status == "error"
    assert blocked.name == "lookup"
    assert "not run again" in blocked.text
    assert "Reuse the earlier result" in blocked.text
    assert replies["c4"].status == "success"


async def test_identical_calls_in_one_step_count_too() -> None:
    model = ScriptedChatModel(
        [call_tools([("lookup", {"query": "a"}, f"c{i}") for i in range(3)]), "done"]
    )
    graph: Any = create_agent(model, [lookup], middleware=[ToolRepetitionGuardMiddleware()])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "find")]})

    statuses = sorted(m.status for m in answers(result["messages"]).values())
    assert statuses == ["error", "success", "success"]
    assert RUNS == ["a:5", "a:5"]


async def test_counts_start_over_in_each_run() -> None:
    model = ScriptedChatModel(
        [
            call_tool("lookup", {"query": "a"}, id="c1"),
            call_tool("lookup", {"query": "a"}, id="c2"),
            "first",
            call_tool("lookup", {"query": "a"}, id="c3"),
            "second",
        ]
    )
    # The runtime gives every run fresh TurnBindings; one shared instance serves both runs.
    guard = ToolRepetitionGuardMiddleware()
    graph: Any = create_agent(model, [lookup], middleware=[guard], context_schema=OracleRunContext)
    RUNS.clear()

    def context() -> OracleRunContext:
        return OracleRunContext(user_did="did:key:z", session_id="s", turn=TurnBindings())

    await graph.ainvoke({"messages": [("user", "one")]}, context=context())
    second = await graph.ainvoke({"messages": [("user", "two")]}, context=context())

    assert RUNS == ["a:5", "a:5", "a:5"]
    assert answers(second["messages"])["c3"].status == "success"


async def test_counts_of_a_run_live_in_its_turn_bindings() -> None:
    model = ScriptedChatModel([call_tool("lookup", {"query": "a"}, id="c1"), "done"])
    graph: Any = create_agent(
        model,
        [lookup],
        middleware=[ToolRepetitionGuardMiddleware()],
        context_schema=OracleRunContext,
    )
    bindings = TurnBindings()
    await graph.ainvoke(
        {"messages": [("user", "one")]},
        context=OracleRunContext(user_did="did:key:z", session_id="s", turn=bindings),
    )
    assert bindings.call_counts == {'lookup:{"query": "a"}': 1}


async def test_max_repeats_is_configurable() -> None:
    model = ScriptedChatModel(
        [
            call_tool("lookup", {"query": "a"}, id="c1"),
            call_tool("lookup", {"query": "a"}, id="c2"),
            "x",
        ]
    )
    graph: Any = create_agent(model, [lookup], middleware=[ToolRepetitionGuardMiddleware(1)])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "find")]})

    assert RUNS == ["a:5"]
    assert answers(result["messages"])["c2"].status == "error"


def test_max_repeats_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_repeats"):
        ToolRepetitionGuardMiddleware(0)
