"""Tests of the plugin middleware contract (CORE-52, CORE-82)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.runtime import Runtime
from langgraph.types import Command

from oracle_core._context import OracleRunContext
from oracle_core._errors import MiddlewareContractError, OracleBootError
from oracle_core._middleware import (
    RESERVED_MIDDLEWARE_NAMES,
    check_plugin_middleware,
    wrap_plugin_middleware,
)
from oracle_core.testing import ScriptedChatModel, call_tool

HOOKS = (
    "before_agent",
    "abefore_agent",
    "before_model",
    "abefore_model",
    "wrap_model_call",
    "awrap_model_call",
    "after_model",
    "aafter_model",
    "wrap_tool_call",
    "awrap_tool_call",
    "after_agent",
    "aafter_agent",
)


def overridden(middleware: AgentMiddleware[Any, Any]) -> set[str]:
    cls = type(middleware)
    return {hook for hook in HOOKS if getattr(cls, hook) is not getattr(AgentMiddleware, hook)}


class WritesState(AgentMiddleware[AgentState[Any], Any]):
    """Breaks the contract: adds a message from ``before_model``."""

    @property
    def name(self) -> str:
        return "notes"

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return {"messages": [HumanMessage(content="injected")]}


class Observes(AgentMiddleware[AgentState[Any], Any]):
    """Keeps the contract: reads and returns ``None``; sees the run context."""

    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[Any] = []

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        self.contexts.append(runtime.context)

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        self.contexts.append(state["messages"][-1].content)


class EndsEarly(AgentMiddleware[AgentState[Any], Any]):
    """Ends the run before the model is called."""

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return {"jump_to": "end"}


class EndsAfterAgent(AgentMiddleware[AgentState[Any], Any]):
    """Asks to end from ``after_agent``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @hook_config(can_jump_to=["end"])
    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        self.calls += 1
        return {"jump_to": "end"}


