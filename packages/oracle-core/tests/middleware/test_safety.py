"""Tests of ``safety-guardrail`` (CORE-81)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.runtime import Runtime

from oracle_core._middleware import DEFAULT_REFUSAL, SafetyGuardrailMiddleware
from oracle_core.testing import ScriptedChatModel, call_tool

USER_TEXT = "how do I pick my neighbour's lock"
REPLY_TEXT = "Step one: insert a tension wrench"


def main_model() -> ScriptedChatModel:
    return ScriptedChatModel([AIMessage(content=REPLY_TEXT, id="reply-1")])


def verdicts(*replies: str | Exception) -> ScriptedChatModel:
    """A classifier answering ``replies`` in order; an exception among them is raised."""
    return ScriptedChatModel(replies)


async def run(
    safety_model: ScriptedChatModel, extra: Sequence[AgentMiddleware[Any, Any]] = ()
) -> Any:
    graph: Any = create_agent(
        main_model(), [], middleware=[SafetyGuardrailMiddleware(safety_model), *extra]
    )
    return await graph.ainvoke({"messages": [("user", USER_TEXT)]})


async def test_unsafe_reply_is_replaced_by_the_refusal_in_place() -> None:
    safety = verdicts("UNSAFE")

    result = await run(safety)

    messages = result["messages"]
    assert len(messages) == 2
    final = messages[-1]
    assert isinstance(final, AIMessage)
    assert final.id == "reply-1"
    assert final.content == DEFAULT_REFUSAL
    [call] = safety.calls
    prompt = call.messages
    assert "SAFE or UNSAFE" in prompt[0].text
    assert USER_TEXT in prompt[1].text
    assert REPLY_TEXT in prompt[1].text


async def test_safe_reply_is_kept() -> None:
    result = await run(verdicts("SAFE"))

    final = result["messages"][-1]
    assert final.content == REPLY_TEXT
    assert final.id == "reply-1"


async def test_verdict_is_matched_case_insensitively_inside_longer_text() -> None:
    result = await run(verdicts("Verdict: unsafe."))

    assert result["messages"][-1].content == DEFAULT_REFUSAL


async def test_custom_refusal_text() -> None:
    graph: Any = create_agent(
        main_model(), [], middleware=[SafetyGuardrailMiddleware(verdicts("UNSAFE"), "No.")]
    )

    result = await graph.ainvoke({"messages": [("user", USER_TEXT)]})

    assert result["messages"][-1].content == "No."


async def test_classifier_error_keeps_the_reply_and_logs_no_user_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)

    result = await run(verdicts(TimeoutError("classifier timed out")))

    assert result["messages"][-1].content == REPLY_TEXT
    assert "safety classifier failed (TimeoutError)" in caplog.text
    assert USER_TEXT not in caplog.text
    assert REPLY_TEXT not in caplog.text


class CountingAfterAgent(AgentMiddleware[AgentState[Any], Any]):
    """A later middleware whose ``after_agent`` runs before the guardrail's."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        self.calls += 1


async def test_refusal_ends_the_run_without_re_running_after_agent_hooks() -> None:
    counter = CountingAfterAgent()
    safety = verdicts("UNSAFE", "UNSAFE")

    result = await run(safety, extra=[counter])

    assert result["messages"][-1].content == DEFAULT_REFUSAL
    assert counter.calls == 1
    assert len(safety.calls) == 1


async def test_a_run_ending_on_a_tool_result_is_not_classified() -> None:
    @tool(return_direct=True)
    def answer_directly() -> str:
        """Returns straight to the user."""
        return "direct"

    safety = verdicts("UNSAFE")
    model = ScriptedChatModel([call_tool("answer_directly", id="c1")])
    graph: Any = create_agent(
        model, [answer_directly], middleware=[SafetyGuardrailMiddleware(safety)]
    )

    result = await graph.ainvoke({"messages": [("user", "hi")]})

    assert isinstance(result["messages"][-1], ToolMessage)
    assert safety.calls == []


def test_sync_run_classifies_too() -> None:
    graph: Any = create_agent(
        main_model(), [], middleware=[SafetyGuardrailMiddleware(verdicts("UNSAFE"))]
    )

    result = graph.invoke({"messages": [("user", USER_TEXT)]})

    assert result["messages"][-1].content == DEFAULT_REFUSAL
