"""Tests of ``oracle_core._providers``: role maps, provider check, model factory, accessor."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from oracle_core import (
    AmbientServices,
    InMemoryBlobStore,
    LocalSecretsService,
    PermissiveUcanService,
    RecordingEventSink,
    UnavailableMatrixService,
    create_runtime,
)
from oracle_core._chat_openai import PassthroughChatOpenAI
from oracle_core._config import CoreEnv
from oracle_core._errors import OracleBootError, UnknownModelRoleError
from oracle_core._langgraph_compat import SUPPORTED_RANGES
from oracle_core._providers import (
    _CLIENT_DEFAULTS,
    NEBIUS_MODELS,
    OPENROUTER_MAIN_FALLBACKS,
    OPENROUTER_MODELS,
    PROVIDERS,
    ProviderLLM,
    check_provider,
    get_provider_chat_model,
    keepalive_socket_options,
)
from oracle_core._services import LLMAccessor
from oracle_core._tools import MODEL_ROLES

ALL_ROLES = ("main", "subagent", "utility", "vision", "guard", "routing", "session-title")


def make_env(**variables: str) -> CoreEnv:
    """A ``CoreEnv`` from env var names, as boot would build it."""
    return CoreEnv.model_validate({"ORACLE_BACKEND": "local", **variables})


def openrouter_env() -> CoreEnv:
    return make_env(LLM_PROVIDER="openrouter", OPEN_ROUTER_API_KEY="or-key")


def nebius_env() -> CoreEnv:
    return make_env(LLM_PROVIDER="nebius", NEBIUS_API_KEY="nb-key")


def compatible_env(base_url: str = "http://127.0.0.1:9/v1", **extra: str) -> CoreEnv:
    return make_env(
        LLM_PROVIDER="openai-compatible",
        OPENAI_COMPATIBLE_BASE_URL=base_url,
        OPENAI_COMPATIBLE_MODEL="qwen3:14b",
        **extra,
    )


def as_chat_openai(model: BaseChatModel) -> ChatOpenAI:
    assert isinstance(model, ChatOpenAI)
    return model


def api_key_of(model: BaseChatModel) -> str:
    key = as_chat_openai(model).openai_api_key
    assert key is not None
    assert not callable(key)
    return key.get_secret_value()


# --- a local server speaking the OpenAI chat-completions protocol ---------------------


@dataclass
class ScriptedReply:
    """What the server answers next: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RecordedRequest:
    path: str
    authorization: str | None
    body: dict[str, Any]
    raw: bytes


@dataclass
class ChatServer:
    url: str
    requests: list[RecordedRequest]
    replies: list[ScriptedReply]


class _ChatCompletionsHandler(BaseHTTPRequestHandler):
    server: _ChatHTTPServer
    # HTTP/1.0: each response ends with the connection, which also delimits an SSE stream.
    protocol_version = "HTTP/1.0"
    _usage: ClassVar[dict[str, int]] = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        body = json.loads(raw)
        self.server.requests.append(
            RecordedRequest(self.path, self.headers.get("Authorization"), body, raw)
        )
        if self.path != "/v1/chat/completions":
            self._send(404, "application/json", b'{"error": {"message": "not found"}}')
            return
        reply = self.server.replies.pop(0) if self.server.replies else ScriptedReply("ok")
        if body.get("stream"):
            self._stream(body, reply)
        else:
            self._complete(body, reply)

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _complete(self, body: dict[str, Any], reply: ScriptedReply) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
                }
                for call in reply.tool_calls
            ]
        response = {
            "id": "chatcmpl-local-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": self._usage,
        }
        self._send(200, "application/json", json.dumps(response).encode())

    def _stream(self, body: dict[str, Any], reply: ScriptedReply) -> None:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-local-1",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        events = [chunk({"role": "assistant", "content": ""})]
        text = reply.content or ""
        # Split into several deltas, as real servers do.
        events += [chunk({"content": text[i : i + 4]}) for i in range(0, len(text), 4)]
        for index, call in enumerate(reply.tool_calls):
            arguments = json.dumps(call["args"])
            half = len(arguments) // 2
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["name"], "arguments": arguments[:half]},
                            }
                        ]
                    }
                )
            )
            events.append(
                chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
                )
            )
        events.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk({}), "choices": [], "usage": self._usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _ChatHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[RecordedRequest]
    replies: list[ScriptedReply]


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """An OpenAI chat-completions server on 127.0.0.1, run in a thread for one test."""
    server = _ChatHTTPServer(("127.0.0.1", 0), _ChatCompletionsHandler)
    server.requests = []
    server.replies = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield ChatServer(f"http://{host!s}:{port}/v1", server.requests, server.replies)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- role maps -------------------------------------------------------------------------


def test_providers_are_the_three_documented_ones() -> None:
    assert PROVIDERS == ("openrouter", "nebius", "openai-compatible")