class WrapsCalls(AgentMiddleware[AgentState[Any], Any]):
    """Uses both async wrap hooks; records what passed through."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        self.seen.append("model")
        return await handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        self.seen.append(f"tool:{request.tool_call['name']}")
        result = await handler(request)
        # wrap_* results are the plugin's business: this one rewrites the tool result.
        assert isinstance(result, ToolMessage)
        return result.model_copy(update={"content": f"wrapped {result.content}"})


@tool
def ping() -> str:
    """Health check."""
    return "pong"


def hello() -> dict[str, Any]:
    return {"messages": [("user", "hello")]}


async def test_node_hook_returning_state_keys_fails_the_turn() -> None:
    model = ScriptedChatModel(["hi"])
    graph: Any = create_agent(
        model, [], middleware=[wrap_plugin_middleware("notes-plugin", WritesState())]
    )

    with pytest.raises(MiddlewareContractError) as caught:
        await graph.ainvoke(hello())

    error = caught.value
    assert error.plugin == "notes-plugin"
    assert error.middleware == "notes"
    assert error.hook == "abefore_model"
    assert error.keys == ("messages",)
    assert error.code == "turn.middleware.contract"


async def test_hook_returning_none_runs_with_the_injected_runtime() -> None:
    observes = Observes()
    model = ScriptedChatModel(["hi"])
    graph: Any = create_agent(
        model,
        [],
        middleware=[wrap_plugin_middleware("obs", observes)],
        context_schema=OracleRunContext,
    )
    context = OracleRunContext(user_did="did:key:z6Mk", session_id="s1")

    result = await graph.ainvoke(hello(), context=context)

    assert result["messages"][-1].content == "hi"
    assert observes.contexts == [context, "hi"]


async def test_jump_to_end_ends_the_run_before_the_model() -> None:
    model = ScriptedChatModel()  # any model call would fail: the script is empty
    graph: Any = create_agent(model, [], middleware=[wrap_plugin_middleware("guard", EndsEarly())])

    result = await graph.ainvoke(hello())

    assert [m.content for m in result["messages"]] == ["hello"]


async def test_jump_to_end_from_after_agent_finishes_without_looping() -> None:
    ends = EndsAfterAgent()
    model = ScriptedChatModel(["hi"])
    graph: Any = create_agent(model, [], middleware=[wrap_plugin_middleware("p", ends)])

    result = await graph.ainvoke(hello())

    assert result["messages"][-1].content == "hi"
    assert ends.calls == 1


async def test_wrap_hooks_pass_through_unchanged() -> None:
    wraps = WrapsCalls()
    model = ScriptedChatModel([call_tool("ping", id="c1"), "done"])
    graph: Any = create_agent(model, [ping], middleware=[wrap_plugin_middleware("w", wraps)])

    result = await graph.ainvoke(hello())

    assert wraps.seen == ["model", "tool:ping", "model"]
    assert result["messages"][2].content == "wrapped pong"


def test_proxy_overrides_exactly_the_original_hooks_and_keeps_name_and_jumps() -> None:
    for original in (WritesState(), Observes(), EndsEarly(), EndsAfterAgent(), WrapsCalls()):
        proxy = wrap_plugin_middleware("p", original)

        assert overridden(proxy) == overridden(original)
        assert proxy.name == original.name
        for hook in overridden(original):
            expected = getattr(getattr(type(original), hook), "__can_jump_to__", None)
            assert getattr(getattr(type(proxy), hook), "__can_jump_to__", None) == expected
    assert overridden(wrap_plugin_middleware("p", EndsEarly())) == {"abefore_model"}
    jumps = type(wrap_plugin_middleware("p", EndsEarly())).abefore_model
    assert getattr(jumps, "__can_jump_to__", None) == ["end"]


def test_proxy_delegates_other_attributes() -> None:
    observes = Observes()

    proxy = wrap_plugin_middleware("obs", observes)

    assert getattr(proxy, "contexts") is observes.contexts  # noqa: B009


@pytest.mark.parametrize(
    "result",
    [{"jump_to": "model"}, {}, Command(goto="end")],
    ids=["jump-to-model", "empty-dict", "command"],
)
def test_other_results_break_the_contract(result: Any) -> None:
    class Returns(AgentMiddleware[AgentState[Any], Any]):
        def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> Any:
            return result

    proxy = wrap_plugin_middleware("p", Returns())

    with pytest.raises(MiddlewareContractError) as caught:
        proxy.after_model({"messages": []}, Runtime())

    assert caught.value.hook == "after_model"


# --- boot checks -------------------------------------------------------------------


class SyncOnlyModelWrap(AgentMiddleware[AgentState[Any], Any]):
    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(request)


class SyncOnlyToolWrap(AgentMiddleware[AgentState[Any], Any]):
    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return handler(request)


class WithTools(AgentMiddleware[AgentState[Any], Any]):
    def __init__(self) -> None:
        super().__init__()
        self.tools = [ping]


class ExtraState(AgentState[Any]):
    scratch: NotRequired[str]


class WithState(AgentMiddleware[ExtraState, Any]):
    state_schema = ExtraState


class Reserved(AgentMiddleware[AgentState[Any], Any]):
    @property
    def name(self) -> str:
        return "capability-gate"


@pytest.mark.parametrize(
    ("middleware", "problem"),
    [
        (object(), "is not a LangChain AgentMiddleware"),
        (WithTools(), "declares tools"),
        (WithState(), "declares state_schema ExtraState"),
        (SyncOnlyModelWrap(), "implements wrap_model_call without awrap_model_call"),
        (SyncOnlyToolWrap(), "implements wrap_tool_call without awrap_tool_call"),
        (Reserved(), "reserved framework middleware name"),
    ],
    ids=["not-middleware", "tools", "state-schema", "sync-model-wrap", "sync-tool-wrap", "name"],
)
def test_boot_check_rejects_contract_breakers(middleware: object, problem: str) -> None:
    with pytest.raises(OracleBootError) as caught:
        check_plugin_middleware("bad-plugin", middleware)

    assert caught.value.code == "boot.plugin.invalid"
    assert "plugin 'bad-plugin'" in str(caught.value)
    assert problem in str(caught.value)
    assert caught.value.hint


@pytest.mark.parametrize(
    "middleware",
    [Observes(), EndsEarly(), WrapsCalls(), WritesState()],
    ids=["sync-node-hook", "async-node-hook", "async-wraps", "runtime-checked-only"],
)
def test_boot_check_accepts_contract_keepers(middleware: AgentMiddleware[Any, Any]) -> None:
    check_plugin_middleware("good-plugin", middleware)


def test_reserved_names_are_the_framework_middleware_in_order() -> None:
    assert RESERVED_MIDDLEWARE_NAMES == (
        "tool-policy",
        "capability-gate",
        "tool-validation",
        "tool-repetition-guard",
        "tool-approval",
        "tool-retry",
        "page-context",
        "safety-guardrail",
        "current-time",
        "history-condenser",
    )
