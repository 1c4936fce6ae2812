"""``McpClientPlugin``: the MCP hub (plugins spec §20.3)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

from oracle_core import (
    OraclePlugin,
    PluginCapability,
    PluginContext,
    PluginTool,
    RuntimeContext,
)
from oracle_mcp import (
    AuthFailure,
    HeaderSource,
    McpClient,
    McpToolDefinition,
    McpUnavailableError,
    UcanInvocationAuth,
    mcp_plugin_tools,
    no_auth,
)
from oracle_plugins.mcp_client._config import McpClientConfig, McpServerSpec, wants_servers

__all__ = ["McpClientPlugin", "ServerStatus"]

State = Literal["unknown", "up", "down", "unauthorised"]


@dataclass
class ServerStatus:
    """What the hub last saw of one server.

    Attributes:
        name: The server's name.
        url: Its endpoint.
        state: ``unknown`` before the first listing, ``up``, ``down`` (unreachable or
            refusing) or ``unauthorised`` (no headers could be made for the last user).
        protocol: The negotiated revision.
        tools: How many of its tools are bound (after ``allow`` / ``deny``).
        error: Why it is not up (names the server, never headers).
    """

    name: str
    url: str
    state: State = "unknown"
    protocol: str | None = None
    tools: int = 0
    error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "url": self.url,
            "state": self.state,
            "protocol": self.protocol,
            "tools": self.tools,
            "error": self.error,
        }


@dataclass
class _Server:
    spec: McpServerSpec
    client: McpClient
    headers: HeaderSource
    status: ServerStatus = field(init=False)

    def __post_init__(self) -> None:
        self.status = ServerStatus(self.spec.name, self.spec.url)

    def wanted(self, tool: McpToolDefinition) -> bool:
        spec = self.spec
        if any(fnmatchcase(tool.name, p) for p in spec.deny):
            return False
        return any(fnmatchcase(tool.name, p) for p in spec.allow)


def _headers(spec: McpServerSpec) -> HeaderSource:
    if spec.auth == "none":
        return no_auth(spec.headers)
    grant = spec.auth.ucan
    return UcanInvocationAuth(spec.url, grant.capability, grant.can, static=spec.headers)


def _capability(spec: McpServerSpec) -> PluginCapability:
    title = spec.title or spec.name
    summary = spec.summary or f"Tools of the MCP server '{spec.name}'."
    return PluginCapability(
        name=spec.name,
        manifest={
            "title": title,
            "summary": summary,
            "when_to_use": spec.when_to_use or [summary],
            "tags": spec.tags,
            "visibility": "on-demand" if spec.on_demand else "always",
        },
    )


class McpClientPlugin(OraclePlugin):
    """Binds the tools of every server in ``ORACLE_MCP_SERVERS``, for each user.

    Each server is a capability of its own, named like the server: its tools are
    ``<server>__<tool>``, visible on every turn, or found through ``list_capabilities`` /
    ``load_capability`` when the server is ``on_demand``. Schemas are bound verbatim and
    validated before a call is sent; ``effect`` comes from the server's annotations, so a
    tool annotated destructive waits for the user's approval. Each request lists and
    calls with that user's headers (a fresh UCAN invocation per call with ``ucan`` auth).
    A server that cannot be reached contributes nothing, is named in the turn's
    "Degraded Services" section and in ``status()``, and never fails the turn.

    Args:
        reconnect_attempts: Reconnections after a failed connection.
        reconnect_delay: Seconds between them.
        tools_ttl: Seconds a server's tool list is reused.
        down_ttl: Seconds an unreachable server is not asked again.
    """

    name = "mcp-client"
    version = "0.1.0"
    config_schema = McpClientConfig
    auto_detect_hint = "ORACLE_MCP_SERVERS lists at least one server"
    # The hub has no tools of its own: each server is listed as its own capability.
    manifest = {
        "title": "MCP servers",
        "summary": "Tools of the external MCP servers this oracle is configured with.",
        "visibility": "silent",
        "category": "integration",
        "tags": ["mcp"],
        "stability": "beta",
    }

    def __init__(
        self,
        *,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        tools_ttl: float = 300.0,
        down_ttl: float = 30.0,
    ) -> None:
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.tools_ttl = tools_ttl
        self.down_ttl = down_ttl
        self._servers: dict[str, _Server] = {}

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On when ``ORACLE_MCP_SERVERS`` lists a server."""
        return wants_servers(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[McpClientConfig]) -> AsyncIterator[None]:
        """One client per server; closed at shutdown."""
        servers = {
            spec.name: _Server(
                spec,
                McpClient(
                    spec.url,
                    name=spec.name,
                    tool_timeout=spec.tool_timeout,
                    reconnect_attempts=self.reconnect_attempts,
                    reconnect_delay=self.reconnect_delay,
                    tools_ttl=self.tools_ttl,
                    down_ttl=self.down_ttl,
                ),
                _headers(spec),
            )
            for spec in ctx.plugin_config.servers
        }
        self._servers = servers
        ctx.logger.info("mcp-client: %d servers (%s)", len(servers), ", ".join(servers))
        try:
            yield
        finally:
            self._servers = {}
            await asyncio.gather(*(s.client.aclose() for s in servers.values()))

    def get_capabilities(self, ctx: PluginContext[McpClientConfig]) -> list[PluginCapability]:
        """One capability per server."""
        return [_capability(spec) for spec in ctx.plugin_config.servers]

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """Every reachable server's tools, listed with this user's headers."""
        servers = list(self._servers.values())
        bound = await asyncio.gather(*(self._server_tools(s, rt_ctx) for s in servers))
        return [tool for tools in bound for tool in tools]

    async def _server_tools(self, server: _Server, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        name, status = server.spec.name, server.status
        headers = await server.headers(rt_ctx)
        if isinstance(headers, AuthFailure):
            status.state, status.error = "unauthorised", headers.reason
            rt_ctx.logger.warning("MCP server %s skipped: %s", name, headers.reason)
            rt_ctx.report_degraded(f"MCP server {name}: no authorisation for this user")
            return []
        try:
            listed = await server.client.list_tools(headers)
        except McpUnavailableError as exc:
            status.state, status.error = "down", str(exc)
            rt_ctx.logger.warning("MCP server %s unavailable: %s", name, exc)
            rt_ctx.report_degraded(f"MCP server {name} unavailable")
            return []
        tools = mcp_plugin_tools(
            server.client,
            [t for t in listed if server.wanted(t)],
            headers=server.headers,
            prefix=f"{name}__",
            label=f"the MCP server {name}",
            capability=name,
        )
        status.state, status.error = "up", None
        status.protocol = server.client.protocol_version
        status.tools = len(tools)
        return tools

    def status(self) -> list[ServerStatus]:
        """What was last seen of each server, in configuration order."""
        return [s.status for s in self._servers.values()]
