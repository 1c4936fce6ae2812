"""Tests of ``capability-gate`` (CORE-57, CORE-58) in real ``create_agent`` runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.types import Command

from oracle_core._context import OracleRunContext
from oracle_core._middleware import CapabilityGateMiddleware
from oracle_core._state import MainAgentState
from oracle_core._tools import ToolInfo
from oracle_core.testing import ScriptedChatModel, call_tool, call_tools

RUNS: list[str] = []


@tool
def web_search(query: str) -> str:
    """Search the web."""
    RUNS.append(f"web_search:{query}")
    return f"results for {query}"


@tool
def remember(fact: str) -> str:
    """Remember a fact."""
    return "ok"


@tool
def ping() -> str:
    """Health check."""
    return "pong"


@tool
def list_capabilities() -> str:
    """List capabilities."""
    return "[]"


@tool
def unindexed() -> str:
    """A tool the runtime knows nothing about."""
    return "ok"


@tool
def load_capability(
    names: list[str], tool_call_id: Annotated[str, InjectedToolCallId]
) -> Command[Any]:
    """Load capabilities (simplified: trusts the names)."""
    loaded = ToolMessage(content="loaded", tool_call_id=tool_call_id)
    return Command(update={"loaded_plugins": names, "messages": [loaded]})


INDEX = {
    "web_search": ToolInfo(name="web_search", owner="web", visibility="on-demand"),
    "remember": ToolInfo(name="remember", owner="memory", visibility="always"),
    "ping": ToolInfo(name="ping", owner="diag", visibility="silent"),
    "list_capabilities": ToolInfo(name="list_capabilities", owner=None, visibility="always"),
}
TOOLS: list[BaseTool] = [web_search, remember, ping, list_capabilities, unindexed]
VISIBLE_WITHOUT_WEB = ("remember", "ping", "list_capabilities", "unindexed")


def agent(model: ScriptedChatModel, tools: Sequence[BaseTool] = TOOLS) -> Any:
    return create_agent(
        model,
        list(tools),
        middleware=[CapabilityGateMiddleware(INDEX)],
        state_schema=MainAgentState,
        context_schema=OracleRunContext,
    )


def context(preloaded: frozenset[str] = frozenset()) -> OracleRunContext:
    return OracleRunContext(user_did="did:key:z6Mk", session_id="s1", preloaded_plugins=preloaded)


async def test_on_demand_tool_hidden_until_its_plugin_is_loaded() -> None:
    model = ScriptedChatModel(["a", "b"])
    graph = agent(model)

    await graph.ainvoke({"messages": [("user", "hi")]}, context=context())
    await graph.ainvoke({"messages": [("user", "hi")], "loaded_plugins": ["web"]})

    assert [c.tool_names for c in model.calls] == [
        VISIBLE_WITHOUT_WEB,
        tuple(t.name for t in TOOLS),
    ]


async def test_preloaded_plugins_pass_the_gate() -> None:
    model = ScriptedChatModel(["a"])

    await agent(model).ainvoke({"messages": [("user", "hi")]}, context=context(frozenset({"web"})))

    assert "web_search" in model.calls[0].tool_names


async def test_plain_use_without_context_or_loaded_key_hides_on_demand_tools() -> None:
    model = ScriptedChatModel(["a"])
    graph: Any = create_agent(model, TOOLS, middleware=[CapabilityGateMiddleware(INDEX)])

    await graph.ainvoke({"messages": [("user", "hi")]})

    assert [c.tool_names for c in model.calls] == [VISIBLE_WITHOUT_WEB]


async def test_load_takes_effect_from_the_next_model_call_of_the_turn() -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["web"]}, id="c1"),
            call_tool("web_search", {"query": "news"}, id="c2"),
            "done",
        ]
    )
    RUNS.clear()

    result = await agent(model, [*TOOLS, load_capability]).ainvoke(
        {"messages": [("user", "news?")]}, context=context()
    )

    assert "web_search" not in model.calls[0].tool_names
    assert "web_search" in model.calls[1].tool_names
    assert RUNS == ["web_search:news"]
    assert result["loaded_plugins"] == ["web"]


async def test_hallucinated_call_to_hidden_tool_is_refused_without_running() -> None:
    model = ScriptedChatModel([call_tool("web_search", {"query": "x"}, id="c1"), "ok"])
    RUNS.clear()

    result = await agent(model).ainvoke({"messages": [("user", "hi")]}, context=context())

    refusal = result["messages"][2]
    assert isinstance(refusal, ToolMessage)
    assert refusal.status == "error"
    assert refusal.tool_call_id == "c1"
    assert refusal.name == "web_search"
    assert "load_capability" in refusal.text
    assert '["web"]' in refusal.text
    assert RUNS == []


async def test_call_in_the_same_step_as_its_own_load_is_refused() -> None:
    both = call_tools(
        [("load_capability", {"names": ["web"]}, "c1"), ("web_search", {"query": "x"}, "c2")]
    )
    model = ScriptedChatModel([both, "ok"])
    RUNS.clear()

    result = await agent(model, [*TOOLS, load_capability]).ainvoke(
        {"messages": [("user", "hi")]}, context=context()
    )

    replies = {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert replies["c2"].status == "error"
    assert RUNS == []
    assert result["loaded_plugins"] == ["web"]


async def test_visible_tools_run_normally() -> None:
    model = ScriptedChatModel([call_tool("ping", id="c1"), "ok"])

    result = await agent(model).ainvoke({"messages": [("user", "hi")]}, context=context())

    answer = result["messages"][2]
    assert isinstance(answer, ToolMessage)
    assert answer.status == "success"
    assert answer.text == "pong"


async def test_provider_dict_tools_are_never_filtered() -> None:
    model = ScriptedChatModel(["a"])
    provider_tool = {"type": "web_search_preview", "name": "provider_search"}
    graph: Any = create_agent(
        model,
        [web_search, provider_tool],
        middleware=[CapabilityGateMiddleware(INDEX)],
        state_schema=MainAgentState,
    )

    await graph.ainvoke({"messages": [("user", "hi")]})

    assert [c.tool_names for c in model.calls] == [("provider_search",)]
