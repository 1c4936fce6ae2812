"""Tests of the scripted chat model used by offline agent tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool
from pydantic import BaseModel

from oracle_core.testing._scripted import (
    RecordedCall,
    ScriptedChatModel,
    ScriptExhaustedError,
    ToolNotVisibleError,
    call_tool,
    call_tools,
    reply,
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def forbidden(path: str) -> str:
    """Delete a file; tests hide this tool from the model."""
    return f"deleted {path}"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


class Weather(BaseModel):
    """Look up the weather in a city."""

    city: str


class HideForbidden(AgentMiddleware):
    """Filters `forbidden` out of every model request, like a capability gate."""

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(request.override(tools=_without_forbidden(request.tools)))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(request.override(tools=_without_forbidden(request.tools)))


def _without_forbidden(
    tools: Sequence[BaseTool | dict[str, Any]],
) -> list[BaseTool | dict[str, Any]]:
    return [t for t in tools if not (isinstance(t, BaseTool) and t.name == "forbidden")]


# --- replay -------------------------------------------------------------------------------------


def test_replays_str_message_and_callable_steps_in_order() -> None:
    seen: list[tuple[tuple[BaseMessage, ...], tuple[str, ...]]] = []

    def echo(messages: Sequence[BaseMessage], tool_names: tuple[str, ...]) -> AIMessage:
        seen.append((tuple(messages), tool_names))
        return AIMessage(content=f"echo: {messages[-1].text}")

    model = ScriptedChatModel(["first", AIMessage(content="second"), echo])

    assert model.invoke("a").content == "first"
    assert model.invoke("b").content == "second"
    assert model.invoke("c").content == "echo: c"
    assert len(seen) == 1
    assert [m.text for m in seen[0][0]] == ["c"]
    assert seen[0][1] == ()


def test_callable_step_sees_the_tools_bound_for_that_call() -> None:
    def pick_tool(messages: Sequence[BaseMessage], tool_names: tuple[str, ...]) -> AIMessage:
        return call_tool(tool_names[-1], {"a": 2, "b": 3})

    bound = ScriptedChatModel([pick_tool]).bind_tools([add, multiply])

    result = bound.invoke("go")

    assert result.tool_calls == [
        {"name": "multiply", "args": {"a": 2, "b": 3}, "id": "call_1", "type": "tool_call"}
    ]


def test_callable_step_returning_something_else_is_a_type_error() -> None:
    def wrong(messages: Sequence[BaseMessage], tool_names: tuple[str, ...]) -> AIMessage:
        return "not a message"  # type: ignore[return-value]

    model = ScriptedChatModel([wrong])

    with pytest.raises(TypeError, match="must return an AIMessage, got str"):
        model.invoke("x")


def test_exception_step_is_raised_from_its_call_and_the_call_is_recorded() -> None:
    timeout = TimeoutError("provider timed out")
    model = ScriptedChatModel([timeout, "recovered"])

    with pytest.raises(TimeoutError) as excinfo:
        model.invoke("first try")
    answer = model.invoke("second try")

    assert excinfo.value is timeout
    assert answer.content == "recovered"
    assert [[m.text for m in c.messages] for c in model.calls] == [["first try"], ["second try"]]
    assert model.remaining == 0


async def test_exception_step_is_raised_from_ainvoke_and_astream_too() -> None:
    model = ScriptedChatModel([ConnectionError("reset"), ConnectionError("again"), "ok"])
    bound = model.bind_tools([add])

    with pytest.raises(ConnectionError, match="reset"):
        await bound.ainvoke("x")
    with pytest.raises(ConnectionError, match="again"):
        _ = [chunk async for chunk in bound.astream("y")]

    assert (await bound.ainvoke("z")).content == "ok"
    assert [c.tool_names for c in model.calls] == [("add",), ("add",), ("add",)]


def test_unsupported_step_and_exhaustion_mode_are_rejected_up_front() -> None:
    with pytest.raises(TypeError, match="step 1 of the script is a int"):
        ScriptedChatModel(["ok", 42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="on_exhausted must be"):
        ScriptedChatModel(["ok"], on_exhausted="loop")  # type: ignore[arg-type]


def test_message_steps_are_copied_so_replays_share_no_state() -> None:
    scripted = call_tool("add", {"a": 1, "b": 1})
    model = ScriptedChatModel([scripted], on_exhausted="repeat_last")

    first = model.invoke("x")
    first.tool_calls[0]["args"]["a"] = 99
    second = model.invoke("y")

    assert scripted.tool_calls[0]["id"] is None
    assert scripted.tool_calls[0]["args"] == {"a": 1, "b": 1}
    assert first is not second
    assert second.tool_calls[0]["args"] == {"a": 1, "b": 1}
    assert [first.tool_calls[0]["id"], second.tool_calls[0]["id"]] == ["call_1", "call_2"]


def test_helpers_build_the_expected_messages() -> None:
    assert reply("hello") == AIMessage(content="hello")
    assert call_tool("add").tool_calls == [
        {"name": "add", "args": {}, "id": None, "type": "tool_call"}
    ]
    several = call_tools([("add", {"a": 1}), ("multiply", {"b": 2}, "mine")])
    assert several.content == ""
    assert [(c["name"], c["args"], c["id"]) for c in several.tool_calls] == [
        ("add", {"a": 1}, None),
        ("multiply", {"b": 2}, "mine"),
    ]


# --- tool-call ids ------------------------------------------------------------------------------


def test_missing_ids_are_numbered_per_model_in_emission_order() -> None:
    script = [
        call_tools([("add", {}), ("add", {}, "explicit"), ("multiply", {})]),
        call_tool("add", id="kept"),
        call_tool("multiply"),
    ]
    model = ScriptedChatModel(script)
    other = ScriptedChatModel([call_tool("add")])

    first = model.invoke("x")
    second = model.bind_tools([add]).invoke("y")
    third = model.invoke("z")

    assert [c["id"] for c in first.tool_calls] == ["call_1", "explicit", "call_2"]
    assert [c["id"] for c in second.tool_calls] == ["kept"]
    assert [c["id"] for c in third.tool_calls] == ["call_3"]
    assert other.invoke("x").tool_calls[0]["id"] == "call_1"


# --- exhaustion ---------------------------------------------------------------------------------


def test_exhaustion_error_says_how_many_steps_and_shows_last_messages() -> None:
    model = ScriptedChatModel(["one", "two"])
    model.invoke("a")
    model.invoke("b")

    history = [
        SystemMessage("be brief"),
        HumanMessage("what is " + "very " * 40 + "long"),
        AIMessage(content="", tool_calls=[{"name": "add", "args": {}, "id": "t1"}]),
        ToolMessage("3", tool_call_id="t1"),
    ]
    with pytest.raises(ScriptExhaustedError) as excinfo:
        model.invoke(history)

    text = str(excinfo.value)
    assert "it had 2 steps and this is call #3" in text
    assert "be brief" not in text  # only the last three messages are shown
    assert "[human] 'what is very" in text
    assert "…" in text
    assert "[ai] '' tool_calls: add" in text
    assert "[tool] '3'" in text
    assert isinstance(excinfo.value, AssertionError)
    assert len(model.calls) == 3


def test_empty_script_raises_on_first_call() -> None:
    model = ScriptedChatModel()

    with pytest.raises(ScriptExhaustedError, match=r"had 0 steps and this is call #1"):
        model.invoke("hi")
    with pytest.raises(ScriptExhaustedError, match=r"Last messages:\n  \(none\)"):
        model.invoke([])


def test_repeat_last_replays_the_final_step_forever() -> None:
    model = ScriptedChatModel(["first", "again"], on_exhausted="repeat_last")

    texts = [model.invoke(str(i)).content for i in range(4)]

    assert texts == ["first", "again", "again", "again"]
    assert model.remaining == 0


def test_repeat_last_with_nothing_to_repeat_raises() -> None:
    model = ScriptedChatModel([], on_exhausted="repeat_last")

    with pytest.raises(ScriptExhaustedError, match="had 0 steps"):
        model.invoke("hi")


def test_fallback_message_is_returned_after_the_script_with_fresh_ids() -> None:
    fallback = call_tool("add", {"a": 0, "b": 0})
    model = ScriptedChatModel(["scripted"], on_exhausted=fallback)

    replies = [model.invoke(str(i)) for i in range(3)]

    assert replies[0].content == "scripted"
    assert [r.tool_calls[0]["id"] for r in replies[1:]] == ["call_1", "call_2"]
    assert fallback.tool_calls[0]["id"] is None


def test_remaining_counts_down_across_bound_copies() -> None:
    model = ScriptedChatModel(["a", "b", "c"])
    bound = model.bind_tools([add])

    assert model.remaining == 3
    model.invoke("x")
    bound.invoke("y")

    assert model.remaining == 1
    assert bound.remaining == 1
    assert bound.invoke("z").content == "c"
    assert model.remaining == 0


# --- binding and recording ----------------------------------------------------------------------


def test_bind_tools_records_names_of_every_tool_form_and_leaves_original_unbound() -> None:
    model = ScriptedChatModel(["bound", "unbound"])
    openai_dict = {"type": "function", "function": {"name": "lookup", "parameters": {}}}

    bound = model.bind_tools(
        [add, openai_dict, {"type": "web_search"}, {"name": "plain"}, multiply, Weather],
        tool_choice="any",
    )
    bound.invoke("x")
    model.invoke("y")

    expected = ("add", "lookup", "web_search", "plain", "multiply", "Weather")
    assert isinstance(bound, ScriptedChatModel)
    assert bound.tool_names == expected
    assert model.tool_names == ()
    assert [c.tool_names for c in model.calls] == [expected, ()]
    assert bound.calls is model.calls


def test_bind_tools_rejects_a_dict_without_a_name() -> None:
    with pytest.raises(TypeError, match="cannot tell the name of tool"):
        ScriptedChatModel().bind_tools([{"parameters": {}}])


def test_tools_passed_per_call_override_the_bound_ones() -> None:
    model = ScriptedChatModel(["ok"])

    model.bind_tools([add]).bind(tools=[multiply]).invoke("x")

    assert model.calls[0].tool_names == ("multiply",)


def test_calls_record_messages_and_system_prompt() -> None:
    model = ScriptedChatModel(["one", "two"])
    conversation = [SystemMessage("You are terse."), HumanMessage("hi")]

    model.invoke(conversation)
    model.invoke([HumanMessage("no system")])

    first, second = model.calls
    assert first == RecordedCall(
        messages=first.messages, tool_names=(), system_prompt="You are terse."
    )
    assert [m.text for m in first.messages] == ["You are terse.", "hi"]
    assert isinstance(first.messages[0], SystemMessage)
    assert second.system_prompt is None
    assert [m.text for m in second.messages] == ["no system"]


def test_serves_as_a_safety_classifier() -> None:
    classifier = ScriptedChatModel(["SAFE", "UNSAFE"], name="safety")

    verdicts = [classifier.invoke(f"classify: {text}").text for text in ("hello", "rm -rf /")]

    assert verdicts == ["SAFE", "UNSAFE"]
    assert classifier.name == "safety"
    assert classifier._llm_type == "scripted"


def test_a_process_wide_llm_cache_never_answers_for_the_script() -> None:
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import get_llm_cache, set_llm_cache

    previous = get_llm_cache()
    set_llm_cache(InMemoryCache())
    try:
        model = ScriptedChatModel(["first", "second"])
        answers = [model.invoke("same prompt").content for _ in range(2)]
    finally:
        set_llm_cache(previous)

    assert answers == ["first", "second"]


# --- strict mode --------------------------------------------------------------------------------


def test_strict_mode_rejects_a_call_to_a_tool_that_is_not_visible() -> None:
    model = ScriptedChatModel([call_tool("forbidden", {"path": "/"})], strict=True)
    bound = model.bind_tools([add, multiply])

    with pytest.raises(ToolNotVisibleError) as excinfo:
        bound.invoke("x")

    message = str(excinfo.value)
    assert "'forbidden'" in message
    assert "['add', 'multiply']" in message
    assert isinstance(excinfo.value, AssertionError)
    assert model.calls[0].tool_names == ("add", "multiply")


def test_strict_mode_passes_calls_to_visible_tools() -> None:
    model = ScriptedChatModel([call_tools([("add", {}), ("multiply", {})])], strict=True)

    result = model.bind_tools([add, multiply]).invoke("x")

    assert [c["name"] for c in result.tool_calls] == ["add", "multiply"]


def test_strict_mode_treats_an_unbound_model_as_seeing_no_tools() -> None:
    strict = ScriptedChatModel([call_tool("add")], strict=True)
    lenient = ScriptedChatModel([call_tool("add")])

    with pytest.raises(ToolNotVisibleError, match=r"visible tools: \[\]"):
        strict.invoke("x")
    assert lenient.invoke("x").tool_calls[0]["name"] == "add"


# --- streaming and async ------------------------------------------------------------------------


def test_stream_yields_one_chunk_whose_tool_call_chunks_aggregate() -> None:
    model = ScriptedChatModel([call_tools([("add", {"a": 1, "b": 2}), ("multiply", {"a": 3})])])

    chunks = list(model.bind_tools([add, multiply]).stream("x"))

    assert len(chunks) == 1
    (chunk,) = chunks
    assert isinstance(chunk, AIMessageChunk)
    assert [(c["name"], c["args"], c["id"], c["index"]) for c in chunk.tool_call_chunks] == [
        ("add", '{"a": 1, "b": 2}', "call_1", 0),
        ("multiply", '{"a": 3}', "call_2", 1),
    ]
    assert chunk.tool_calls == [
        {"name": "add", "args": {"a": 1, "b": 2}, "id": "call_1", "type": "tool_call"},
        {"name": "multiply", "args": {"a": 3}, "id": "call_2", "type": "tool_call"},
    ]
    assert model.remaining == 0
    assert len(model.calls) == 1


def test_stream_of_a_plain_reply_carries_the_text() -> None:
    model = ScriptedChatModel(["streamed text"])

    chunks = list(model.stream("x"))

    assert [c.content for c in chunks] == ["streamed text"]
    assert chunks[0].tool_call_chunks == []


def test_protocol_event_stream_carries_the_tool_call() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 4, "b": 5})])

    stream = model.stream_events("x", version="v3")
    events = [event["event"] for event in stream]

    assert events[0] == "message-start"
    assert events[-1] == "message-finish"
    assert stream.output.tool_calls == [
        {"name": "add", "args": {"a": 4, "b": 5}, "id": "call_1", "type": "tool_call"}
    ]
    assert model.remaining == 0


async def test_astream_yields_one_chunk_with_the_tool_calls() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 5, "b": 6})])

    chunks = [chunk async for chunk in model.bind_tools([add]).astream("x")]

    assert len(chunks) == 1
    assert chunks[0].tool_calls[0]["args"] == {"a": 5, "b": 6}
    assert chunks[0].tool_call_chunks[0]["id"] == "call_1"


async def test_ainvoke_replays_and_records() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 1, "b": 2}), "three"])
    bound = model.bind_tools([add])

    first = await bound.ainvoke("x")
    second = await model.ainvoke([SystemMessage("sys"), HumanMessage("y")])

    assert first.tool_calls[0]["id"] == "call_1"
    assert second.content == "three"
    assert [(c.tool_names, c.system_prompt) for c in model.calls] == [
        (("add",), None),
        ((), "sys"),
    ]


# --- with langchain.agents.create_agent ---------------------------------------------------------


async def test_drives_create_agent_through_a_tool_call_to_a_final_answer() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 2, "b": 40}), reply("The sum is 42.")])
    agent = create_agent(model, tools=[add], system_prompt="You add numbers.")

    result = await agent.ainvoke({"messages": [HumanMessage("2 + 40?")]})

    messages = result["messages"]
    assert messages[-1].text == "The sum is 42."
    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [(m.content, m.tool_call_id) for m in tool_results] == [("42", "call_1")]
    assert [c.tool_names for c in model.calls] == [("add",), ("add",)]
    assert [c.system_prompt for c in model.calls] == ["You add numbers.", "You add numbers."]
    assert [type(m).__name__ for m in model.calls[1].messages] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert model.remaining == 0


async def test_records_the_tools_a_middleware_left_visible() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 1, "b": 1}), "2"])
    agent = create_agent(model, tools=[add, forbidden], middleware=[HideForbidden()])

    result = await agent.ainvoke({"messages": [HumanMessage("1 + 1?")]})

    assert result["messages"][-1].text == "2"
    assert [c.tool_names for c in model.calls] == [("add",), ("add",)]


def test_records_the_filtered_tools_on_the_sync_path_too() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 1, "b": 1}), "2"])
    unfiltered = ScriptedChatModel([call_tool("add", {"a": 1, "b": 1}), "2"])

    create_agent(model, tools=[add, forbidden], middleware=[HideForbidden()]).invoke(
        {"messages": [HumanMessage("1 + 1?")]}
    )
    create_agent(unfiltered, tools=[add, forbidden]).invoke({"messages": [HumanMessage("1 + 1?")]})

    assert model.calls[1].tool_names == ("add",)
    assert unfiltered.calls[1].tool_names == ("add", "forbidden")


async def test_strict_model_proves_the_middleware_hid_the_tool() -> None:
    model = ScriptedChatModel([call_tool("forbidden", {"path": "/etc"})], strict=True)
    agent = create_agent(model, tools=[add, forbidden], middleware=[HideForbidden()])

    with pytest.raises(ToolNotVisibleError, match=r"'forbidden'.*visible tools: \['add'\]"):
        await agent.ainvoke({"messages": [HumanMessage("delete /etc")]})


async def test_strict_model_allows_the_tool_when_no_gate_hides_it() -> None:
    model = ScriptedChatModel([call_tool("forbidden", {"path": "/tmp/x"}), "done"], strict=True)
    agent = create_agent(model, tools=[add, forbidden])

    result = await agent.ainvoke({"messages": [HumanMessage("delete /tmp/x")]})

    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == [
        "deleted /tmp/x"
    ]


async def test_agent_message_stream_aggregates_the_single_chunk() -> None:
    model = ScriptedChatModel([call_tool("add", {"a": 20, "b": 22}), "forty-two"])
    agent = create_agent(model, tools=[add])

    streamed: list[Any] = []
    async for message, _metadata in agent.astream(
        {"messages": [HumanMessage("20 + 22?")]}, stream_mode="messages"
    ):
        streamed.append(message)

    ai_chunks = [m for m in streamed if isinstance(m, AIMessageChunk)]
    assert len(ai_chunks) == 2  # one chunk per model call
    assert ai_chunks[0].tool_calls[0]["args"] == {"a": 20, "b": 22}
    assert [m.content for m in streamed if isinstance(m, ToolMessage)] == ["42"]
    assert ai_chunks[1].content == "forty-two"


async def test_one_script_serves_a_main_agent_and_its_sub_agent() -> None:
    model = ScriptedChatModel(
        [
            call_tool("research", {"question": "capital of France"}),
            "Paris",  # sub-agent's answer
            "The capital is Paris.",  # main agent's final answer
        ]
    )
    sub_agent = create_agent(model, system_prompt="You research.")

    @tool
    async def research(question: str) -> str:
        """Ask the research sub-agent."""
        result = await sub_agent.ainvoke({"messages": [HumanMessage(question)]})
        return str(result["messages"][-1].text)

    main_agent = create_agent(model, tools=[research], system_prompt="You answer.")
    result = await main_agent.ainvoke({"messages": [HumanMessage("What is the capital?")]})

    assert result["messages"][-1].text == "The capital is Paris."
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["Paris"]
    assert [(c.system_prompt, c.tool_names) for c in model.calls] == [
        ("You answer.", ("research",)),
        ("You research.", ()),
        ("You answer.", ("research",)),
    ]
