"""LLM providers: role → model maps and the provider-aware chat model factory (§13).

``LLM_PROVIDER`` picks one of three OpenAI-compatible endpoints; every ``ModelRole`` maps to a
model on each. ``langchain_openai`` is imported only when a model is built, so importing this
module stays cheap.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from oracle_core._errors import OracleBootError, UnknownModelRoleError
from oracle_core._tools import MODEL_ROLES

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from oracle_core._config import CoreEnv

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MODEL_CONTEXT_WINDOWS",
    "NEBIUS_MODELS",
    "OPENROUTER_MAIN_FALLBACKS",
    "OPENROUTER_MODELS",
    "PROVIDERS",
    "ProviderLLM",
    "check_provider",
    "context_window",
    "get_provider_chat_model",
]

PROVIDERS: tuple[str, ...] = ("openrouter", "nebius", "openai-compatible")

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
NEBIUS_BASE_URL = "https://api.tokenfactory.nebius.com/v1/"
# Local servers (Ollama, llama.cpp, vLLM without --api-key) ignore the key, but the OpenAI
# client refuses to send a request without one.
OPENAI_COMPATIBLE_PLACEHOLDER_KEY = "not-needed"

OPENROUTER_MODELS: Mapping[str, str] = MappingProxyType(
    {
        "main": "moonshotai/kimi-k2-thinking",
        "subagent": "moonshotai/kimi-k2-thinking",
        "utility": "google/gemini-2.5-flash-lite",
        "vision": "google/gemini-2.5-flash",
        "guard": "meta-llama/llama-guard-4-12b",
        "routing": "openai/gpt-oss-20b",
        "session-title": "meta-llama/llama-3.1-8b-instruct",
    }
)
"""OpenRouter model per role. Data, not configuration: change a role with ``resolve_model``."""

OPENROUTER_MAIN_FALLBACKS: tuple[str, ...] = (
    "qwen/qwen3-235b-a22b-thinking-2507",
    "google/gemini-2.5-flash",
)
"""Models OpenRouter tries, in order, when the ``main`` model has no healthy provider."""

NEBIUS_MODELS: Mapping[str, str] = MappingProxyType(
    {
        "main": "Qwen/Qwen3-235B-A22B-Thinking-2507",
        "subagent": "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "utility": "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "vision": "Qwen/Qwen2.5-VL-72B-Instruct",
        "guard": "meta-llama/Llama-Guard-3-8B",
        "routing": "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "session-title": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    }
)
"""Nebius Token Factory model per role."""

MODEL_CONTEXT_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        "moonshotai/kimi-k2-thinking": 262_144,
        "qwen/qwen3-235b-a22b-thinking-2507": 262_144,
        "google/gemini-2.5-flash-lite": 1_048_576,
        "google/gemini-2.5-flash": 1_048_576,
        "meta-llama/llama-guard-4-12b": 163_840,
        "openai/gpt-oss-20b": 131_072,
        "meta-llama/llama-3.1-8b-instruct": 131_072,
        "Qwen/Qwen3-235B-A22B-Thinking-2507": 262_144,
        "Qwen/Qwen3-235B-A22B-Instruct-2507": 262_144,
        "Qwen/Qwen3-30B-A3B-Instruct-2507": 262_144,
        "Qwen/Qwen2.5-VL-72B-Instruct": 32_768,
        "meta-llama/Llama-Guard-3-8B": 131_072,
        "meta-llama/Meta-Llama-3.1-8B-Instruct": 131_072,
    }
)
"""Context window in tokens (prompt and reply together) of every model in the maps above."""

DEFAULT_CONTEXT_WINDOW = 32_768
"""Window assumed for a model the map does not know and whose profile says nothing (a
local ``openai-compatible`` model, say); ``LLM_CONTEXT_WINDOWS`` sets the real one."""

_CLIENT_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "timeout": 120.0,
        "max_retries": 2,
        # ChatOpenAI turns usage streaming off for any custom base_url; every endpoint here
        # reports it, and token accounting needs it.
        "stream_usage": True,
        # Model-name heuristics (e.g. "codex" in a local model's name) would otherwise switch
        # to the Responses API, which none of these endpoints is guaranteed to serve.
        "use_responses_api": False,
    }
)

_CACHE_SIZE = 128

_logger = logging.getLogger("oracle.llm")


def _missing(value: str | None) -> bool:
    return value is None or not value.strip()


def check_provider(env: CoreEnv) -> None:
    """Check that the selected provider's variables are set (CORE-87). Makes no network call.

    Args:
        env: The validated Tier-0 environment.

    Raises:
        OracleBootError: ``boot.llm.key_missing``, naming every missing variable.
    """
    provider = env.llm_provider
    if provider == "openrouter":
        missing = ["OPEN_ROUTER_API_KEY"] if _missing(env.open_router_api_key) else []
        hint = "set OPEN_ROUTER_API_KEY, or choose another LLM_PROVIDER"
    elif provider == "nebius":
        missing = ["NEBIUS_API_KEY"] if _missing(env.nebius_api_key) else []
        hint = "set NEBIUS_API_KEY, or choose another LLM_PROVIDER"
    else:
        missing = [
            var
            for var, value in (
                ("OPENAI_COMPATIBLE_BASE_URL", env.openai_compatible_base_url),
                ("OPENAI_COMPATIBLE_MODEL", env.openai_compatible_model),
            )
            if _missing(value)
        ]
        hint = (
            "set OPENAI_COMPATIBLE_BASE_URL (e.g. http://127.0.0.1:11434/v1) and "
            "OPENAI_COMPATIBLE_MODEL to a tool-calling model the server serves"
        )
    if missing:
        raise OracleBootError(
            f"LLM_PROVIDER={provider} needs {' and '.join(missing)}",
            code="boot.llm.key_missing",
            hint=hint,
        )


def _check_role(role: str) -> None:
    if role not in MODEL_ROLES:
        raise UnknownModelRoleError(
            f"unknown model role '{role}'",
            hint=f"use one of: {', '.join(MODEL_ROLES)}",
        )


def _provider_defaults(role: str, env: CoreEnv) -> dict[str, Any]:
    """Constructor arguments of ``ChatOpenAI`` for ``role`` on the active provider."""
    provider = env.llm_provider
    if provider == "openrouter":
        defaults: dict[str, Any] = {
            "base_url": OPENROUTER_BASE_URL,
            "api_key": env.open_router_api_key,
            "model": OPENROUTER_MODELS[role],
        }
        if role == "main":
            # OpenRouter request-body extras: fallback models and the fastest provider first.
            defaults["extra_body"] = {
                "models": list(OPENROUTER_MAIN_FALLBACKS),
                "provider": {"sort": "latency"},
            }
        return defaults
    if provider == "nebius":
        defaults = {
            "base_url": NEBIUS_BASE_URL,
            "api_key": env.nebius_api_key,
            "model": NEBIUS_MODELS[role],
        }
        if role == "guard":
            # A classifier: the same input must get the same verdict.
            defaults["temperature"] = 0.0
        return defaults
    return {
        "base_url": env.openai_compatible_base_url,
        "api_key": (
            OPENAI_COMPATIBLE_PLACEHOLDER_KEY
            if _missing(env.openai_compatible_api_key)
            else env.openai_compatible_api_key
        ),
        "model": env.role_models().get(role, env.openai_compatible_model),
    }


def get_provider_chat_model(role: str, *, env: CoreEnv, **params: Any) -> BaseChatModel:
    """Build the chat model serving ``role`` on ``env.llm_provider`` (CORE-86).

    Building makes no network call. ``params`` are ``ChatOpenAI`` arguments and override the
    provider's defaults (``model=``, ``temperature=``, ``timeout=``, …); an ``extra_body``
    mapping is merged over the provider's request-body extras, so OpenRouter fallbacks stay
    unless a key replaces them (``extra_body=None`` drops them all).

    Args:
        role: A ``ModelRole``: ``main``, ``subagent``, ``utility``, ``vision``, ``guard``,
            ``routing`` or ``session-title``.
        env: The validated Tier-0 environment; its provider variables supply URL and key.
        **params: ``ChatOpenAI`` constructor arguments.

    Returns:
        A ``ChatOpenAI`` pointed at the provider's endpoint (a ``PassthroughChatOpenAI``,
        which sends the same requests without the SDK re-validating the history).

    Raises:
        UnknownModelRoleError: ``role`` is not a known ``ModelRole``.
        OracleBootError: ``boot.llm.key_missing`` when the provider's variables are unset.
    """
    _check_role(role)
    check_provider(env)
    from oracle_core._chat_openai import PassthroughChatOpenAI

    kwargs: dict[str, Any] = {**_CLIENT_DEFAULTS, **_provider_defaults(role, env)}
    for name, value in params.items():
        if name == "extra_body" and isinstance(value, Mapping) and "extra_body" in kwargs:
            kwargs["extra_body"] = {**kwargs["extra_body"], **value}
        else:
            kwargs[name] = value
    _logger.debug("llm: provider=%s role=%s model=%s", env.llm_provider, role, kwargs.get("model"))
    return PassthroughChatOpenAI(**kwargs)


def context_window(role: str, model: Any, overrides: Mapping[str, int] | None = None) -> int:
    """The context window, in tokens, of the model serving ``role``.

    The first that says: ``overrides`` (``LLM_CONTEXT_WINDOWS``, per role), the model's
    LangChain profile (``max_input_tokens``, which integrations and test doubles set),
    ``MODEL_CONTEXT_WINDOWS`` by the model's id, then ``DEFAULT_CONTEXT_WINDOW``.

    Args:
        role: A ``ModelRole``.
        model: The chat model serving it (any object; its ``profile`` and
            ``model_name`` are read when present).
        overrides: Role → window, e.g. ``CoreEnv.context_windows()``.
    """
    if overrides and role in overrides:
        return overrides[role]
    profile = getattr(model, "profile", None)
    if isinstance(profile, Mapping):
        limit = profile.get("max_input_tokens")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    if isinstance(name, str) and name in MODEL_CONTEXT_WINDOWS:
        return MODEL_CONTEXT_WINDOWS[name]
    return DEFAULT_CONTEXT_WINDOW


def _freeze(value: Any) -> Hashable:
    """A hashable, type-tagged stand-in for ``value``; ``TypeError`` when there is none."""
    if isinstance(value, Mapping):
        return ("map", frozenset((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", frozenset(_freeze(v) for v in value))
    hash(value)
    return (type(value).__name__, value)


class ProviderLLM:
    """The ``LLMAccessor`` behind ``ambient.llm`` and ``rt_ctx.llm`` (CORE-86).

    Instances are cached per role and parameters, so a hot path calling ``get("utility")``
    reuses one client and its connection pool. Parameters that cannot be hashed (e.g. a
    callback object without ``__hash__``) bypass the cache.

    The models share one async HTTP client that the accessor owns, made with the first
    model, and `aclose` closes it with its connections: left to itself, langchain-openai
    keeps a client per base URL for the whole process, whose connections belong to the
    event loop that opened them and are never closed. A ``get`` given its own
    ``http_async_client`` (or an ``openai_proxy``, which builds one) keeps it. The sync
    HTTP client stays langchain-openai's: the runtime calls models asynchronously.

    Args:
        env: The validated Tier-0 environment.
    """

    def __init__(self, env: CoreEnv) -> None:
        self.env = env
        self._cache: OrderedDict[Hashable, BaseChatModel] = OrderedDict()
        # Sync tools run in worker threads, so the cache is shared across threads.
        self._lock = threading.Lock()
        self._http: Any = None
        self._closed = False

    def get(self, role: str, **params: Any) -> BaseChatModel:
        """The chat model serving ``role``; see ``get_provider_chat_model``.

        Args:
            role: A ``ModelRole``.
            **params: ``ChatOpenAI`` arguments overriding the provider defaults.

        Returns:
            A chat model, shared with earlier calls that passed equal arguments.

        Raises:
            UnknownModelRoleError: ``role`` is not a known ``ModelRole``.
            OracleBootError: ``boot.llm.key_missing`` when the provider's variables are unset.
            RuntimeError: the accessor is closed.
        """
        try:
            key: Hashable | None = (role, _freeze(params))
        except TypeError:
            key = None
        if key is None:
            return get_provider_chat_model(role, env=self.env, **self._with_http(params))
        with self._lock:
            self._check_open()
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        model = get_provider_chat_model(role, env=self.env, **self._with_http(params))
        with self._lock:
            # Another thread may have built one meanwhile; keep the first so callers share it.
            model = self._cache.setdefault(key, model)
            self._cache.move_to_end(key)
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return model

    async def aclose(self) -> None:
        """Close the models' HTTP client and its connections; `get` raises afterwards.

        Models built earlier cannot send requests any more. Closing twice is harmless.
        """
        with self._lock:
            http, self._http, self._closed = self._http, None, True
            self._cache.clear()
        if http is not None:
            await http.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ProviderLLM is closed: its runtime has shut down")

    def _with_http(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the shared async HTTP client, unless they bring their own."""
        if "http_async_client" in params or params.get("openai_proxy"):
            return params
        with self._lock:
            self._check_open()
            if self._http is None:
                self._http = _async_http_client()
            http = self._http
        return {**params, "http_async_client": http}


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """TCP keepalive for the models' connections: a peer gone silent (a dropped NAT
    entry, a dead proxy) is noticed within about 90 s instead of at the request timeout.

    The values are langchain-openai's defaults (idle 60 s, then 3 probes 10 s apart); it
    sets them only on the process-wide client it builds itself, which the runtime does not
    use. Options the platform lacks are left out.
    """
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _async_http_client() -> Any:
    """The OpenAI SDK's aiohttp-backed async client, with its defaults (pool limits,
    timeouts, redirects) and TCP keepalive on every connection.

    aiohttp rather than the SDK's default httpx2 transport: httpx2's pool checks every
    idle connection for readability (a ``poll`` each) whenever a request starts or ends,
    so a server holding many model connections pays for all of them on every call.
    Under 50 sessions that was about 7% of the event loop's time; aiohttp keeps idle
    connections in a per-host queue. The SDK ships the bridge (``DefaultAioHttpClient``
    builds it); it takes no socket options, so the session it runs on is built here with
    a connector whose sockets carry the keepalive options.
    """
    import aiohttp
    import openai

    from oracle_core._langgraph_compat import openai_aiohttp_transport

    limits = openai.DEFAULT_CONNECTION_LIMITS

    def session() -> aiohttp.ClientSession:
        # Called on the first request, inside the event loop that will use the session;
        # TLS as the SDK's transport set it up (httpx2's defaults: certifi, SSL_CERT_FILE).
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0,
            keepalive_timeout=limits.keepalive_expiry,
            ssl=transport.ssl_context,
            socket_factory=_keepalive_socket,
        )
        return aiohttp.ClientSession(connector=connector)

    transport = openai_aiohttp_transport()(client=session)
    return openai.DefaultAioHttpClient(transport=transport)


def _keepalive_socket(address: tuple[Any, ...]) -> socket.socket:
    """A socket for one of aiohttp's address candidates, with `keepalive_socket_options`."""
    family, kind, protocol = address[0], address[1], address[2]
    sock = socket.socket(family=family, type=kind, proto=protocol)
    try:
        for level, name, value in keepalive_socket_options():
            sock.setsockopt(level, name, value)
    except OSError:
        sock.close()
        raise
    return sock