def test_known_roles_are_the_stable_set() -> None:
    assert tuple(MODEL_ROLES) == ALL_ROLES


@pytest.mark.parametrize("models", [OPENROUTER_MODELS, NEBIUS_MODELS], ids=["openrouter", "nebius"])
def test_built_in_maps_cover_exactly_the_known_roles(models: Mapping[str, str]) -> None:
    assert set(models) == set(MODEL_ROLES)
    assert all(model_id.strip() and "/" in model_id for model_id in models.values())


def test_built_in_maps_are_read_only() -> None:
    with pytest.raises(TypeError):
        OPENROUTER_MODELS["main"] = "x/y"  # type: ignore[index]
    with pytest.raises(TypeError):
        NEBIUS_MODELS["main"] = "x/y"  # type: ignore[index]


def test_openrouter_fallbacks_differ_from_the_main_model() -> None:
    assert OPENROUTER_MAIN_FALLBACKS
    assert OPENROUTER_MODELS["main"] not in OPENROUTER_MAIN_FALLBACKS


def test_guard_roles_use_guard_models() -> None:
    assert "guard" in OPENROUTER_MODELS["guard"].lower()
    assert "guard" in NEBIUS_MODELS["guard"].lower()


# --- get_provider_chat_model: openrouter -----------------------------------------------


@pytest.mark.parametrize("role", ALL_ROLES)
def test_openrouter_maps_every_role(role: str) -> None:
    model = as_chat_openai(get_provider_chat_model(role, env=openrouter_env()))
    assert model.model_name == OPENROUTER_MODELS[role]
    assert model.openai_api_base == "https://openrouter.ai/api/v1"
    assert api_key_of(model) == "or-key"


def test_openrouter_main_adds_fallbacks_and_latency_routing() -> None:
    model = as_chat_openai(get_provider_chat_model("main", env=openrouter_env()))
    assert model.extra_body == {
        "models": list(OPENROUTER_MAIN_FALLBACKS),
        "provider": {"sort": "latency"},
    }


@pytest.mark.parametrize("role", [r for r in ALL_ROLES if r != "main"])
def test_openrouter_other_roles_send_no_extras(role: str) -> None:
    model = as_chat_openai(get_provider_chat_model(role, env=openrouter_env()))
    assert model.extra_body is None


def test_extra_body_param_merges_over_openrouter_extras() -> None:
    model = as_chat_openai(
        get_provider_chat_model(
            "main", env=openrouter_env(), extra_body={"provider": {"sort": "price"}, "x": 1}
        )
    )
    assert model.extra_body == {
        "models": list(OPENROUTER_MAIN_FALLBACKS),
        "provider": {"sort": "price"},
        "x": 1,
    }


def test_extra_body_none_drops_openrouter_extras() -> None:
    model = as_chat_openai(get_provider_chat_model("main", env=openrouter_env(), extra_body=None))
    assert model.extra_body is None


# --- get_provider_chat_model: nebius ---------------------------------------------------


@pytest.mark.parametrize("role", ALL_ROLES)
def test_nebius_maps_every_role(role: str) -> None:
    model = as_chat_openai(get_provider_chat_model(role, env=nebius_env()))
    assert model.model_name == NEBIUS_MODELS[role]
    assert model.openai_api_base == "https://api.tokenfactory.nebius.com/v1/"
    assert api_key_of(model) == "nb-key"
    assert model.extra_body is None


def test_nebius_guard_runs_at_temperature_zero() -> None:
    guard = as_chat_openai(get_provider_chat_model("guard", env=nebius_env()))
    main = as_chat_openai(get_provider_chat_model("main", env=nebius_env()))
    assert guard.temperature == 0.0
    assert main.temperature is None


def test_params_override_nebius_guard_temperature() -> None:
    guard = as_chat_openai(get_provider_chat_model("guard", env=nebius_env(), temperature=0.3))
    assert guard.temperature == 0.3


# --- get_provider_chat_model: openai-compatible ----------------------------------------


@pytest.mark.parametrize("role", ALL_ROLES)
def test_openai_compatible_maps_every_role_to_the_default_model(role: str) -> None:
    model = as_chat_openai(get_provider_chat_model(role, env=compatible_env()))
    assert model.model_name == "qwen3:14b"
    assert model.openai_api_base == "http://127.0.0.1:9/v1"
    assert model.extra_body is None
    assert model.temperature is None


def test_openai_compatible_role_overrides() -> None:
    env = compatible_env(OPENAI_COMPATIBLE_ROLE_MODELS="subagent=qwen3:8b, guard=llama-guard3")
    names = {
        role: as_chat_openai(get_provider_chat_model(role, env=env)).model_name
        for role in ALL_ROLES
    }
    assert names == {
        "main": "qwen3:14b",
        "subagent": "qwen3:8b",
        "utility": "qwen3:14b",
        "vision": "qwen3:14b",
        "guard": "llama-guard3",
        "routing": "qwen3:14b",
        "session-title": "qwen3:14b",
    }


