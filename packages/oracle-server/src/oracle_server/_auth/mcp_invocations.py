"""Protected MCP tools (UCAN-28): a call runs only with the client's UCAN invocation for it.

``UCAN_PROTECTED_MCP_SERVERS`` names MCP servers whose tools (bound ``<server>__<tool>``)
need, on each call, an invocation of ``mcp/call`` on
``ixo:oracle:<ORACLE_ENTITY_DID>:mcp/<server>/<tool>`` addressed to the oracle
(``ORACLE_DID``), rooted in ``UCAN_ROOT_ISSUERS`` (default the entity DID), and issued by
the user of the request. The client sends it in ``mcpInvocations`` of
``POST /messages/{id}``. It is validated when the model calls the tool (UCAN-26) and is
single use across replicas (the ``ucan_replay`` table). The model gets the spec's error
texts when it is missing or invalid, and the tool does not run.

This is a middleware of the server's own ``protected-mcp-tools`` plugin, so it guards the
tool wherever a call is dispatched: in a turn and through ``/mcp``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from oracle_core import OraclePlugin, PluginContext, PluginManifest
from oracle_ucan import CapabilityDef, InvocationStore, validate_invocation

__all__ = ["MCP_CALL", "McpInvocationGuard", "ProtectedMcpToolsPlugin", "protected_resource"]

logger = logging.getLogger("oracle.server.ucan")

MCP_CALL = CapabilityDef(can="mcp/call", protocol="ixo:")
"""What a protected tool's invocation claims."""

Outcome = ToolMessage | Command[Any]


def protected_resource(entity_did: str, server: str, tool: str) -> str:
    """The resource an invocation for ``<server>__<tool>`` names (UCAN-28)."""
    return f"ixo:oracle:{entity_did}:mcp/{server}/{tool}"


class McpInvocationGuard(AgentMiddleware[AgentState[Any], Any]):
    """Refuses calls of protected MCP tools without a valid invocation from the user.

    Args:
        servers: The protected servers' names.
        entity_did: ``ORACLE_ENTITY_DID``, in the resource.
        oracle_did: ``ORACLE_DID``, the invocation's audience.
        root_issuers: Who may issue the root of the proof chain.
        store: Single-use record of accepted invocations.
    """

    def __init__(
        self,
        servers: Collection[str],
        *,
        entity_did: str,
        oracle_did: str,
        root_issuers: Collection[str],
        store: InvocationStore,
    ) -> None:
        super().__init__()
        self.servers = frozenset(servers)
        self.entity_did = entity_did
        self.oracle_did = oracle_did
        self.root_issuers = tuple(root_issuers)
        self.store = store

    @property
    def name(self) -> str:
        """``mcp-invocation-guard``."""
        return "mcp-invocation-guard"

    async def _refusal(self, request: ToolCallRequest) -> str | None:
        name = request.tool_call["name"]
        server, separator, tool = name.partition("__")
        if not separator or server not in self.servers:
            return None
        context = getattr(getattr(request.runtime, "context", None), "runtime_context", None)
        user = getattr(context, "user", None)
        invocations = getattr(user, "mcp_invocations", None) or {}
        if not invocations:
            return (
                f"Error: UCAN authorization required for {name}. No invocations provided in "
                "request."
            )
        token = invocations.get(name)
        if token is None:
            return (
                f"Error: UCAN authorization required for {name}. No invocation found for this "
                "tool. Please provide a valid UCAN invocation."
            )
        result = await validate_invocation(
            token,
            MCP_CALL,
            protected_resource(self.entity_did, server, tool),
            audience=self.oracle_did,
            root_issuers=self.root_issuers,
            store=self.store,
        )
        if not result.ok:
            reason = result.error.message if result.error is not None else "invalid invocation"
            logger.info("ucan.mcp_invocation_refused: %s (%s)", name, reason)
            return f"Error: UCAN authorization failed for {name}: {reason}"
        if result.invoker != user.did:  # type: ignore[union-attr]
            logger.info("ucan.mcp_invocation_refused: %s (issued by another principal)", name)
            return (
                f"Error: UCAN authorization failed for {name}: the invocation was not issued "
                "by the user of this request"
            )
        return None

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Outcome]],
    ) -> Outcome:
        """Run the call unless it is a protected tool without a valid invocation."""
        refusal = await self._refusal(request)
        if refusal is None:
            return await handler(request)
        call = request.tool_call
        return ToolMessage(
            content=refusal, tool_call_id=call["id"] or "", name=call["name"], status="error"
        )


class ProtectedMcpToolsPlugin(OraclePlugin):
    """The server's plugin that adds `McpInvocationGuard` (``UCAN_PROTECTED_MCP_SERVERS``)."""

    name = "protected-mcp-tools"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Protected MCP tools",
        summary="Runs protected MCP tools only with the user's UCAN invocation for the call.",
        visibility="silent",
    )

    def __init__(self, guard: McpInvocationGuard) -> None:
        self._guard = guard

    def get_middlewares(self, ctx: PluginContext[Any]) -> list[AgentMiddleware[Any, Any]]:
        """The guard."""
        return [self._guard]
