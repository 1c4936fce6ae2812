"""`OpenAIDouble`: raw protocol shape, script behaviour, LangChain and the runtime against it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict

import oracle_core
from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginTool,
    RuntimeContext,
    SessionInfo,
    TurnRequest,
    UserInfo,
    plugin_tool,
)
from oracle_server.testing import ChatRequest, OpenAIDouble, Step, ToolCalls

CHAT = "/chat/completions"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """A client the test closes, so no pooled connection outlives the test."""
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def chat_model(double: OpenAIDouble, http: httpx.AsyncClient, **params: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=double.base_url,
        api_key="x",
        model="double-model",
        http_async_client=http,
        max_retries=0,
        **params,
    )


def body(*, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "double-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello?"},
        ],
        "stream": stream,
        **extra,
    }


async def read_frames(http: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> list[str]:
    """The raw SSE frames of a streamed answer, each without its trailing blank line."""
    async with http.stream("POST", url, json=payload) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join([chunk async for chunk in response.aiter_text()])
    assert text.endswith("\n\n")
    return text[:-2].split("\n\n")


def chunks_of(frames: list[str]) -> list[dict[str, Any]]:
    assert frames[-1] == "data: [DONE]"
    assert all(f.startswith("data: ") and "\n" not in f for f in frames)
    return [json.loads(f.removeprefix("data: ")) for f in frames[:-1]]


# -- lifecycle -------------------------------------------------------------------------------


async def test_base_url_and_env_point_at_the_running_server() -> None:
    double = OpenAIDouble()
    with pytest.raises(RuntimeError, match="not started"):
        _ = double.base_url

    async with double:
        assert double.base_url.startswith("http://127.0.0.1:")
        assert double.base_url.endswith("/v1")
        assert double.env("local-model") == {
            "LLM_PROVIDER": "openai-compatible",
            "OPENAI_COMPATIBLE_BASE_URL": double.base_url,
            "OPENAI_COMPATIBLE_MODEL": "local-model",
        }
        with pytest.raises(RuntimeError, match="already started"):
            await double.start()

    with pytest.raises(RuntimeError, match="not started"):
        _ = double.base_url
    await double.stop()  # stopping twice is harmless


async def test_each_double_has_a_base_url_of_its_own(http: httpx.AsyncClient) -> None:
    """Even on a port an earlier double had: model clients are kept per base URL."""
    async with OpenAIDouble() as first, OpenAIDouble(["hi"]) as second:
        port = first.base_url.split("/")[2]
        plain = await http.get(f"http://{port}/v1/models")
        prefixed = await http.get(first.base_url + "/models")
        other = await http.post(second.base_url + CHAT, json=body())
        urls = first.base_url, second.base_url

    assert urls[0] != urls[1]
    assert urls[0].split("/", 3)[3] != "v1"
    assert plain.status_code == prefixed.status_code == 200
    assert plain.json() == prefixed.json()
    assert other.status_code == 200
    assert len(second.requests) == 1


async def test_a_stopped_double_refuses_connections(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble() as double:
        url = double.base_url + "/models"
        assert (await http.get(url)).status_code == 200

    with pytest.raises(httpx.ConnectError):
        await http.get(url)


async def test_models_lists_the_configured_models(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(models=["m-1"]) as double:
        double.env("m-2")
        response = await http.get(double.base_url + "/models")

    assert response.status_code == 200
    listing = response.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["m-1", "m-2"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in listing["data"])


# -- the chat-completions protocol -----------------------------------------------------------


async def test_json_answer_has_openai_shape(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["Hi there."]) as double:
        response = await http.post(double.base_url + CHAT, json=body())

    assert response.status_code == 200
    completion = response.json()
    assert completion["id"].startswith("chatcmpl-")
    assert completion["object"] == "chat.completion"
    assert isinstance(completion["created"], int)
    assert completion["model"] == "double-model"
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hi there.",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    usage = completion["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0


async def test_json_tool_calls_have_generated_ids_and_null_content(
    http: httpx.AsyncClient,
) -> None:
    script: list[Step] = [
        ToolCalls([("get_weather", {"city": "Paris"}), ("get_time", {})]),
        ToolCalls([("get_weather", {"city": "Rome"})], text="Checking."),
    ]
    async with OpenAIDouble(script) as double:
        first = (await http.post(double.base_url + CHAT, json=body())).json()
        second = (await http.post(double.base_url + CHAT, json=body())).json()

    message = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    assert second["choices"][0]["message"]["content"] == "Checking."
    assert [c["id"] for c in second["choices"][0]["message"]["tool_calls"]] == ["call_3"]


async def test_streamed_text_arrives_in_chunk_size_deltas(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["Hello, streaming world"], chunk_size=5) as double:
        frames = await read_frames(http, double.base_url + CHAT, body(stream=True))

    chunks = chunks_of(frames)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert all("usage" not in c for c in chunks)  # not asked for
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert [d["content"] for d in deltas[1:-1]] == ["Hello", ", str", "eamin", "g wor", "ld"]
    assert deltas[-1] == {}
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 6 + ["stop"]


async def test_include_usage_adds_a_final_usage_chunk(http: httpx.AsyncClient) -> None:
    payload = body(stream=True, stream_options={"include_usage": True})
    async with OpenAIDouble(["Short."]) as double:
        chunks = chunks_of(await read_frames(http, double.base_url + CHAT, payload))

    *content, last = chunks
    assert all(c["usage"] is None for c in content)
    assert last["choices"] == []
    assert last["usage"]["total_tokens"] > 0


async def test_streamed_tool_calls_follow_openai(http: httpx.AsyncClient) -> None:
    calls = ToolCalls([("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})])
    async with OpenAIDouble([calls], chunk_size=4) as double:
        chunks = chunks_of(await read_frames(http, double.base_url + CHAT, body(stream=True)))

    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ],
    }
    arguments: dict[int, str] = {0: "", 1: ""}
    headers = []
    for delta in deltas[1:-1]:
        (call,) = delta["tool_calls"]
        if "id" in call:
            headers.append((call["index"], call["id"], call["function"]))
        else:
            assert set(call) == {"index", "function"}
            assert len(call["function"]["arguments"]) <= 4
            arguments[call["index"]] += call["function"]["arguments"]
    assert headers == [(1, "call_2", {"name": "get_time", "arguments": ""})]
    assert json.loads(arguments[0]) == {"city": "Paris"}
    assert json.loads(arguments[1]) == {"tz": "UTC"}
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }


async def test_streamed_text_comes_before_tool_calls(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble([ToolCalls([("noop", {})], text="One moment.")]) as double:
        chunks = chunks_of(await read_frames(http, double.base_url + CHAT, body(stream=True)))

    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "One moment."
    first_call = next(i for i, d in enumerate(deltas) if "tool_calls" in d)
    assert all("content" not in d for d in deltas[first_call:])
    assert "role" not in deltas[first_call]


async def test_bad_request_bodies_get_openai_errors(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["unused"]) as double:
        not_json = await http.post(double.base_url + CHAT, content=b"{nope")
        no_messages = await http.post(double.base_url + CHAT, json={"model": "m"})

    assert not_json.status_code == 400
    assert not_json.json()["error"]["code"] == "invalid_json"
    assert no_messages.status_code == 400
    assert no_messages.json()["error"]["type"] == "invalid_request_error"
    assert double.requests == []
    assert double.remaining_steps == 1


# -- the script -----------------------------------------------------------------------------


async def test_exhausted_script_answers_500_and_records_it(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["only one"]) as double:
        model = chat_model(double, http)
        assert (await model.ainvoke("first")).text == "only one"
        with pytest.raises(openai.InternalServerError, match="no step left for request #2"):
            await model.ainvoke("second")
        raw = await http.post(double.base_url + CHAT, json=body())

    assert raw.status_code == 500
    error = raw.json()["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "script_exhausted"
    assert error["param"] is None
    assert len(double.requests) == 3
    assert double.requests[1].last_user_text == "second"
    assert len(double.errors) == 2
    assert "no step left for request #2" in double.errors[0]


async def test_repeat_last_replays_the_last_step(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["a", "b"], on_exhausted="repeat_last") as double:
        replies = [(await http.post(double.base_url + CHAT, json=body())).json() for _ in range(4)]

    assert [r["choices"][0]["message"]["content"] for r in replies] == ["a", "b", "b", "b"]
    assert double.errors == []


async def test_repeat_last_without_any_step_is_an_error(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(on_exhausted="repeat_last") as double:
        response = await http.post(double.base_url + CHAT, json=body())

    assert response.status_code == 500
    assert len(double.errors) == 1


async def test_steps_can_be_added_while_running(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble() as double:
        double.add_steps("late", ToolCalls([("t", {})]))
        first = (await http.post(double.base_url + CHAT, json=body())).json()
        second = (await http.post(double.base_url + CHAT, json=body())).json()

    assert first["choices"][0]["message"]["content"] == "late"
    assert second["choices"][0]["finish_reason"] == "tool_calls"
    assert double.remaining_steps == 0


async def test_callable_steps_see_the_request(http: httpx.AsyncClient) -> None:
    seen: list[ChatRequest] = []

    def echo(request: ChatRequest) -> str:
        seen.append(request)
        return f"you said {request.last_user_text}"

    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    payload = body(tools=tools)
    payload["messages"].append(
        {
            "role": "user",
            "content": [{"type": "text", "text": "part "}, {"type": "text", "text": "two"}],
        }
    )
    async with OpenAIDouble([echo]) as double:
        response = await http.post(double.base_url + CHAT, json=payload, headers={"X-Trace": "t-1"})

    assert response.json()["choices"][0]["message"]["content"] == "you said part two"
    assert seen == double.requests
    request = seen[0]
    assert request.model == "double-model"
    assert request.system_prompt == "Be brief."
    assert request.tool_names == ["lookup"]
    assert request.stream is False
    assert request.headers["x-trace"] == "t-1"
    assert request.body == payload


def test_request_helpers_without_system_or_user_messages() -> None:
    request = ChatRequest(
        model="m",
        messages=[{"role": "assistant", "content": None}],
        tools=[],
        stream=False,
        headers={},
        body={},
    )

    assert request.system_prompt is None
    assert request.last_user_text is None
    assert request.tool_names == []


async def test_auto_reply_answers_once_the_script_is_empty(http: httpx.AsyncClient) -> None:
    def auto(request: ChatRequest) -> Step:
        if "lookup" in request.tool_names:
            return ToolCalls([("lookup", {"q": request.last_user_text})])
        return lambda r: f"echo: {r.last_user_text}"

    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    async with OpenAIDouble(["scripted"], auto_reply=auto) as double:
        replies = [
            (await http.post(double.base_url + CHAT, json=payload)).json()
            for payload in (body(), body(), body(tools=tools))
        ]

    messages = [r["choices"][0]["message"] for r in replies]
    assert messages[0]["content"] == "scripted"
    assert messages[1]["content"] == "echo: Hello?"
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q": "Hello?"}',
    }


async def test_a_failing_step_answers_500(http: httpx.AsyncClient) -> None:
    def broken(request: ChatRequest) -> str:
        raise LookupError("no such city")

    not_a_step: Any = 42
    async with OpenAIDouble([broken, not_a_step]) as double:
        raised = await http.post(double.base_url + CHAT, json=body())
        wrong_type = await http.post(double.base_url + CHAT, json=body())

    assert raised.status_code == 500
    assert raised.json()["error"]["code"] == "step_failed"
    assert "no such city" in raised.json()["error"]["message"]
    assert wrong_type.status_code == 500
    assert "str or ToolCalls" in wrong_type.json()["error"]["message"]
    assert len(double.errors) == 2


def test_chunk_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        OpenAIDouble(chunk_size=0)


async def test_a_client_that_goes_away_aborts_the_stream(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["x" * 40], chunk_size=1, delay_between_chunks=0.05) as double:
        async with http.stream("POST", double.base_url + CHAT, json=body(stream=True)) as resp:
            async for first in resp.aiter_text():
                assert first.startswith("data: ")
                break
        for _ in range(200):
            if double.aborted_streams:
                break
            await asyncio.sleep(0.01)

        assert double.aborted_streams == 1
        assert len(double.requests) == 1


async def test_stop_cuts_an_open_stream_after_the_graceful_timeout(
    http: httpx.AsyncClient,
) -> None:
    loop = asyncio.get_running_loop()
    double = OpenAIDouble(
        ["x" * 100], chunk_size=1, delay_between_chunks=0.05, graceful_timeout=0.2
    )
    await double.start()
    async with http.stream("POST", double.base_url + CHAT, json=body(stream=True)) as resp:
        received = resp.aiter_text()
        assert (await anext(received)).startswith("data: ")
        started = loop.time()
        await double.stop()
        elapsed = loop.time() - started
        with pytest.raises(httpx.RemoteProtocolError):
            async for _ in received:
                pass

    assert 0.2 <= elapsed < 2
    assert double.aborted_streams == 1


async def test_delay_spaces_the_frames(http: httpx.AsyncClient) -> None:
    loop = asyncio.get_running_loop()
    async with OpenAIDouble(["abcd"], chunk_size=1, delay_between_chunks=0.05) as double:
        started = loop.time()
        frames = await read_frames(http, double.base_url + CHAT, body(stream=True))
        elapsed = loop.time() - started

    # role, four deltas, finish, [DONE]: six pauses between seven frames
    assert len(frames) == 7
    assert elapsed >= 6 * 0.05
    assert double.aborted_streams == 0


# -- LangChain's ChatOpenAI -------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_chat_openai_ainvoke(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["Bonjour !"]) as double:
        model = chat_model(double, http)
        message = await model.ainvoke([SystemMessage("Speak French."), HumanMessage("Hi")])

    assert isinstance(message, AIMessage)
    assert message.text == "Bonjour !"
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata is not None
    assert message.usage_metadata["total_tokens"] > 0
    (request,) = double.requests
    assert request.system_prompt == "Speak French."
    assert request.last_user_text == "Hi"
    assert request.headers["authorization"] == "Bearer x"


async def test_chat_openai_astream(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["A streamed answer, in pieces."], chunk_size=6) as double:
        model = chat_model(double, http, stream_usage=True)
        chunks = [chunk async for chunk in model.astream("stream please")]

    text_chunks = [c for c in chunks if c.text]
    assert len(text_chunks) == 5
    aggregate = chunks[0]
    for chunk in chunks[1:]:
        aggregate = aggregate + chunk
    assert isinstance(aggregate, AIMessageChunk)
    assert aggregate.text == "A streamed answer, in pieces."
    assert aggregate.usage_metadata is not None
    assert aggregate.usage_metadata["output_tokens"] > 0
    (request,) = double.requests
    assert request.stream is True
    assert request.body["stream_options"] == {"include_usage": True}


async def test_chat_openai_tool_calls(http: httpx.AsyncClient) -> None:
    script: list[Step] = [ToolCalls([("get_weather", {"city": "Paris"})])]
    async with OpenAIDouble(script) as double:
        model = chat_model(double, http).bind_tools([get_weather])
        message = await model.ainvoke("weather in Paris?")

    assert isinstance(message, AIMessage)
    assert message.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    ]
    assert double.requests[0].tool_names == ["get_weather"]
    assert double.requests[0].tools[0]["function"]["parameters"]["required"] == ["city"]


async def test_chat_openai_streamed_tool_calls_aggregate(http: httpx.AsyncClient) -> None:
    calls = ToolCalls(
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "São Paulo"})],
        text="Looking both up.",
    )
    async with OpenAIDouble([calls], chunk_size=3) as double:
        model = chat_model(double, http, stream_usage=True).bind_tools([get_weather])
        chunks = [chunk async for chunk in model.astream("two cities")]

    message_chunks = [c for c in chunks if isinstance(c, AIMessageChunk)]
    assert len(message_chunks) == len(chunks) > 1
    aggregate = message_chunks[0]
    for chunk in message_chunks[1:]:
        aggregate = aggregate + chunk
    assert aggregate.text == "Looking both up."
    assert [(c["id"], c["args"]) for c in aggregate.tool_calls] == [
        ("call_1", {"city": "Paris"}),
        ("call_2", {"city": "São Paulo"}),
    ]
    assert aggregate.response_metadata["finish_reason"] == "tool_calls"
    assert aggregate.usage_metadata is not None


async def test_the_core_provider_factory_talks_to_the_double(http: httpx.AsyncClient) -> None:
    async with OpenAIDouble(["from the provider", "streamed from the provider"]) as double:
        env = oracle_core.CoreEnv.model_validate(double.env("served-model"))
        model = oracle_core.get_provider_chat_model("main", env=env, http_async_client=http)
        message = await model.ainvoke("hello")
        chunks = [c async for c in model.astream("hello again")]

    assert message.text == "from the provider"
    assert "".join(c.text for c in chunks) == "streamed from the provider"
    assert [r.model for r in double.requests] == ["served-model", "served-model"]
    # No key configured: the provider sends its placeholder, and always asks for usage.
    assert double.requests[0].headers["authorization"] == "Bearer not-needed"
    assert double.requests[1].body["stream_options"] == {"include_usage": True}
    assert sum(c.usage_metadata is not None for c in chunks) == 1


# -- the whole runtime ------------------------------------------------------------------------


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str


class ForecastPlugin(OraclePlugin):
    name = "forecast"
    version = "1.0.0"
    manifest = {
        "title": "Forecast",
        "summary": "Weather forecasts for a city.",
        "when_to_use": ["The user asks about the weather"],
        "visibility": "always",
    }

    def __init__(self) -> None:
        self.cities: list[str] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_forecast", description="Forecast for a city.", args_schema=CityArgs)
        async def get_forecast(args: CityArgs, rt_ctx: RuntimeContext[Any]) -> str:
            self.cities.append(args.city)
            return f"Sunny, 21 °C in {args.city}"

        return [get_forecast]


async def test_a_runtime_turn_runs_against_the_double(tmp_path: Path) -> None:
    plugin = ForecastPlugin()
    script: list[Step] = [
        ToolCalls([("get_forecast", {"city": "Lisbon"})]),
        "It is sunny in Lisbon.",
    ]
    async with OpenAIDouble(script) as double:
        env = {
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            **double.env(),
        }
        runtime = await oracle_core.create_runtime(
            {"name": "Double Oracle"}, plugins=[plugin], env=env, discover_entry_points=False
        )
        async with runtime:
            state = await runtime.run_turn(
                TurnRequest(
                    user=UserInfo(did="did:key:z6MkDoubleUser"),
                    session=SessionInfo(id="thread-1"),
                    message="What is the weather in Lisbon?",
                )
            )

    assert state["messages"][-1].text == "It is sunny in Lisbon."
    assert plugin.cities == ["Lisbon"]
    assert len(double.requests) == 2
    first, second = double.requests
    assert "get_forecast" in first.tool_names
    assert first.system_prompt
    assert first.last_user_text == "What is the weather in Lisbon?"
    tool_results = [m for m in second.messages if m["role"] == "tool"]
    assert tool_results == [
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 °C in Lisbon"}
    ]
    assistant = next(m for m in second.messages if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["id"] == "call_1"
