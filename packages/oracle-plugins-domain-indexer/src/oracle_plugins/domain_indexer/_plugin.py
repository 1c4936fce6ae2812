"""The domain-indexer plugin: a sub-agent over the IXO Domain Indexer, and the entity context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from oracle_core import OraclePlugin, PluginContext, PluginSubAgent, RuntimeContext
from oracle_plugins.domain_indexer._catalog import SqliteCardCatalog
from oracle_plugins.domain_indexer._client import (
    DEFAULT_TIMEOUT,
    DomainIndexerBackend,
    HttpDomainIndexer,
)
from oracle_plugins.domain_indexer._config import (
    SQLITE_SCHEME,
    DomainIndexerConfig,
    resolve_base_url,
    wants_domain_indexer,
)
from oracle_plugins.domain_indexer._prompts import (
    SUB_AGENT_DESCRIPTION,
    SUB_AGENT_NAME,
    SUB_AGENT_PROMPT,
    entity_context_mode,
    looks_like_did,
)
from oracle_plugins.domain_indexer._tools import build_tools

__all__ = ["DomainIndexerPlugin"]

MANIFEST: dict[str, Any] = {
    "title": "Domain Indexer",
    "summary": "Look up IXO entities (organizations, projects, DAOs, DIDs): summaries, "
    "overviews and FAQs.",
    "when_to_use": [
        "The user asks what an IXO organization, project, DAO or DID is",
        "The user wants the summary, overview or FAQ of an IXO entity",
        "Finding IXO entities by topic, category or keyword",
    ],
    "when_not_to_use": [
        "General web search unrelated to IXO entities",
        "The user's own history or past conversations",
        "Workspace pages: pages are not entities",
    ],
    "examples": [
        {
            "user": "What is did:ixo:entity:abc123?",
            "tool": "call_domain_indexer_agent",
            "args": {"task": "Summarise did:ixo:entity:abc123 with its overview and FAQ"},
        },
        {
            "user": "Find DAOs working on clean water",
            "thought": "Discovery by topic across IXO entities",
            "tool": "call_domain_indexer_agent",
        },
    ],
    "tags": ["ixo", "entities", "search", "dids"],
    "category": "data",
    "visibility": "always",
    "stability": "stable",
}


class DomainIndexerPlugin(OraclePlugin):
    """IXO entity lookup through the Domain Indexer, as the ``call_domain_indexer_agent`` tool.

    The indexer is ``DOMAIN_INDEXER_URL`` when set, else the public indexer of ``NETWORK``
    (mainnet, testnet, devnet). While the client reports the entity the user is in
    (``metadata.currentEntityDid`` → ``state.current_entity_did``), the prompt's
    operational mode becomes the entity context.

    Args:
        transport: Replaces httpx's network transport for every request (proxies, tests).
        timeout: Per-request timeouts of the indexer calls.
    """

    name = "domain-indexer"
    version = "0.1.0"
    manifest = MANIFEST
    config_schema = DomainIndexerConfig
    auto_detect_hint = (
        "NETWORK or DOMAIN_INDEXER_URL; with ORACLE_BACKEND=local and neither set, the oracle "
        "stays offline and the plugin is off"
    )

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self._transport = transport
        self._timeout = timeout
        # One instance can serve several runtimes in a process (the entry point names a
        # module-level instance), so each boot's backend is kept under its context.
        self._backends: dict[int, DomainIndexerBackend] = {}

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        return wants_domain_indexer(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[DomainIndexerConfig]) -> AsyncIterator[None]:
        backend = self._open_backend(ctx)
        self._backends[id(ctx)] = backend
        try:
            yield
        finally:
            self._backends.pop(id(ctx), None)
            await backend.aclose()

    def get_sub_agents(self, ctx: PluginContext[DomainIndexerConfig]) -> list[PluginSubAgent]:
        backend = self._backends.get(id(ctx))
        if backend is None:
            raise RuntimeError("the domain-indexer lifespan was not entered for this runtime")
        return [
            PluginSubAgent(
                name=SUB_AGENT_NAME,
                description=SUB_AGENT_DESCRIPTION,
                system_prompt=SUB_AGENT_PROMPT,
                tools=build_tools(backend),
                model="subagent",
            )
        ]

    def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
        # The client reports the entity with every message; the server's value for the
        # turn wins over this one, so a turn without it leaves the entity context instead
        # of keeping last turn's entity in the checkpoint.
        return {"current_entity_did": None}

    def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        state = rt_ctx.history.state
        did = state.get("current_entity_did")
        if not did:
            return {}
        if not looks_like_did(did):
            rt_ctx.logger.info("current_entity_did is not a DID; entity context skipped")
            return {}
        # An open page is the editor's operational mode; it takes precedence.
        if state.get("editor_room_id") and "editor" in rt_ctx.available_plugins:
            return {}
        return {"operational_mode": entity_context_mode(did, rt_ctx.available_plugins)}

    def _open_backend(self, ctx: PluginContext[DomainIndexerConfig]) -> DomainIndexerBackend:
        config = ctx.plugin_config
        location = resolve_base_url(ctx.config, config.DOMAIN_INDEXER_URL if config else None)
        ctx.logger.info("domain indexer at %s", location)
        if location.startswith(SQLITE_SCHEME):
            return SqliteCardCatalog.open(location.removeprefix(SQLITE_SCHEME))
        return HttpDomainIndexer(
            location, logger=ctx.logger, timeout=self._timeout, transport=self._transport
        )
