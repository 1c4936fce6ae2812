"""The remote backend: a Memory Engine's MCP tools bound per request, its REST context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from oracle_core import PluginTool, RuntimeContext
from oracle_plugins.memory._auth import AuthFailure, EngineAuth
from oracle_plugins.memory._context import EngineRestClient, UserContext, context_from_batch
from oracle_plugins.memory._mcp import (
    EngineUnavailableError,
    McpEngineClient,
    ToolDefinition,
    render_result,
)
from oracle_plugins.memory._names import prefixed, tool_effect
from oracle_plugins.memory._scope import scoped_knowledge_level
from oracle_plugins.memory._slots import batch_request

__all__ = ["RemoteBackend"]

UNAUTHORISED = (
    "Memory is unavailable for this request: no authorisation for the memory service. "
    "Tell the user if they asked for it."
)


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
        mcp: McpEngineClient,
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
            EngineUnavailableError: the engine cannot list its tools (the turn lists
                memory as degraded).
        """
        headers = await self.auth.headers(rt_ctx)
        if isinstance(headers, AuthFailure):
            return headers
        definitions = {d.name: d for d in await self.mcp.list_tools(headers)}
        return [self._tool(definitions[n]) for n in self.selected if n in definitions]

    def _tool(self, definition: ToolDefinition) -> PluginTool:
        mcp, auth, wire = self.mcp, self.auth, definition.name
        properties = definition.input_schema.get("properties")
        leveled = isinstance(properties, dict) and "knowledge_level" in properties

        async def call(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
            payload = args.model_dump() if isinstance(args, BaseModel) else dict(args)
            if leveled and rt_ctx.data_scope:
                requested = str(payload.get("knowledge_level") or "both")
                payload["knowledge_level"] = scoped_knowledge_level(requested, rt_ctx.data_scope)
            headers = await auth.headers(rt_ctx)
            if isinstance(headers, AuthFailure):
                rt_ctx.logger.warning("memory tool %s not called: %s", wire, headers.reason)
                return {"ok": False, "error": UNAUTHORISED}
            try:
                result = await mcp.call_tool(wire, payload, headers)
            except EngineUnavailableError as exc:
                rt_ctx.logger.warning("memory tool %s failed: %s", wire, exc)
                return {"ok": False, "error": f"The memory service is unavailable ({exc})."}
            text = render_result(result)
            if result.isError:
                return {"ok": False, "error": text[:1000] or "The memory service refused."}
            return text

        return PluginTool(
            name=prefixed(wire),
            description=definition.description,
            # The engine's schema, verbatim: the engine validates the arguments.
            args_schema=dict(definition.input_schema),
            handler=call,
            effect=tool_effect(wire, definition.read_only),
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
