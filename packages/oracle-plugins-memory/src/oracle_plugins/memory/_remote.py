"""The remote backend: a Memory Engine's MCP tools bound per request, its REST context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oracle_core import Effect, PluginTool, RuntimeContext
from oracle_mcp import AuthFailure, McpClient, McpToolDefinition, mcp_plugin_tools
from oracle_plugins.memory._auth import EngineAuth
from oracle_plugins.memory._context import EngineRestClient, UserContext, context_from_batch
from oracle_plugins.memory._names import TOOL_PREFIX, tool_effect
from oracle_plugins.memory._scope import scoped_knowledge_level
from oracle_plugins.memory._slots import batch_request

__all__ = ["RemoteBackend"]


class RemoteBackend:
    """Everything that talks to the Memory Engine for one runtime.

    Args:
        mcp: The MCP client (``MEMORY_MCP_URL``).
        rest: The REST client (``MEMORY_ENGINE_URL``).
        auth: Mints the request headers.
        selected: Wire names of the tools to bind, in order.
        oracle_dids: The oracle DIDs sent with context queries (empty: no context).
    """

    def __init__(
        self,
        *,
        mcp: McpClient,
        rest: EngineRestClient,
        auth: EngineAuth,
        selected: Sequence[str],
        oracle_dids: Sequence[str],
    ) -> None:
        self.mcp = mcp
        self.rest = rest
        self.auth = auth
        self.selected = tuple(selected)
        self.oracle_dids = tuple(oracle_dids)

    async def request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool] | AuthFailure:
        """This request's tools, or why there are none (a mint failure: no tools, a warning).

        Raises:
            McpUnavailableError: the engine cannot list its tools (the turn lists
                memory as degraded).
        """
        headers = await self.auth.headers(rt_ctx)
        if isinstance(headers, AuthFailure):
            return headers
        definitions = {d.name: d for d in await self.mcp.list_tools(headers)}
        return mcp_plugin_tools(
            self.mcp,
            [definitions[n] for n in self.selected if n in definitions],
            headers=self.auth.headers,
            prefix=TOOL_PREFIX,
            label="the memory service",
            effect=_effect,
            arguments=_scoped,
        )

    async def user_context(self, rt_ctx: RuntimeContext[Any]) -> UserContext | None:
        """The six slots from ``POST /search-enhanced-batch``; ``None`` when it failed."""
        if not self.oracle_dids:
            rt_ctx.logger.warning("memory user context skipped: no ORACLE_ENTITY_DID")
            return None
        headers = await self.auth.headers(rt_ctx)
        if isinstance(headers, AuthFailure):
            rt_ctx.logger.warning("memory user context skipped: %s", headers.reason)
            return None
        results = await self.rest.search_batch(batch_request(self.oracle_dids), headers)
        return context_from_batch(results)

    async def ingest(self, rt_ctx: RuntimeContext[Any], messages: list[dict[str, str]]) -> None:
        """``POST /messages`` (the caller runs it in the background)."""
        headers = await self.auth.headers(rt_ctx)
        if isinstance(headers, AuthFailure):
            rt_ctx.logger.info("memory history not ingested: %s", headers.reason)
            return
        await self.rest.post_messages(messages, headers)


def _effect(definition: McpToolDefinition) -> Effect:
    # The engine annotates read-only tools; the deleting ones are known by name.
    return tool_effect(definition.name, definition.read_only)


def _scoped(
    definition: McpToolDefinition, payload: dict[str, Any], rt_ctx: RuntimeContext[Any]
) -> dict[str, Any]:
    """``knowledge_level`` narrowed to the request's data scope, for the tools that take it."""
    properties = definition.input_schema.get("properties")
    if rt_ctx.data_scope and isinstance(properties, dict) and "knowledge_level" in properties:
        requested = str(payload.get("knowledge_level") or "both")
        payload["knowledge_level"] = scoped_knowledge_level(requested, rt_ctx.data_scope)
    return payload