def test_openai_compatible_sends_a_placeholder_key_when_unset() -> None:
    model = get_provider_chat_model("main", env=compatible_env())
    assert api_key_of(model) == "not-needed"


def test_openai_compatible_sends_the_configured_key() -> None:
    model = get_provider_chat_model("main", env=compatible_env(OPENAI_COMPATIBLE_API_KEY="sk-1"))
    assert api_key_of(model) == "sk-1"


# --- defaults and overrides ------------------------------------------------------------


@pytest.mark.parametrize("env", [openrouter_env(), nebius_env(), compatible_env()])
def test_client_defaults(env: CoreEnv) -> None:
    model = as_chat_openai(get_provider_chat_model("utility", env=env))
    assert model.request_timeout == 120.0
    assert model.max_retries == 2
    assert model.stream_usage is True
    assert model.use_responses_api is False


def test_params_override_defaults() -> None:
    model = as_chat_openai(
        get_provider_chat_model(
            "main",
            env=openrouter_env(),
            model="anthropic/claude-sonnet-4.5",
            temperature=0.2,
            timeout=5,
            max_retries=0,
            stream_usage=False,
        )
    )
    assert model.model_name == "anthropic/claude-sonnet-4.5"
    assert model.temperature == 0.2
    assert model.request_timeout == 5
    assert model.max_retries == 0
    assert model.stream_usage is False
    # Fallbacks belong to the role, not to the model id, so they stay.
    assert model.extra_body is not None
    assert model.extra_body["models"] == list(OPENROUTER_MAIN_FALLBACKS)


def test_a_codex_named_local_model_stays_on_chat_completions() -> None:
    env = compatible_env(OPENAI_COMPATIBLE_ROLE_MODELS="subagent=qwen2.5-codex:7b")
    model = as_chat_openai(get_provider_chat_model("subagent", env=env))
    assert model.use_responses_api is False


def test_no_openai_api_key_in_the_process_env_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for env in (openrouter_env(), nebius_env(), compatible_env()):
        model = as_chat_openai(get_provider_chat_model("main", env=env))
        assert model.client is not None
        assert model.async_client is not None


def test_building_models_contacts_nothing_and_loads_no_tokenizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tiktoken

    attempts: list[str] = []

    def refuse_connect(self: socket.socket, address: Any) -> None:
        attempts.append(f"connect {address!r}")
        raise OSError("network disabled in this test")

    def refuse_encoding(*args: Any, **kwargs: Any) -> Any:
        attempts.append("tiktoken")
        raise OSError("tokenizer download disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse_connect)
    monkeypatch.setattr(tiktoken, "get_encoding", refuse_encoding)
    monkeypatch.setattr(tiktoken, "encoding_for_model", refuse_encoding)
    built = [
        get_provider_chat_model(role, env=env)
        for env in (openrouter_env(), nebius_env(), compatible_env())
        for role in ALL_ROLES
    ]
    assert len(built) == 3 * len(ALL_ROLES)
    assert attempts == []


def test_importing_the_module_does_not_import_langchain_openai() -> None:
    code = (
        "import sys, oracle_core._providers; "
        "print('langchain_openai' in sys.modules, 'openai' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["False", "False"]


# --- unknown roles ---------------------------------------------------------------------


@pytest.mark.parametrize("env", [openrouter_env(), nebius_env(), compatible_env()])
def test_unknown_role_names_the_role_and_the_known_roles(env: CoreEnv) -> None:
    with pytest.raises(UnknownModelRoleError) as info:
        get_provider_chat_model("embedding", env=env)
    assert info.value.code == "llm.unknown_role"
    assert "'embedding'" in str(info.value)
    for role in ALL_ROLES:
        assert role in str(info.value)


def test_role_overrides_do_not_create_roles() -> None:
    env = compatible_env(OPENAI_COMPATIBLE_ROLE_MODELS="embedding=nomic-embed-text")
    with pytest.raises(UnknownModelRoleError):
        get_provider_chat_model("embedding", env=env)


# --- check_provider --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"LLM_PROVIDER": "openrouter"}, ["OPEN_ROUTER_API_KEY"]),
        ({}, ["OPEN_ROUTER_API_KEY"]),
        ({"LLM_PROVIDER": "nebius", "OPEN_ROUTER_API_KEY": "or-key"}, ["NEBIUS_API_KEY"]),
        (
            {"LLM_PROVIDER": "openai-compatible"},
            ["OPENAI_COMPATIBLE_BASE_URL", "OPENAI_COMPATIBLE_MODEL"],
        ),
        (
            {"LLM_PROVIDER": "openai-compatible", "OPENAI_COMPATIBLE_MODEL": "m"},
            ["OPENAI_COMPATIBLE_BASE_URL"],
        ),
        (
            {
                "LLM_PROVIDER": "openai-compatible",
                "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:11434/v1",
            },
            ["OPENAI_COMPATIBLE_MODEL"],
        ),
    ],
)
def test_check_provider_names_the_missing_variables(
    variables: dict[str, str], named: list[str]
) -> None:
    env = make_env(**variables)
    with pytest.raises(OracleBootError) as info:
        check_provider(env)
    assert info.value.code == "boot.llm.key_missing"
    for var in named:
        assert var in info.value.message
    unnamed = {
        "OPEN_ROUTER_API_KEY",
        "NEBIUS_API_KEY",
        "OPENAI_COMPATIBLE_BASE_URL",
        "OPENAI_COMPATIBLE_MODEL",
    } - set(named)
    for var in unnamed:
        assert var not in info.value.message
    assert info.value.hint


