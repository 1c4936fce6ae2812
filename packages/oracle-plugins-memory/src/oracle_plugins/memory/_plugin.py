"""``MemoryPlugin``: the always-visible memory of the oracle (03-plugins §2)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from langchain.agents.middleware import AgentMiddleware

from oracle_core import (
    Accessor,
    OraclePlugin,
    PluginContext,
    PluginTool,
    ReadonlyState,
    RuntimeContext,
    SessionEvent,
)
from oracle_mcp import AuthFailure, McpClient
from oracle_plugins.memory._auth import EngineAuth, RoomCache
from oracle_plugins.memory._config import MemoryConfig, wants_memory
from oracle_plugins.memory._context import ContextCache, EngineRestClient, UserContext
from oracle_plugins.memory._embedded import build_embedded_tools
from oracle_plugins.memory._embedding import Embedder, load_embedder
from oracle_plugins.memory._ingest import INGESTED_KEY, HistoryIngestionMiddleware, missed_turns
from oracle_plugins.memory._names import DEFAULT_SELECTED_TOOLS, MAIN_AGENT_ONLY, wire_name
from oracle_plugins.memory._names import wire_names as _wire_names
from oracle_plugins.memory._remote import RemoteBackend
from oracle_plugins.memory._store import EmbeddedMemoryStore

__all__ = ["MEMORY_DATABASE_NAME", "MemoryPlugin", "UserContextReader"]

MEMORY_DATABASE_NAME = "memory.sqlite"
UserContextReader = Callable[[RuntimeContext[Any]], Awaitable[Mapping[str, str | None]]]
"""Replaces the context fetch: ``(rt_ctx) -> {slot: text or None}``."""

_EMBEDDER_CACHE: dict[str | None, Embedder | str] = {}


def _shared_embedder(model_dir: str | None) -> Embedder | str:
    # Loading takes about a second; runtimes in one process (tests, replicas) share it.
    if model_dir not in _EMBEDDER_CACHE:
        _EMBEDDER_CACHE[model_dir] = load_embedder(model_dir)
    return _EMBEDDER_CACHE[model_dir]


@dataclass
class _Running:
    """What one runtime's lifespan opened."""

    config: MemoryConfig
    remote: RemoteBackend | None = None
    store: EmbeddedMemoryStore | None = None
    embedded_tools: list[PluginTool] = field(default_factory=list)
    http: httpx.AsyncClient | None = None


