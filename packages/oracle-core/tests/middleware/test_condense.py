"""``history-condenser``: long threads keep working inside a small context window."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    RuntimeContext,
    plugin_tool,
)
from oracle_core._middleware.condense import SUMMARY_HEADING, reply_reserve
from oracle_core._providers import DEFAULT_CONTEXT_WINDOW, MODEL_CONTEXT_WINDOWS, context_window
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime

WINDOW = 3000
TURNS = 200
FACT = re.compile(r"fact-\d+ is [a-z]+")
FILLER = (
    "Here is some more context about my day, which is long and not very important, "
    "but I like to write a lot when I talk to an assistant about my plans. "
)
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "gorse", "heath")


def user_message(turn: int) -> str:
    fact = (
        f" Please remember: fact-{turn} is {WORDS[turn // 10 % len(WORDS)]}."
        if turn % 10 == 1
        else ""
    )
    return f"Turn {turn}.{fact} {FILLER * 2}"


def summarise(messages: Sequence[BaseMessage], tools: tuple[str, ...]) -> AIMessage:
    """A summarizer that keeps every fact it is shown, the earlier summary's included."""
    del tools
    facts = dict.fromkeys(FACT.findall(str(messages[-1].text)))
    return AIMessage("Facts the user asked to remember: " + "; ".join(facts) + ".")


def answer(messages: Sequence[BaseMessage], tools: tuple[str, ...]) -> AIMessage:
    del tools
    return AIMessage("Noted.")


async def test_a_200_turn_session_stays_inside_a_3000_token_window() -> None:
    main = ScriptedChatModel([answer], on_exhausted="repeat_last", context_window=WINDOW)
    utility = ScriptedChatModel([summarise], on_exhausted="repeat_last")
    async with await create_test_runtime(plugins=[], model=main, models={"utility": utility}) as rt:
        for turn in range(1, TURNS + 1):
            result = await rt.run_turn(user_message(turn))
            assert result.text == "Noted."

    assert len(main.calls) == TURNS
    # Every request fitted the window, with room left for the reply.
    sizes = [call.prompt_tokens for call in main.calls]
    assert all(size is not None and size <= WINDOW - reply_reserve(WINDOW) for size in sizes)
    # Nothing stored is lost: the thread keeps all its messages.
    assert len(result.state["messages"]) == 2 * TURNS
    # The summary lives in the checkpoint and still holds the first turn's fact.
    summary = result.state["history_summary"]
    assert "fact-1 is amber" in summary["text"]
    # The last request started from the summary; every fact of the session reached it.
    last = main.calls[-1]
    assert str(last.conversation[0].text).startswith(SUMMARY_HEADING)
    assert "fact-1 is amber" in str(last.conversation[0].text)
    assert last.conversation[-1].text == user_message(TURNS)
    sent = "\n".join(str(m.text) for m in last.messages)
    told = [m for t in range(1, TURNS + 1) for m in FACT.findall(user_message(t))]
    assert len(told) == TURNS // 10
    assert [fact for fact in told if fact not in sent] == []
    # Condensing is incremental: far fewer summaries than turns.
    assert 0 < len(utility.calls) < TURNS // 4