def test_check_provider_treats_blank_values_as_missing() -> None:
    env = make_env(LLM_PROVIDER="nebius", NEBIUS_API_KEY="   ")
    with pytest.raises(OracleBootError, match="NEBIUS_API_KEY"):
        check_provider(env)


@pytest.mark.parametrize("env", [openrouter_env(), nebius_env(), compatible_env()])
def test_check_provider_accepts_a_configured_provider(env: CoreEnv) -> None:
    check_provider(env)  # raises OracleBootError when a variable is missing


def test_missing_key_never_falls_back_to_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-be-used")
    with pytest.raises(OracleBootError) as info:
        get_provider_chat_model("main", env=make_env(LLM_PROVIDER="openrouter"))
    assert info.value.code == "boot.llm.key_missing"


# --- ProviderLLM -----------------------------------------------------------------------


def test_provider_llm_is_an_llm_accessor() -> None:
    accessor: LLMAccessor = ProviderLLM(nebius_env())
    model = as_chat_openai(accessor.get("vision"))
    assert model.model_name == NEBIUS_MODELS["vision"]


def test_provider_llm_caches_per_role_and_params() -> None:
    llm = ProviderLLM(openrouter_env())
    main = llm.get("main")
    assert llm.get("main") is main
    assert llm.get("utility") is not main
    warm = llm.get("main", temperature=0.7)
    assert warm is not main
    assert llm.get("main", temperature=0.7) is warm
    assert as_chat_openai(warm).temperature == 0.7


def test_provider_llm_caches_nested_params_by_value_and_type() -> None:
    llm = ProviderLLM(openrouter_env())
    first = llm.get("routing", extra_body={"tags": ["a"], "opts": {"k": 1}})
    assert llm.get("routing", extra_body={"opts": {"k": 1}, "tags": ["a"]}) is first
    assert llm.get("routing", extra_body={"tags": ("a",), "opts": {"k": 1}}) is not first


def test_provider_llm_does_not_cache_unhashable_params() -> None:
    llm = ProviderLLM(openrouter_env())
    first = llm.get("utility", metadata={"buffer": bytearray(b"x")})
    second = llm.get("utility", metadata={"buffer": bytearray(b"x")})
    assert first is not second
    metadata = as_chat_openai(first).metadata
    assert metadata is not None
    assert metadata["buffer"] == bytearray(b"x")


def test_provider_llm_cache_is_bounded() -> None:
    llm = ProviderLLM(openrouter_env())
    oldest = llm.get("utility", temperature=0.0)
    newest = [llm.get("utility", temperature=(i + 1) / 1000) for i in range(128)]
    assert llm.get("utility", temperature=128 / 1000) is newest[-1]
    assert llm.get("utility", temperature=0.0) is not oldest


def test_provider_llm_recently_used_entries_survive_eviction() -> None:
    llm = ProviderLLM(openrouter_env())
    kept = llm.get("utility", temperature=0.0)
    for i in range(127):
        llm.get("utility", temperature=(i + 1) / 1000)
    assert llm.get("utility", temperature=0.0) is kept  # refreshes it
    llm.get("utility", temperature=0.999)  # evicts temperature=0.001, not 0.0
    assert llm.get("utility", temperature=0.0) is kept


def test_provider_llm_threads_share_one_instance() -> None:
    llm = ProviderLLM(nebius_env())
    barrier = threading.Barrier(8)
    results: list[BaseChatModel] = []

    def fetch() -> None:
        barrier.wait()
        results.append(llm.get("session-title", temperature=0.1))

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 8
    assert len({id(model) for model in results}) == 1
    assert llm.get("session-title", temperature=0.1) is results[0]


def test_provider_llm_raises_for_unknown_roles_and_missing_keys() -> None:
    with pytest.raises(UnknownModelRoleError):
        ProviderLLM(openrouter_env()).get("planner")
    with pytest.raises(OracleBootError, match="NEBIUS_API_KEY"):
        ProviderLLM(make_env(LLM_PROVIDER="nebius")).get("main")


