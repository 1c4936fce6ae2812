"""The framework middleware composed in CORE-76 order: first ``wrap_*`` is outermost."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command
from pydantic import BaseModel

from oracle_core._middleware import (
    CapabilityGateMiddleware,
    EffectAwareToolRetryMiddleware,
    ToolRepetitionGuardMiddleware,
    ToolValidationMiddleware,
)
from oracle_core._state import MainAgentState
from oracle_core._tools import ToolInfo
from oracle_core.testing import ScriptedChatModel, call_tool


class SearchArgs(BaseModel):
    query: str


RUNS: list[str] = []


@tool(args_schema=SearchArgs)
def web_search(query: str) -> str:
    """Search the web."""
    RUNS.append(query)
    raise ConnectionError("offline")


M = TypeVar("M", bound=AgentMiddleware[Any, Any])

INDEX = {"web_search": ToolInfo(name="web_search", owner="web", visibility="on-demand")}


def framework(log: list[str]) -> list[AgentMiddleware[Any, Any]]:
    """The four always-on middleware, each logging when its ``awrap_tool_call`` is entered."""

    def logged(cls: type[M]) -> type[M]:
        class Logged(cls):  # type: ignore[valid-type,misc]
            async def awrap_tool_call(
                self,
                request: ToolCallRequest,
                handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
            ) -> ToolMessage | Command[Any]:
                log.append(self.name)
                result: ToolMessage | Command[Any] = await super().awrap_tool_call(request, handler)
                return result

        return Logged

    return [
        logged(CapabilityGateMiddleware)(INDEX),
        logged(ToolValidationMiddleware)(),
        logged(ToolRepetitionGuardMiddleware)(),
        logged(EffectAwareToolRetryMiddleware)(INDEX, backoff_seconds=0),
    ]


def script(*args: dict[str, Any]) -> ScriptedChatModel:
    """One ``web_search`` call per argument dict (ids ``c0``, ``c1``, …), then ``done``."""
    calls = [call_tool("web_search", a, id=f"c{i}") for i, a in enumerate(args)]
    return ScriptedChatModel([*calls, "done"])


async def test_gate_is_outermost_and_each_layer_stops_what_it_owns() -> None:
    log: list[str] = []
    graph: Any = create_agent(
        script({"query": 1}), [web_search], middleware=framework(log), state_schema=MainAgentState
    )
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "search")]})

    # The plugin is not loaded: the gate answers, and no inner layer is even entered,
    # although the arguments are invalid too.
    assert log == ["capability-gate"]
    refusal = result["messages"][2]
    assert isinstance(refusal, ToolMessage)
    assert "load_capability" in refusal.text
    assert RUNS == []


async def test_loaded_call_passes_every_layer_in_list_order() -> None:
    log: list[str] = []
    graph: Any = create_agent(
        script({"query": 1}, {"query": "x"}, {"query": "x"}, {"query": "x"}),
        [web_search],
        middleware=framework(log),
        state_schema=MainAgentState,
    )
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "search")], "loaded_plugins": ["web"]})

    replies = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    gate, validation, repetition, retry = (
        "capability-gate",
        "tool-validation",
        "tool-repetition-guard",
        "tool-retry",
    )
    assert log == [
        gate, validation,  # c0: invalid arguments stop at validation
        gate, validation, repetition, retry,  # c1: runs, fails twice, retry reports
        gate, validation, repetition, retry,  # c2: same again (second execution)
        gate, validation, repetition,  # c3: third identical call stopped by repetition
    ]  # fmt: skip
    assert "Invalid arguments" in replies[0].text
    assert "ConnectionError: offline" in replies[1].text
    assert "ConnectionError: offline" in replies[2].text
    assert "not run again" in replies[3].text
    # Two executions, each tried twice by tool-retry.
    assert RUNS == ["x", "x", "x", "x"]


def test_sync_invoke_gives_the_same_answers() -> None:
    graph: Any = create_agent(
        script({"query": 1}, {"query": "x"}, {"query": "x"}, {"query": "x"}),
        [web_search],
        middleware=[
            CapabilityGateMiddleware(INDEX),
            ToolValidationMiddleware(),
            ToolRepetitionGuardMiddleware(),
            EffectAwareToolRetryMiddleware(INDEX, backoff_seconds=0),
        ],
        state_schema=MainAgentState,
    )
    RUNS.clear()

    result = graph.invoke({"messages": [("user", "search")], "loaded_plugins": ["web"]})

    replies = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [r.status for r in replies] == ["error"] * 4
    assert "Invalid arguments" in replies[0].text
    assert "ConnectionError: offline" in replies[1].text
    assert "not run again" in replies[3].text
    assert RUNS == ["x", "x", "x", "x"]