class MemoryPlugin(OraclePlugin):
    """What the oracle knows about the user, across conversations.

    With ``MEMORY_MCP_URL`` the tools are a Memory Engine's, fetched per request over MCP
    with a per-user UCAN invocation; without it (``MEMORY_BACKEND=embedded``) the same tool
    names run in process over SQLite. Either way the plugin fills ``user_context`` (the
    prompt's "what you know about the user") once per session every five minutes.

    Args:
        selected_tools: Engine tools to bind (wire names, with or without the
            ``memory-engine__`` prefix). Default: search, add, delete_episode, clear.
        user_context_reader: Replaces the context fetch of either backend.
        semantic: ``"auto"`` loads the packaged embedding model when installed (or
            ``MEMORY_EMBEDDING_MODEL_PATH``); ``False`` keeps the embedded store BM25 only.
        ingest_history: Send each finished turn to the engine's ``POST /messages``.
        reconnect_attempts: MCP reconnections after a failed connection.
        reconnect_delay: Seconds between them.
        context_timeout: Seconds the context fetch may take.
        context_ttl: Seconds a session's context is reused.
        tools_ttl: Seconds the engine's tool definitions are reused (authorisation is
            still minted per request).
    """

    name = "memory"
    version = "0.1.0"
    config_schema = MemoryConfig
    auto_detect_hint = "MEMORY_MCP_URL is set"
    manifest = {
        "title": "Memory",
        "summary": "Remember what the user shares across conversations and recall it later.",
        "when_to_use": [
            "The user shares something about themselves worth keeping",
            "The user asks what you remember, or an earlier detail matters",
            "The user asks you to forget something",
        ],
        "when_not_to_use": ["General knowledge that is not about the user"],
        "examples": [
            {
                "user": "Remember that I'm vegetarian",
                "tool": "memory-engine__add_memory",
                "args": {"name": "Diet", "content": "The user is vegetarian."},
            }
        ],
        "tags": ["memory", "personalisation", "recall"],
        "category": "memory",
        "visibility": "always",
        "stability": "stable",
        # Forced on, or in local mode, without a Memory Engine: the SQLite store.
        "backends": {"variable": "MEMORY_BACKEND", "default": "remote", "embedded": "embedded"},
    }

    def __init__(
        self,
        *,
        selected_tools: Sequence[str] = DEFAULT_SELECTED_TOOLS,
        user_context_reader: UserContextReader | None = None,
        semantic: Literal["auto"] | bool = "auto",
        ingest_history: bool = True,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        context_timeout: float = 15.0,
        context_ttl: float = 300.0,
        tools_ttl: float = 300.0,
    ) -> None:
        self.selected_tools = _wire_names(selected_tools)
        self.user_context_reader = user_context_reader
        self.semantic = semantic
        self.ingest_history = ingest_history
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.context_timeout = context_timeout
        self.tools_ttl = tools_ttl
        self.contexts = ContextCache(ttl=context_ttl)
        self._rooms = RoomCache()
        self._running: _Running | None = None
        self._ingestion = HistoryIngestionMiddleware(self._ingest)
        # Tools bound for a (user, session) this build, for sub-agents (see memoryTools).
        self._turn_tools: OrderedDict[tuple[str, str], list[PluginTool]] = OrderedDict()

    # --- resolution and lifetime -----------------------------------------------------

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On with ``MEMORY_MCP_URL``; the runtime picks the embedded backend otherwise
        (``MEMORY_BACKEND=embedded``, forced on, or ``ORACLE_BACKEND=local``)."""
        return wants_memory(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[MemoryConfig]) -> AsyncIterator[None]:
        """Open the engine clients (remote) or the SQLite store (embedded)."""
        if self._running is not None:
            raise RuntimeError(
                "this MemoryPlugin instance already runs in another runtime; "
                "pass a new MemoryPlugin() to each runtime"
            )
        config = ctx.plugin_config
        running = _Running(config=config)
        try:
            if config.backend == "remote":
                await self._open_remote(ctx, running)
            else:
                await self._open_embedded(ctx, running)
            self._running = running
            yield
        finally:
            self._running = None
            await self._ingestion.drain()
            if running.remote is not None:
                await running.remote.mcp.aclose()
            if running.http is not None:
                await running.http.aclose()
            if running.store is not None:
                running.store.close()
            self.contexts.clear()
            self._turn_tools.clear()

    async def _open_remote(self, ctx: PluginContext[MemoryConfig], running: _Running) -> None:
        config = running.config
        # The config validators require both URLs with the remote backend.
        assert config.MEMORY_MCP_URL is not None
        assert config.MEMORY_ENGINE_URL is not None
        running.http = httpx.AsyncClient()
        oracle_dids = [d for d in (ctx.identity.entity_did, ctx.config.get("ORACLE_DID")) if d]
        running.remote = RemoteBackend(
            mcp=McpClient(
                config.MEMORY_MCP_URL,
                name="memory",
                reconnect_attempts=self.reconnect_attempts,
                reconnect_delay=self.reconnect_delay,
                tools_ttl=self.tools_ttl,
            ),
            rest=EngineRestClient(
                config.MEMORY_ENGINE_URL,
                running.http,
                timeout=self.context_timeout,
                logger=ctx.logger,
            ),
            auth=EngineAuth(self._rooms, config.MEMORY_MCP_URL),
            selected=self.selected_tools,
            oracle_dids=list(dict.fromkeys(str(d) for d in oracle_dids)),
        )
        ctx.logger.info("memory: remote Memory Engine backend")

    async def _open_embedded(self, ctx: PluginContext[MemoryConfig], running: _Running) -> None:
        config = running.config
        embedder: Embedder | None = None
        if self.semantic is not False:
            loaded = await asyncio.to_thread(_shared_embedder, config.MEMORY_EMBEDDING_MODEL_PATH)
            if isinstance(loaded, str):
                ctx.logger.warning("memory: semantic recall off, BM25 only: %s", loaded)
            else:
                embedder = loaded
        root = Path(str(ctx.config.get("SQLITE_DATABASE_PATH") or "./data/sqlite"))
        running.store = await asyncio.to_thread(
            EmbeddedMemoryStore, root / MEMORY_DATABASE_NAME, embedder
        )
        store = running.store
        oracle_did = ctx.identity.entity_did or f"local:{ctx.identity.name}"
        running.embedded_tools = build_embedded_tools(
            lambda: store,
            oracle_did=oracle_did,
            owners=config.oracle_owner_dids,
            selected=self.selected_tools,
        )
        ctx.logger.info(
            "memory: embedded SQLite backend (%s)",
            f"semantic recall with {embedder.model_id}" if embedder else "BM25 recall",
        )

    # --- per request -------------------------------------------------------------------

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """The memory tools of this request (none when the request cannot be authorised)."""
        running = self._running
        if running is None:
            return []
        if running.remote is None:
            tools = running.embedded_tools
        else:
            if not rt_ctx.user.did:
                rt_ctx.logger.warning("memory tools unavailable this turn: no user DID")
                return []
            got = await running.remote.request_tools(rt_ctx)
            if isinstance(got, AuthFailure):
                rt_ctx.logger.warning("memory tools unavailable this turn: %s", got.reason)
                return []
            tools = got
        self._remember_turn_tools(rt_ctx, tools)
        return list(tools)

    async def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
        """``user_context`` for the session: cached five minutes, empty when it fails."""
        if self._running is None or not rt_ctx.user.did:
            return {}
        key = (rt_ctx.user.did, rt_ctx.session.id)
        context = await self.contexts.get(key, lambda: self._fetch_context(rt_ctx))
        return {"user_context": context}

    async def _fetch_context(self, rt_ctx: RuntimeContext[Any]) -> UserContext | None:
        running = self._running
        try:
            if self.user_context_reader is not None:
                return dict(await self.user_context_reader(rt_ctx))
            if running is None:
                return None
            if running.remote is not None:
                return await running.remote.user_context(rt_ctx)
            if running.store is not None:
                return await asyncio.to_thread(running.store.user_context, rt_ctx.user.did)
        except Exception as exc:  # context is enrichment: a failure never fails the turn
            rt_ctx.logger.warning("memory user context failed: %s", type(exc).__name__)
        return None

    def get_shared_state(self) -> Mapping[str, Accessor]:
        """``userProfile`` (the user context) and ``memoryTools`` (tools for sub-agents)."""

        def user_profile(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> dict[str, Any]:
            return dict(state.user_context)

        def memory_tools(
            state: ReadonlyState, rt_ctx: RuntimeContext[Any]
        ) -> tuple[PluginTool, ...]:
            tools = self._turn_tools.get((rt_ctx.user.did, rt_ctx.session.id), [])
            return tuple(t for t in tools if wire_name(t.name) not in MAIN_AGENT_ONLY)

        return {"userProfile": user_profile, "memoryTools": memory_tools}

    def get_middlewares(self, ctx: PluginContext[MemoryConfig]) -> list[AgentMiddleware[Any, Any]]:
        """History ingestion, with a remote engine."""
        if self.ingest_history and ctx.plugin_config.backend == "remote":
            return [self._ingestion]
        return []

    async def on_session_event(self, event: SessionEvent, rt_ctx: RuntimeContext[Any]) -> None:
        """A deleted session's history goes to the engine (with a remote engine): the
        turns per-turn ingestion did not send, all of them when it is off."""
        if event.kind != "session.deleted":
            return
        running = self._running
        if running is None or running.remote is None:
            return
        key = INGESTED_KEY.format(session=event.session_id)
        sent: set[str] = set()
        if rt_ctx.kv is not None:
            sent = set(await rt_ctx.kv.get(key, []))
            await rt_ctx.kv.delete(key)
        entries = missed_turns(
            list(event.messages),
            sent if self.ingest_history else set(),
            user_name=rt_ctx.user.matrix_user_id or rt_ctx.user.did,
            oracle_name=rt_ctx.identity.name,
        )
        if entries:
            self._ingestion.schedule(rt_ctx, entries)

    async def _ingest(self, rt_ctx: RuntimeContext[Any], messages: list[dict[str, str]]) -> None:
        running = self._running
        if running is not None and running.remote is not None:
            await running.remote.ingest(rt_ctx, messages)

    def _remember_turn_tools(self, rt_ctx: RuntimeContext[Any], tools: list[PluginTool]) -> None:
        key = (rt_ctx.user.did, rt_ctx.session.id)
        self._turn_tools[key] = tools
        self._turn_tools.move_to_end(key)
        while len(self._turn_tools) > 1024:
            self._turn_tools.popitem(last=False)