# --- end to end against a local chat-completions server -------------------------------


async def test_openai_compatible_model_talks_to_the_local_server(chat_server: ChatServer) -> None:
    chat_server.replies.append(ScriptedReply("Hello from the local server."))
    model = get_provider_chat_model("main", env=compatible_env(chat_server.url))

    reply = await model.ainvoke([HumanMessage("hi")])

    assert isinstance(reply, AIMessage)
    assert reply.content == "Hello from the local server."
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["total_tokens"] == 10
    [request] = chat_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.authorization == "Bearer not-needed"
    assert request.body["model"] == "qwen3:14b"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert "models" not in request.body
    assert "provider" not in request.body


async def test_streaming_reads_sse_chunks_and_usage(chat_server: ChatServer) -> None:
    chat_server.replies.append(ScriptedReply("Streaming works end to end."))
    model = get_provider_chat_model("main", env=compatible_env(chat_server.url))

    chunks = [chunk async for chunk in model.astream("hi")]

    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    assert "".join(str(chunk.content) for chunk in chunks) == "Streaming works end to end."
    assert len([c for c in chunks if c.content]) > 1
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    assert len(usage) == 1
    assert usage[0] is not None
    assert (usage[0]["input_tokens"], usage[0]["output_tokens"], usage[0]["total_tokens"]) == (
        7,
        3,
        10,
    )
    [request] = chat_server.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}


