"""The user's session on the composio-worker: opened, kept briefly, executed on.

``load`` gives a request its meta-tools: no invocation → none (UCAN-only, no
fallback, not a degradation); a session that cannot be opened or listed → none and
``rt_ctx.report_degraded("Composio")``. ``execute`` runs one meta-tool with a fresh
invocation; a session the worker no longer knows is reopened once (nothing ran), and a
``COMPOSIO_MANAGE_CONNECTIONS`` call forgets the kept session, since the user's
connections, and with them the tool set, may change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from oracle_core import PluginTool, RuntimeContext
from oracle_plugins.composio._auth import Unauthorised, mint_worker_invocation
from oracle_plugins.composio._cache import SessionCache, SessionKey
from oracle_plugins.composio._client import WorkerClient, WorkerError, WorkerSession
from oracle_plugins.composio._config import ComposioConfig, network_of
from oracle_plugins.composio._names import MANAGE_CONNECTIONS
from oracle_plugins.composio._tools import build_meta_tools

__all__ = ["DEGRADED_LABEL", "LoadResult", "SessionManager"]

DEGRADED_LABEL = "Composio"
"""What the prompt's degraded-services section names when the session fails."""

_ERROR_CHARS = 1000


@dataclass(frozen=True)
class LoadResult:
    """The meta-tools of one request (empty when Composio is absent this turn)."""

    tools: tuple[PluginTool, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The bound tool names."""
        return tuple(t.name for t in self.tools)


class SessionManager:
    """Sessions and executions of every user, over one HTTP client.

    Args:
        http: The HTTP client (closed by ``aclose``).
        cache: Where sessions are kept.
        request_timeout: Seconds for session creation and listing.
        execute_timeout: Seconds for one execution.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        cache: SessionCache,
        *,
        request_timeout: float,
        execute_timeout: float,
    ) -> None:
        self._http = http
        self.cache = cache
        self._request_timeout = request_timeout
        self._execute_timeout = execute_timeout

    async def aclose(self) -> None:
        """Close the HTTP client and forget every session."""
        self.cache.clear()
        await self._http.aclose()

    async def load(self, rt_ctx: RuntimeContext[Any], config: ComposioConfig) -> LoadResult:
        """The request's meta-tools, bound to the user's session."""
        minted = await mint_worker_invocation(rt_ctx, config.COMPOSIO_BASE_URL)
        if isinstance(minted, Unauthorised):
            rt_ctx.logger.info("composio tools unavailable this turn: %s", minted.reason)
            return LoadResult()
        key = _key(rt_ctx, config)
        client = self._client(rt_ctx, config)
        try:
            session = await self.cache.get_or_open(
                key, lambda: self._open(rt_ctx, client, config, first=minted)
            )
        except WorkerError as exc:
            rt_ctx.logger.warning("composio session unavailable this turn: %s", exc.code)
            rt_ctx.report_degraded(DEGRADED_LABEL)
            return LoadResult()
        session_id = session.session_id

        async def execute(call_ctx: RuntimeContext[Any], slug: str, args: dict[str, Any]) -> Any:
            return await self.execute(call_ctx, config, key, session_id, slug, args)

        tools = build_meta_tools(session.tools, execute)
        if not tools:
            rt_ctx.logger.info("composio session lists none of the meta-tools")
        return LoadResult(tuple(tools))

    async def execute(
        self,
        rt_ctx: RuntimeContext[Any],
        config: ComposioConfig,
        key: SessionKey,
        session_id: str,
        slug: str,
        arguments: Mapping[str, Any],
    ) -> Any:
        """Run ``slug`` on the session; the result for the model (never raises)."""
        client = self._client(rt_ctx, config)
        body: Mapping[str, Any] | None = None
        for attempt in (1, 2):
            minted = await mint_worker_invocation(rt_ctx, config.COMPOSIO_BASE_URL)
            if isinstance(minted, Unauthorised):
                rt_ctx.logger.warning("composio %s not run: %s", slug, minted.reason)
                return {
                    "ok": False,
                    "code": "composio.unauthorised",
                    "error": "Composio is unavailable for this request: the user's "
                    "authorisation for it could not be used. Tell the user.",
                }
            try:
                body = await client.execute_meta(session_id, slug, arguments, minted)
                break
            except WorkerError as exc:
                if exc.code != "composio.session_gone" or attempt == 2:
                    rt_ctx.logger.warning("composio %s failed: %s", slug, exc.code)
                    return exc.as_tool_error()
            # The worker forgot the session; nothing ran, so a new one is safe to use.
            self.cache.drop(key)
            try:
                session = await self.cache.get_or_open(
                    key, lambda: self._open(rt_ctx, client, config, first=None)
                )
            except WorkerError as exc:
                rt_ctx.logger.warning("composio session not reopened: %s", exc.code)
                return exc.as_tool_error()
            session_id = session.session_id
        if slug == MANAGE_CONNECTIONS:
            self.cache.drop(key)
        assert body is not None
        return _result(body)

    async def _open(
        self,
        rt_ctx: RuntimeContext[Any],
        client: WorkerClient,
        config: ComposioConfig,
        *,
        first: str | None,
    ) -> WorkerSession:
        """Create the user's session and list its tools (one invocation per request)."""
        invocation = first if first is not None else await self._mint(rt_ctx, config)
        session_id = await client.create_session(rt_ctx.user.did, invocation)
        tools = await client.list_tools(session_id, await self._mint(rt_ctx, config))
        return WorkerSession(session_id, tools)

    async def _mint(self, rt_ctx: RuntimeContext[Any], config: ComposioConfig) -> str:
        minted = await mint_worker_invocation(rt_ctx, config.COMPOSIO_BASE_URL)
        if isinstance(minted, Unauthorised):
            raise WorkerError("composio.unauthorised", f"no invocation: {minted.reason}")
        return minted

    def _client(self, rt_ctx: RuntimeContext[Any], config: ComposioConfig) -> WorkerClient:
        return WorkerClient(
            self._http,
            base_url=config.COMPOSIO_BASE_URL,
            api_key=config.COMPOSIO_API_KEY,
            network=network_of(rt_ctx.config),
            request_timeout=self._request_timeout,
            execute_timeout=self._execute_timeout,
        )


def _key(rt_ctx: RuntimeContext[Any], config: ComposioConfig) -> SessionKey:
    # Sessions belong to one user of one oracle (the worker derives the Composio user
    # from both); the key is kept as a digest only.
    key_id = hashlib.sha256(config.COMPOSIO_API_KEY.encode()).hexdigest()[:16]
    oracle = str(rt_ctx.config.get("ORACLE_DID") or rt_ctx.identity.entity_did or "")
    return SessionKey(config.COMPOSIO_BASE_URL, key_id, oracle, rt_ctx.user.did)


def _result(body: Mapping[str, Any]) -> Any:
    """The model's view of ``{data, error, log_id}``: the data, or ``{ok: False, …}``."""
    error = body.get("error")
    data = body.get("data")
    if error:
        failed: dict[str, Any] = {
            "ok": False,
            "code": "composio.tool_error",
            "error": str(error)[:_ERROR_CHARS],
        }
        if data:
            failed["data"] = data
        return failed
    return data if data is not None else dict(body)
