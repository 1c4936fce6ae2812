"""``ComposioPlugin``: SaaS apps through Composio's Tool Router (03-plugins §6)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from oracle_core import AbortSignal, OraclePlugin, PluginContext, PluginTool, RuntimeContext
from oracle_plugins.composio._cache import SessionCache
from oracle_plugins.composio._config import ComposioConfig, wants_composio
from oracle_plugins.composio._prompt import composio_block
from oracle_plugins.composio._session import LoadResult, SessionManager

__all__ = ["MANIFEST", "ComposioPlugin"]

MANIFEST: dict[str, Any] = {
    "title": "Composio",
    "summary": "Act in the user's SaaS apps (Gmail, GitHub, Slack, calendars, docs, CRMs) "
    "and run web searches through Composio.",
    "when_to_use": [
        "The user wants something done in an external app: email, calendar, issues, docs",
        "Web, news or finance searches that Composio's search tools cover",
        "No other capability covers an action; look for a Composio tool first",
    ],
    "when_not_to_use": [
        "A loaded capability already covers the action",
        "IXO entity lookups: use the domain indexer",
        "Plain conversation with no external app involved",
    ],
    "examples": [
        {
            "user": "Email the team that the release is out",
            "thought": "An app action: check the Gmail connection first",
            "tool": "COMPOSIO_MANAGE_CONNECTIONS",
        },
        {
            "user": "Open a GitHub issue for this bug",
            "thought": "Find the exact tool slug before running anything",
            "tool": "COMPOSIO_SEARCH_TOOLS",
        },
        {
            "user": "(after the search returned GMAIL_SEND_EMAIL)",
            "thought": "Run it inside the tools array, never as a top-level key",
            "tool": "COMPOSIO_MULTI_EXECUTE_TOOL",
            "args": {
                "tools": [
                    {
                        "tool_slug": "GMAIL_SEND_EMAIL",
                        "arguments": {"recipient_email": "team@example.com", "subject": "Out"},
                    }
                ],
                "sync_response_to_workbench": False,
            },
        },
    ],
    "tags": ["composio", "integration", "saas", "email", "calendar", "search"],
    "category": "integration",
    "visibility": "on-demand",
    "stability": "stable",
}


class ComposioPlugin(OraclePlugin):
    """The user's SaaS apps through the IXO composio-worker (Composio's Tool Router).

    Per request the plugin opens (or reuses, for five minutes) the user's Tool Router
    session on the worker, authorised by a UCAN invocation minted from the user's
    delegation, and binds the four meta-tools the session returns:
    ``COMPOSIO_MANAGE_CONNECTIONS``, ``COMPOSIO_SEARCH_TOOLS``,
    ``COMPOSIO_GET_TOOL_SCHEMAS`` and ``COMPOSIO_MULTI_EXECUTE_TOOL``. App tools are
    never bound; they run by slug through the last one. The prompt's Composio section is
    added only on requests where the tools loaded.

    Args:
        session_ttl: Seconds a user's session is reused.
        request_timeout: Seconds for opening a session and listing its tools.
        execute_timeout: Seconds for one meta-tool execution.
        transport: Replaces httpx's network transport (proxies, tests).
    """

    name = "composio"
    version = "0.1.0"
    manifest = MANIFEST
    config_schema = ComposioConfig
    auto_detect_hint = "COMPOSIO_API_KEY is set"

    def __init__(
        self,
        *,
        session_ttl: float = 300.0,
        request_timeout: float = 15.0,
        execute_timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.session_ttl = session_ttl
        self.request_timeout = request_timeout
        self.execute_timeout = execute_timeout
        self._transport = transport
        self._sessions: SessionManager | None = None
        self._lifespans = 0
        # get_request_tools and get_prompt_blocks run concurrently in one agent build,
        # whose contexts share one object: the build's abort signal. Keyed on it, the
        # prompt hook waits for the tools this build loaded instead of loading its own.
        self._builds: weakref.WeakKeyDictionary[AbortSignal, asyncio.Future[LoadResult]] = (
            weakref.WeakKeyDictionary()
        )

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On with ``COMPOSIO_API_KEY``."""
        return wants_composio(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[ComposioConfig]) -> AsyncIterator[None]:
        """Open the HTTP client (shared by the runtimes this instance serves)."""
        if self._sessions is None:
            self._sessions = SessionManager(
                httpx.AsyncClient(transport=self._transport),
                SessionCache(ttl=self.session_ttl),
                request_timeout=self.request_timeout,
                execute_timeout=self.execute_timeout,
            )
        self._lifespans += 1
        ctx.logger.info("composio worker at %s", ctx.plugin_config.COMPOSIO_BASE_URL)
        try:
            yield
        finally:
            self._lifespans -= 1
            if self._lifespans == 0 and self._sessions is not None:
                sessions, self._sessions = self._sessions, None
                await sessions.aclose()

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """The meta-tools of the user's session (none without an invocation)."""
        return list((await self._loaded(rt_ctx)).tools)

    async def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        """The Composio section, when the thread has loaded the capability and the
        meta-tools loaded on this request (an on-demand plugin costs no prompt before)."""
        if self.name not in rt_ctx.loaded_plugins:
            return {}
        loaded = await self._loaded(rt_ctx)
        block = composio_block(loaded.names)
        return {"composio_context": block} if block else {}

    async def _loaded(self, rt_ctx: RuntimeContext[Any]) -> LoadResult:
        signal = rt_ctx.abort_signal
        pending = self._builds.get(signal)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[LoadResult] = asyncio.get_running_loop().create_future()
        self._builds[signal] = future
        try:
            loaded = await self._load(rt_ctx)
        except BaseException:
            future.set_result(LoadResult())  # the other hook of this build gets nothing
            raise
        future.set_result(loaded)
        return loaded

    async def _load(self, rt_ctx: RuntimeContext[Any]) -> LoadResult:
        sessions = self._sessions
        config = rt_ctx.plugin_config
        if sessions is None or not isinstance(config, ComposioConfig):
            return LoadResult()
        return await sessions.load(rt_ctx, config)