async def test_tool_calls_are_parsed(chat_server: ChatServer) -> None:
    chat_server.replies.append(
        ScriptedReply(
            tool_calls=[{"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}]
        )
    )

    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"sunny in {city}"

    model = get_provider_chat_model("subagent", env=compatible_env(chat_server.url))
    reply = await model.bind_tools([get_weather]).ainvoke("weather in Oslo?")

    assert isinstance(reply, AIMessage)
    assert reply.tool_calls == [
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_1", "type": "tool_call"}
    ]
    [request] = chat_server.requests
    [tool] = request.body["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["parameters"]["properties"] == {"city": {"type": "string"}}


async def test_streamed_tool_calls_are_assembled(chat_server: ChatServer) -> None:
    chat_server.replies.append(
        ScriptedReply(
            tool_calls=[
                {"id": "call_a", "name": "add", "args": {"a": 2, "b": 40}},
                {"id": "call_b", "name": "add", "args": {"a": 1, "b": 1}},
            ]
        )
    )

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = get_provider_chat_model("main", env=compatible_env(chat_server.url))
    merged: AIMessageChunk | None = None
    async for chunk in model.bind_tools([add]).astream("2 + 40 and 1 + 1?"):
        assert isinstance(chunk, AIMessageChunk)
        merged = chunk if merged is None else merged + chunk

    assert merged is not None
    assert [(c["name"], c["args"], c["id"]) for c in merged.tool_calls] == [
        ("add", {"a": 2, "b": 40}, "call_a"),
        ("add", {"a": 1, "b": 1}, "call_b"),
    ]


async def test_role_override_and_api_key_reach_the_server(chat_server: ChatServer) -> None:
    env = compatible_env(
        chat_server.url,
        OPENAI_COMPATIBLE_ROLE_MODELS="guard=llama-guard3",
        OPENAI_COMPATIBLE_API_KEY="sk-local",
    )
    chat_server.replies.append(ScriptedReply("safe"))
    llm = ProviderLLM(env)
    try:
        reply = await llm.get("guard").ainvoke("is this safe?")
    finally:
        await llm.aclose()

    assert reply.content == "safe"
    [request] = chat_server.requests
    assert request.body["model"] == "llama-guard3"
    assert request.authorization == "Bearer sk-local"


async def test_openrouter_main_extras_go_on_the_wire(chat_server: ChatServer) -> None:
    # base_url points the OpenRouter-shaped request at the local server.
    model = get_provider_chat_model("main", env=openrouter_env(), base_url=chat_server.url)
    reply = await model.ainvoke("hi")

    assert reply.content == "ok"
    [request] = chat_server.requests
    assert request.authorization == "Bearer or-key"
    assert request.body["model"] == OPENROUTER_MODELS["main"]
    assert request.body["models"] == list(OPENROUTER_MAIN_FALLBACKS)
    assert request.body["provider"] == {"sort": "latency"}


async def test_nebius_guard_sends_temperature_zero(chat_server: ChatServer) -> None:
    model = get_provider_chat_model("guard", env=nebius_env(), base_url=chat_server.url)
    await model.ainvoke("classify")

    [request] = chat_server.requests
    assert request.authorization == "Bearer nb-key"
    assert request.body["model"] == NEBIUS_MODELS["guard"]
    assert request.body["temperature"] == 0.0


def test_sync_invoke_works_too(chat_server: ChatServer) -> None:
    chat_server.replies.append(ScriptedReply("sync reply"))
    model = get_provider_chat_model("utility", env=compatible_env(chat_server.url))

    assert model.invoke("hi").content == "sync reply"
    assert chat_server.requests[0].body["model"] == "qwen3:14b"


# --- PassthroughChatOpenAI: the same requests without the SDK's transform --------------

TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

CONVERSATIONS: dict[str, list[BaseMessage]] = {
    "plain text": [SystemMessage("You are terse."), HumanMessage("Hi there, ünïcödé 👋")],
    "tool calls and results": [
        SystemMessage("You are terse."),
        HumanMessage("Weather in Oslo and Bergen?"),
        AIMessage(
            "Checking both.",
            tool_calls=[
                {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_1"},
                {"name": "get_weather", "args": {"city": "Bergen"}, "id": "call_2"},
            ],
        ),
        ToolMessage("sunny, 21 °C", tool_call_id="call_1", name="get_weather"),
        ToolMessage("rain", tool_call_id="call_2", name="get_weather", status="error"),
        AIMessage("Oslo is sunny; Bergen failed."),
        HumanMessage("Thanks."),
    ],
    "images and files": [
        HumanMessage(
            [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
                },
                {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
                {"type": "image", "url": "https://example.org/cat.png"},
                {
                    "type": "file",
                    "base64": "JVBERi0xLjQ=",
                    "mime_type": "application/pdf",
                    "filename": "report.pdf",
                },
                {"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"},
            ]
        )
    ],
}


def plain_and_passthrough(url: str, **params: Any) -> tuple[ChatOpenAI, PassthroughChatOpenAI]:
    """``ChatOpenAI`` and ``PassthroughChatOpenAI`` built with the same arguments."""
    kwargs = {**_CLIENT_DEFAULTS, "base_url": url, "api_key": "k", "model": "m", **params}
    return ChatOpenAI(**kwargs), PassthroughChatOpenAI(**kwargs)


async def reply_of(model: Runnable[Any, Any], messages: list[BaseMessage], stream: bool) -> Any:
    if not stream:
        return await model.ainvoke(messages)
    merged: AIMessageChunk | None = None
    async for chunk in model.astream(messages):
        merged = chunk if merged is None else merged + chunk
    return merged


def test_provider_models_are_passthrough_chat_openai() -> None:
    for env in (openrouter_env(), nebius_env(), compatible_env()):
        assert isinstance(get_provider_chat_model("main", env=env), PassthroughChatOpenAI)


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
async def test_passthrough_sends_the_same_bytes(
    chat_server: ChatServer, conversation: str, stream: bool
) -> None:
    messages = CONVERSATIONS[conversation]
    tool_call = {"id": "call_9", "name": "get_weather", "args": {"city": "Tromsø"}}
    chat_server.replies.extend([ScriptedReply("Done.", [tool_call])] * 2)
    plain, passthrough = plain_and_passthrough(chat_server.url)

    replies = [
        await reply_of(model.bind_tools([TOOL_SCHEMA]), messages, stream)
        for model in (plain, passthrough)
    ]

    sent, passed = chat_server.requests
    assert passed.raw == sent.raw
    assert passed.body["messages"]
    assert [tool["function"]["name"] for tool in passed.body["tools"]] == ["get_weather"]
    assert passed.body["stream"] is stream
    if stream:
        assert passed.body["stream_options"] == {"include_usage": True}
    first, second = replies
    assert second.content == first.content == "Done."
    assert second.tool_calls == first.tool_calls
    assert [c["args"] for c in second.tool_calls] == [{"city": "Tromsø"}]
    assert second.usage_metadata is not None
    assert second.usage_metadata == first.usage_metadata
    assert second.usage_metadata["total_tokens"] == 10


async def test_passthrough_streams_the_chunks_the_plain_model_streams(
    chat_server: ChatServer,
) -> None:
    tool_call = {"id": "call_9", "name": "get_weather", "args": {"city": "Tromsø"}}
    chat_server.replies.extend([ScriptedReply("Looking it up.", [tool_call])] * 2)
    plain, passthrough = plain_and_passthrough(chat_server.url)

    def seen(chunk: BaseMessage) -> tuple[Any, ...]:
        assert isinstance(chunk, AIMessageChunk)
        return (
            chunk.content,
            chunk.tool_call_chunks,
            chunk.response_metadata,
            chunk.usage_metadata,
            chunk.additional_kwargs,
        )

    streams = [
        [seen(c) async for c in model.bind_tools([TOOL_SCHEMA]).astream("weather?")]
        for model in (plain, passthrough)
    ]

    assert len(streams[0]) > 2
    assert streams[1] == streams[0]


async def test_passthrough_stream_raises_the_sdks_error_for_a_bad_status(
    chat_server: ChatServer,
) -> None:
    # The double answers 404 outside /v1/chat/completions.
    plain, passthrough = plain_and_passthrough(chat_server.url.removesuffix("/v1") + "/nope")
    for model in (plain, passthrough):
        with pytest.raises(openai.NotFoundError):
            _ = [chunk async for chunk in model.astream("hi")]


async def test_passthrough_keeps_request_extras_and_their_order(chat_server: ChatServer) -> None:
    extras = {"models": list(OPENROUTER_MAIN_FALLBACKS), "provider": {"sort": "latency"}}
    plain, passthrough = plain_and_passthrough(
        chat_server.url, extra_body=extras, temperature=0.2, max_tokens=50
    )
    for model in (plain, passthrough):
        await model.ainvoke(CONVERSATIONS["plain text"], stop=["END"])

    sent, passed = chat_server.requests
    assert passed.raw == sent.raw
    assert list(passed.body) == list(sent.body)
    assert passed.body["models"] == list(OPENROUTER_MAIN_FALLBACKS)
    assert passed.body["stop"] == ["END"]


def test_passthrough_moves_messages_and_tools_past_the_transform() -> None:
    _, passthrough = plain_and_passthrough("http://127.0.0.1:9/v1", extra_body={"ttl": 300})

    payload = passthrough._get_request_payload(
        CONVERSATIONS["plain text"], tools=[TOOL_SCHEMA], tool_choice="auto"
    )

    assert payload["messages"] == []
    assert payload["tools"] == []
    assert payload["tool_choice"] == "auto"
    assert payload["extra_body"]["tools"] == [TOOL_SCHEMA]
    assert [m["role"] for m in payload["extra_body"]["messages"]] == ["system", "user"]
    assert payload["extra_body"]["ttl"] == 300
    assert passthrough.extra_body == {"ttl": 300}


class Forecast(BaseModel):
    city: str
    sky: str


async def test_structured_output_keeps_the_sdk_parse_path(chat_server: ChatServer) -> None:
    chat_server.replies.extend([ScriptedReply('{"city": "Oslo", "sky": "clear"}')] * 2)
    plain, passthrough = plain_and_passthrough(chat_server.url)

    results = [
        await model.with_structured_output(Forecast, method="json_schema").ainvoke("Oslo?")
        for model in (plain, passthrough)
    ]

    assert results == [Forecast(city="Oslo", sky="clear")] * 2
    sent, passed = chat_server.requests
    assert passed.raw == sent.raw
    assert passed.body["response_format"]["type"] == "json_schema"


def test_passthrough_leaves_the_responses_api_alone() -> None:
    _, passthrough = plain_and_passthrough("http://127.0.0.1:9/v1", use_responses_api=True)

    payload = passthrough._get_request_payload(CONVERSATIONS["plain text"], tools=[TOOL_SCHEMA])

    assert "messages" not in payload
    assert payload["input"]
    assert payload["tools"]
    assert "extra_body" not in payload


async def test_a_growing_history_is_sent_as_converted_anew(chat_server: ChatServer) -> None:
    """Messages converted once (kept by identity) give the same bytes as converting all."""
    chat_server.replies.extend([ScriptedReply("Done.")] * 6)
    plain, passthrough = plain_and_passthrough(chat_server.url)
    history = list(CONVERSATIONS["tool calls and results"])
    first_round = list(history)
    history += [AIMessage("Anything else?"), HumanMessage("No, thanks.")]

    for messages in (first_round, history, history):
        for model in (plain, passthrough):
            await model.bind_tools([TOOL_SCHEMA]).ainvoke(messages)

    requests = chat_server.requests
    for sent, passed in zip(requests[::2], requests[1::2], strict=True):
        assert passed.raw == sent.raw
    assert len(requests[-1].body["messages"]) == len(history)
    assert len(passthrough._converted) == len(history)


def test_a_message_given_a_new_value_is_converted_again() -> None:
    _, passthrough = plain_and_passthrough("http://127.0.0.1:9/v1")
    question = HumanMessage("Weather in Oslo?")
    answer = AIMessage(
        "", tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "1"}]
    )

    before = passthrough._get_request_payload([question, answer])["extra_body"]["messages"]
    question.content = "Weather in Bergen?"
    answer.tool_calls = [{"name": "get_weather", "args": {"city": "Bergen"}, "id": "2"}]
    after = passthrough._get_request_payload([question, answer])["extra_body"]["messages"]

    assert before[0]["content"] == "Weather in Oslo?"
    assert after[0]["content"] == "Weather in Bergen?"
    assert json.loads(after[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Bergen"}


def test_copies_sharing_values_reuse_a_conversion_and_the_oldest_go_first() -> None:
    _, passthrough = plain_and_passthrough("http://127.0.0.1:9/v1")
    passthrough._converted.size = 2
    first, second = HumanMessage("first"), HumanMessage("second")
    passthrough._get_request_payload([first, second])

    assert passthrough._converted.get(first.model_copy()) == {"role": "user", "content": "first"}
    passthrough._get_request_payload([HumanMessage("third")])
    assert len(passthrough._converted) == 2
    assert passthrough._converted.get(second) is None  # the least recently used went
    assert passthrough._converted.get(first) is not None
    assert passthrough._converted.get(HumanMessage("first")) is None  # equal, not shared


# --- the accessor's HTTP client --------------------------------------------------------


async def test_provider_llm_models_share_one_http_client_that_aclose_closes(
    chat_server: ChatServer,
) -> None:
    llm = ProviderLLM(compatible_env(chat_server.url))
    main = llm.get("main", max_retries=0)
    utility = llm.get("utility", temperature=0.2)
    http = as_chat_openai(main).http_async_client
    assert as_chat_openai(utility).http_async_client is http
    assert isinstance(http, openai.DefaultAioHttpClient)
    assert (await main.ainvoke("hi")).content == "ok"

    await llm.aclose()

    assert http.is_closed
    with pytest.raises(RuntimeError, match="the client has been closed"):
        await main.ainvoke("again")
    with pytest.raises(RuntimeError, match="ProviderLLM is closed"):
        llm.get("main", max_retries=0)
    with pytest.raises(RuntimeError, match="ProviderLLM is closed"):
        llm.get("utility", metadata={"buffer": bytearray(b"x")})  # the uncached path
    await llm.aclose()  # twice is harmless
    assert len(chat_server.requests) == 1


async def test_a_model_given_its_own_http_client_keeps_it() -> None:
    llm = ProviderLLM(openrouter_env())
    async with openai.DefaultAsyncHttpxClient() as own:
        model = llm.get("main", http_async_client=own)
        assert as_chat_openai(model).http_async_client is own
        await llm.aclose()
        assert not own.is_closed


async def test_the_runtime_closes_the_accessor_it_built_not_one_it_was_given(
    tmp_path: Path,
) -> None:
    env = {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "qwen3:14b",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }
    runtime = await create_runtime({"name": "Closing Oracle"}, discover_entry_points=False, env=env)
    built = runtime.ambient.llm
    assert isinstance(built, ProviderLLM)
    http = as_chat_openai(built.get("main")).http_async_client
    assert isinstance(http, openai.DefaultAioHttpClient)
    await runtime.aclose()
    assert http.is_closed
    with pytest.raises(RuntimeError, match="ProviderLLM is closed"):
        built.get("main")

    given = ProviderLLM(make_env(**env))
    services = AmbientServices(
        secrets=LocalSecretsService(),
        blob_store=InMemoryBlobStore(),
        matrix=UnavailableMatrixService(),
        ucan=PermissiveUcanService(),
        events=RecordingEventSink(),
        llm=given,
    )
    async with await create_runtime(
        {"name": "Given Oracle"}, discover_entry_points=False, env=env, services=services
    ):
        pass
    kept = as_chat_openai(given.get("main")).http_async_client
    assert isinstance(kept, openai.DefaultAioHttpClient)
    assert not kept.is_closed
    await given.aclose()


async def test_the_models_connections_carry_tcp_keepalive() -> None:
    answered = asyncio.Event()
    connected = asyncio.Event()

    async def hold_the_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        connected.set()
        await answered.wait()
        body = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
            }
        ).encode()
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        )
        writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hold_the_request, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    llm = ProviderLLM(compatible_env(f"http://127.0.0.1:{port}/v1"))
    try:
        call = asyncio.create_task(llm.get("main", max_retries=0).ainvoke("hi"))
        await asyncio.wait_for(connected.wait(), 10)
        clients = [
            transport.get_extra_info("socket")
            for transport in gc.get_objects()
            if isinstance(transport, asyncio.Transport)
            and not transport.is_closing()
            and (transport.get_extra_info("peername") or ())[1:2] == (port,)
        ]
        # Read while the connection is open: the options of the client's socket.
        options = [
            (level, name, client.getsockopt(level, name))
            for client in clients
            for level, name, _ in keepalive_socket_options()
        ]
        answered.set()
        assert (await call).content == "ok"
    finally:
        await llm.aclose()
        server.close()
        await server.wait_closed()

    assert len(clients) == 1
    assert options == keepalive_socket_options()
    assert options[0] == (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 60) in options


def test_an_openai_sdk_without_its_aiohttp_transport_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A None entry makes the import fail, as if the SDK no longer vendored the module.
    monkeypatch.setitem(sys.modules, "openai._vendor.httpx_aiohttp", None)

    with pytest.raises(ImportError, match="private_name_missing") as failed:
        ProviderLLM(compatible_env("http://127.0.0.1:9/v1")).get("main")

    message = str(failed.value)
    assert f"openai {version('openai')} has no" in message
    assert "openai._vendor.httpx_aiohttp.AiohttpTransport" in message
    assert f"supports openai{SUPPORTED_RANGES['openai']}" in message