@pytest.mark.parametrize(
    ("failure", "logged"),
    [(RuntimeError("summarizer down"), "RuntimeError"), ("   ", "ValueError")],
)
async def test_a_failing_summarizer_costs_the_oldest_messages_not_the_turn(
    failure: Exception | str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    main = ScriptedChatModel([answer], on_exhausted="repeat_last", context_window=WINDOW)
    utility = ScriptedChatModel([failure], on_exhausted="repeat_last")
    async with await create_test_runtime(plugins=[], model=main, models={"utility": utility}) as rt:
        for turn in range(1, 41):
            result = await rt.run_turn(user_message(turn))
            assert result.text == "Noted."

    assert utility.calls
    assert all(c.prompt_tokens is not None and c.prompt_tokens <= WINDOW for c in main.calls)
    assert "history_summary" not in result.state
    assert len(result.state["messages"]) == 80
    assert f"history.summary_failed: {logged}" in caplog.text


async def test_a_request_within_the_window_is_sent_unchanged() -> None:
    main = ScriptedChatModel(["Hello."], context_window=WINDOW)
    utility = ScriptedChatModel([])
    async with await create_test_runtime(plugins=[], model=main, models={"utility": utility}) as rt:
        result = await rt.run_turn("hi")

    assert [m.text for m in main.calls[0].conversation] == ["hi"]
    assert "history_summary" not in result.state
    assert utility.calls == []


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1)


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Notes", summary="Takes notes.", when_to_use=["notes"], visibility="always"
    )

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        @plugin_tool(name="echo_note", description="Echo a note.", args_schema=TaskArgs)
        def echo(args: TaskArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return args.note

        return [
            PluginSubAgent(
                name="notes_agent",
                description="Keeps the user's notes.",
                system_prompt="You keep notes.",
                tools=[echo],
                model="subagent",
            )
        ]


async def test_a_sub_agent_thread_condenses_against_its_own_models_window() -> None:
    calls = 60
    main_steps: list[Any] = []
    for index in range(1, calls + 1):
        main_steps += [call_tool("call_notes_agent", {"task": user_message(index)}), "Done."]
    main = ScriptedChatModel(main_steps)
    sub = ScriptedChatModel([answer], on_exhausted="repeat_last", context_window=2048)
    utility = ScriptedChatModel([summarise], on_exhausted="repeat_last")
    async with await create_test_runtime(
        plugins=[NotesPlugin()], model=main, models={"subagent": sub, "utility": utility}
    ) as rt:
        for index in range(1, calls + 1):
            assert (await rt.run_turn(f"note {index}")).text == "Done."

    assert len(sub.calls) == calls
    assert all(c.prompt_tokens is not None and c.prompt_tokens <= 2048 for c in sub.calls)
    assert "fact-1 is amber" in str(sub.calls[-1].conversation[0].text)


def test_the_window_of_a_role() -> None:
    small = ScriptedChatModel([], context_window=4096)
    assert context_window("main", small) == 4096
    assert context_window("main", small, {"main": 8192}) == 8192
    assert context_window("subagent", small, {"main": 8192}) == 4096
    assert context_window("main", ScriptedChatModel([])) == DEFAULT_CONTEXT_WINDOW

    class Named:
        model_name = "moonshotai/kimi-k2-thinking"
        profile = None

    assert context_window("main", Named()) == MODEL_CONTEXT_WINDOWS[Named.model_name]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("main", "role=tokens"),
        ("main=²⁰⁰⁰", "role=tokens"),
        ("main=12", "1024 to"),
        ("mian=8192", "not a role"),
    ],
)
def test_llm_context_windows_is_checked(value: str, problem: str) -> None:
    from oracle_core import CoreEnv, EnvValidationError

    with pytest.raises(EnvValidationError) as caught:
        CoreEnv.from_env({"ORACLE_BACKEND": "local", "LLM_CONTEXT_WINDOWS": value})
    assert "LLM_CONTEXT_WINDOWS" in str(caught.value)
    assert problem in str(caught.value)


def test_llm_context_windows_parses() -> None:
    from oracle_core import CoreEnv

    env = CoreEnv.from_env(
        {"ORACLE_BACKEND": "local", "LLM_CONTEXT_WINDOWS": "main=8192, subagent=4096"}
    )
    assert env.context_windows() == {"main": 8192, "subagent": 4096}


def test_a_message_is_summary_text_only_when_it_says_so() -> None:
    assert not HumanMessage("hi").text.startswith(SUMMARY_HEADING)


def test_a_stored_message_is_measured_again_whenever_what_it_holds_changed() -> None:
    from oracle_core._middleware.condense import HistoryCondenserMiddleware, _byte_bound

    condenser = HistoryCondenserMiddleware(window=WINDOW)
    short = HumanMessage("short", id="m1")
    assert condenser._bytes([short]) == _byte_bound([short])
    tokens = condenser._size(short)
    assert condenser._measures["m1"].tokens == tokens  # counted once, then kept

    # The same id with other content: a new object, or the same list grown in place.
    longer = HumanMessage("a much longer text " * 20, id="m1")
    assert condenser._bytes([longer]) == _byte_bound([longer]) > _byte_bound([short])
    assert condenser._size(longer) > condenser._size(short)
    blocks = HumanMessage([{"type": "text", "text": "one"}], id="m2")
    before = condenser._bytes([blocks])
    blocks.content.append({"type": "text", "text": "two and more words"})  # type: ignore[union-attr]
    assert condenser._bytes([blocks]) == _byte_bound([blocks]) > before

    # A call added to an answer's tool calls in place.
    answer = AIMessage("", id="m3", tool_calls=[{"name": "a", "args": {}, "id": "c1"}])
    before = condenser._bytes([answer])
    answer.tool_calls.append({"name": "b", "args": {"q": "x" * 50}, "id": "c2"})
    assert condenser._bytes([answer]) == _byte_bound([answer]) > before

    # Unstored messages (no id) are measured each time and never kept.
    loose = HumanMessage("no id")
    assert condenser._bytes([loose]) == _byte_bound([loose])
    assert set(condenser._measures) == {"m1", "m2", "m3"}
