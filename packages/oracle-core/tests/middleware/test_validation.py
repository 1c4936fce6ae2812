"""Tests of ``tool-validation`` (CORE-77)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, cast

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, ToolCallRequest
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.prebuilt import InjectedState
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command
from pydantic import BaseModel, Field, ValidationError

from oracle_core._middleware import ToolValidationMiddleware
from oracle_core.testing import ScriptedChatModel, call_tool

RUNS: list[str] = []


class WeatherArgs(BaseModel):
    city: str
    days: int = Field(default=1, ge=1, le=7)


@tool(args_schema=WeatherArgs)
def get_weather(city: str, days: int = 1) -> str:
    """Weather for a city."""
    RUNS.append(f"get_weather:{city}:{days}")
    return f"sunny in {city}"


@tool
def count_words(text: str, runtime: ToolRuntime) -> str:
    """Count words; takes the injected runtime too."""
    RUNS.append(f"count_words:{runtime.tool_call_id}")
    return str(len(text.split()))


@tool
def render_chart(spec: str) -> str:
    """Render a chart (its large output is not worth re-reading)."""
    return "<svg>" + "x" * 100 + "</svg>"


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_invalid_arguments_get_an_error_naming_each_field_and_never_run() -> None:
    model = ScriptedChatModel([call_tool("get_weather", {"days": 0}, id="c1"), "sorry"])
    graph: Any = create_agent(model, [get_weather], middleware=[ToolValidationMiddleware()])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "weather?")]})

    [error] = tool_messages(result["messages"])
    assert error.status == "error"
    assert error.name == "get_weather"
    assert error.tool_call_id == "c1"
    assert "get_weather" in error.text
    assert "city: Field required" in error.text
    assert "days: Input should be greater than or equal to 1" in error.text
    assert "corrected arguments" in error.text
    assert RUNS == []


async def test_valid_arguments_run_the_tool() -> None:
    model = ScriptedChatModel([call_tool("get_weather", {"city": "Oslo"}, id="c1"), "ok"])
    graph: Any = create_agent(model, [get_weather], middleware=[ToolValidationMiddleware()])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "weather?")]})

    [answer] = tool_messages(result["messages"])
    assert answer.status == "success"
    assert RUNS == ["get_weather:Oslo:1"]


async def test_injected_runtime_argument_is_not_required_from_the_model() -> None:
    model = ScriptedChatModel([call_tool("count_words", {"text": "a b c"}, id="c9"), "3"])
    graph: Any = create_agent(model, [count_words], middleware=[ToolValidationMiddleware()])
    RUNS.clear()

    result = await graph.ainvoke({"messages": [("user", "count")]})

    [answer] = tool_messages(result["messages"])
    assert answer.status == "success"
    assert answer.text == "3"
    assert RUNS == ["count_words:c9"]


class NoteArgs(BaseModel):
    text: str
    state: Annotated[dict[str, Any], InjectedState]


def note_tool() -> StructuredTool:
    """A new tool object over one shared schema, as a per-turn tool is built each turn."""

    def note(text: str, state: dict[str, Any]) -> str:
        RUNS.append(f"note:{text}:{len(state['messages'])}")
        return "noted"

    return StructuredTool.from_function(note, description="Keep a note.", args_schema=NoteArgs)


async def test_each_new_tool_object_over_a_shared_schema_gets_its_injected_fields() -> None:
    RUNS.clear()
    for text in ("first", "second"):
        model = ScriptedChatModel([call_tool("note", {"text": text}, id="n1"), "done"])
        graph: Any = create_agent(model, [note_tool()], middleware=[ToolValidationMiddleware()])
        result = await graph.ainvoke({"messages": [("user", "note it")]})
        [answer] = tool_messages(result["messages"])
        assert answer.status == "success"

    model = ScriptedChatModel([call_tool("note", {}, id="n2"), "sorry"])
    graph = create_agent(model, [note_tool()], middleware=[ToolValidationMiddleware()])
    result = await graph.ainvoke({"messages": [("user", "note it")]})
    [error] = tool_messages(result["messages"])
    assert error.status == "error"
    assert "text: Field required" in error.text
    assert "state" not in error.text
    assert RUNS == ["note:first:2", "note:second:2"]


async def test_skipped_tool_messages_leave_the_model_request_but_stay_in_state() -> None:
    model = ScriptedChatModel(
        [
            call_tool("render_chart", {"spec": "bars"}, id="c1"),
            AIMessage(
                content="Here is the chart; now the weather.",
                tool_calls=[
                    {"name": "render_chart", "args": {"spec": "pie"}, "id": "c2"},
                    {"name": "get_weather", "args": {"city": "Oslo"}, "id": "c3"},
                ],
            ),
            "done",
        ]
    )
    graph: Any = create_agent(
        model,
        [get_weather, render_chart],
        middleware=[ToolValidationMiddleware(skip_tool_names=["render_chart"])],
    )

    result = await graph.ainvoke({"messages": [("user", "chart and weather")]})

    last_request = model.calls[-1].messages
    assert [type(m).__name__ for m in last_request] == ["HumanMessage", "AIMessage", "ToolMessage"]
    trimmed = last_request[1]
    assert isinstance(trimmed, AIMessage)
    assert trimmed.content == "Here is the chart; now the weather."
    assert [c["id"] for c in trimmed.tool_calls] == ["c3"]
    assert [m.tool_call_id for m in tool_messages(last_request)] == ["c3"]
    # The thread itself keeps everything.
    assert [m.tool_call_id for m in tool_messages(result["messages"])] == ["c1", "c2", "c3"]
    stored = result["messages"][3]
    assert isinstance(stored, AIMessage)
    assert len(stored.tool_calls) == 2


async def test_skip_trims_raw_provider_tool_calls_and_content_blocks() -> None:
    middleware = ToolValidationMiddleware(skip_tool_names=["render_chart"])
    ai = AIMessage(
        content=[
            {"type": "text", "text": "chart:"},
            {"type": "tool_use", "id": "c1", "name": "render_chart", "input": {}},
        ],
        tool_calls=[{"name": "render_chart", "args": {}, "id": "c1"}],
        additional_kwargs={"tool_calls": [{"id": "c1", "type": "function"}]},
    )
    messages: list[Any] = [
        HumanMessage(content="hi"),
        ai,
        ToolMessage(content="<svg/>", tool_call_id="c1", name="render_chart"),
    ]
    request = ModelRequest(model=ScriptedChatModel(), messages=messages)
    sent: list[ModelRequest[Any]] = []

    def handler(req: ModelRequest[Any]) -> ModelResponse[Any]:
        sent.append(req)
        return ModelResponse(result=[AIMessage(content="ok")])

    middleware.wrap_model_call(request, handler)

    [_, trimmed] = sent[0].messages
    assert isinstance(trimmed, AIMessage)
    assert trimmed.tool_calls == []
    assert trimmed.content == [{"type": "text", "text": "chart:"}]
    assert "tool_calls" not in trimmed.additional_kwargs
    # The original message is untouched.
    assert len(ai.tool_calls) == 1
    assert len(ai.content) == 2


async def test_without_skip_names_the_request_is_passed_as_is() -> None:
    request = ModelRequest(model=ScriptedChatModel(), messages=[HumanMessage(content="hi")])
    sent: list[ModelRequest[Any]] = []

    async def handler(req: ModelRequest[Any]) -> ModelResponse[Any]:
        sent.append(req)
        return ModelResponse(result=[AIMessage(content="ok")])

    await ToolValidationMiddleware().awrap_model_call(request, handler)

    assert sent == [request]


def _request(tool_name: str = "get_weather") -> ToolCallRequest:
    return ToolCallRequest(
        tool_call={"name": tool_name, "args": {"city": "Oslo"}, "id": "c1"},
        tool=None,
        state={"messages": []},
        runtime=cast(Any, None),
    )


def _validation_error() -> ValidationError:
    try:
        WeatherArgs.model_validate({"days": 9})
    except ValidationError as exc:
        return exc
    raise AssertionError("expected a validation error")


async def test_tool_invocation_error_from_the_handler_becomes_an_error_message() -> None:
    async def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        raise ToolInvocationError("get_weather", _validation_error(), {"days": 9})

    reply = await ToolValidationMiddleware().awrap_tool_call(_request(), handler)

    assert isinstance(reply, ToolMessage)
    assert reply.status == "error"
    assert "city: Field required" in reply.text
    assert "days: Input should be less than or equal to 7" in reply.text


def test_validation_error_from_the_sync_handler_becomes_an_error_message() -> None:
    def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        raise _validation_error()

    reply = ToolValidationMiddleware().wrap_tool_call(_request(), handler)

    assert isinstance(reply, ToolMessage)
    assert reply.status == "error"
    assert "city: Field required" in reply.text


async def test_other_handler_errors_propagate() -> None:
    async def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        raise RuntimeError("backend down")

    with pytest.raises(RuntimeError, match="backend down"):
        await ToolValidationMiddleware().awrap_tool_call(_request(), handler)
