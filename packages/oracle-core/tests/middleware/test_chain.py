"""Wrap-only framework middleware folded into one ``FrameworkChain``: the same hooks, in
the same order, with the same results, through one LangChain middleware layer."""

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
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from oracle_core import RESERVED_MIDDLEWARE_NAMES, MainAgentHooks
from oracle_core._middleware.chain import FrameworkChain, fold_wrap_only
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: found"


class CountedState(AgentState[Any]):
    wrapped_calls: NotRequired[int]


class Recorder(AgentMiddleware[Any, Any]):
    """Logs its wrap hooks; one of them also writes state through a command."""

    def __init__(self, name: str, log: list[str], *, counts: bool = False) -> None:
        super().__init__()
        self._name = name
        self.log = log
        self.counts = counts
        if counts:
            self.state_schema = CountedState

    @property
    def name(self) -> str:
        return self._name

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[..., Awaitable[ModelResponse]]
    ) -> Any:
        self.log.append(f"{self.name}>model")
        response = await handler(request.override(system_message=None))
        self.log.append(f"{self.name}<model")
        if self.counts:
            return ExtendedModelResponse(
                model_response=response, command=Command(update={"wrapped_calls": 1})
            )
        return response

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        self.log.append(f"{self.name}>tool")
        result = await handler(request)
        self.log.append(f"{self.name}<tool")
        return result


class AfterModel(AgentMiddleware[Any, Any]):
    """A node hook: never folded."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def aafter_model(self, state: Any, runtime: Any) -> None:
        self.log.append("after-model")


async def _run(middleware: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    model = ScriptedChatModel([call_tool("lookup", {"city": "Paris"}), "Paris is found."])
    agent: Any = create_agent(model, [lookup], middleware=middleware, checkpointer=InMemorySaver())
    result = await agent.ainvoke(
        {"messages": [HumanMessage("Where is Paris?")]}, {"configurable": {"thread_id": "t"}}
    )
    return result, [[m.content for m in call.messages] for call in model.calls]


async def test_a_folded_chain_runs_the_same_hooks_in_the_same_order_as_its_members() -> None:
    apart: list[str] = []
    folded: list[str] = []

    def members(log: list[str]) -> list[Any]:
        return [
            Recorder("outer", log),
            Recorder("middle", log, counts=True),
            Recorder("inner", log),
        ]

    chain = fold_wrap_only(members(folded))
    assert len(chain) == 1
    assert isinstance(chain[0], FrameworkChain)
    assert chain[0].name == "outer+middle+inner"

    alone_result, alone_calls = await _run(members(apart))
    folded_result, folded_calls = await _run(chain)

    assert folded == apart
    assert apart[:6] == [
        "outer>model",
        "middle>model",
        "inner>model",
        "inner<model",
        "middle<model",
        "outer<model",
    ]
    assert "outer>tool" in apart
    assert folded_calls == alone_calls  # the model saw the same requests
    assert [m.content for m in folded_result["messages"]] == [
        m.content for m in alone_result["messages"]
    ]
    # The middle member's command reached the state through the chain.
    assert folded_result["wrapped_calls"] == alone_result["wrapped_calls"] == 1


def test_node_hooks_and_a_second_state_schema_end_a_run() -> None:
    log: list[str] = []
    a, b = Recorder("a", log), Recorder("b", log, counts=True)
    c, d = Recorder("c", log), Recorder("d", log, counts=True)
    node = AfterModel(log)
    folded = fold_wrap_only([a, b, node, c, d])
    assert [type(m).__name__ for m in folded] == ["FrameworkChain", "AfterModel", "FrameworkChain"]
    assert [getattr(m, "members", None) for m in folded] == [(a, b), None, (c, d)]
    assert fold_wrap_only([b, d]) == [b, d]  # two schemas: nothing to fold
    assert fold_wrap_only([a]) == [a]
    with pytest.raises(ValueError, match="two or more wrap-only"):
        FrameworkChain([a, node])


def test_a_chain_defines_only_the_hooks_its_members_have() -> None:
    class ModelOnly(AgentMiddleware[Any, Any]):
        def __init__(self, name: str) -> None:
            super().__init__()
            self._name = name

        @property
        def name(self) -> str:
            return self._name

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    (chain,) = fold_wrap_only([ModelOnly("x"), ModelOnly("y")])
    cls = type(chain)
    assert cls.awrap_model_call is not AgentMiddleware.awrap_model_call
    # No tool hook: LangChain adds no tool-call layer for the chain.
    assert cls.awrap_tool_call is AgentMiddleware.awrap_tool_call


async def test_the_runtime_builds_agents_with_its_framework_middleware_folded() -> None:
    async def title(room_id: str) -> str:
        return "Room"

    async with await create_test_runtime(plugins=[]) as rt:
        (chain,) = rt.runtime.framework_chain
        assert tuple(chain.members) == tuple(rt.runtime.framework_middleware)
    hooks = MainAgentHooks(get_room_title=title, safety_model=ScriptedChatModel(["SAFE"]))
    async with await create_test_runtime(plugins=[], hooks=hooks) as rt:
        names = [m.name for m in rt.runtime.framework_chain]
    # page-context and safety-guardrail have node hooks and stay on their own.
    reserved = RESERVED_MIDDLEWARE_NAMES
    assert names == ["+".join(reserved[:6]), *reserved[6:8], "+".join(reserved[8:])]
