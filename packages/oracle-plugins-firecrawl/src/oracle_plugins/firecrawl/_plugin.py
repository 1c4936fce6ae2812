"""``FirecrawlPlugin``: the Firecrawl Agent, over a Firecrawl MCP server (03-plugins §4)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from oracle_core import (
    Effect,
    OraclePlugin,
    PluginContext,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
)
from oracle_mcp import McpClient, McpToolDefinition, McpUnavailableError, mcp_plugin_tools, no_auth
from oracle_plugins.firecrawl._config import FirecrawlConfig, wants_firecrawl
from oracle_plugins.firecrawl._prompts import (
    MANIFEST,
    SUB_AGENT_DESCRIPTION,
    SUB_AGENT_NAME,
    SUB_AGENT_TOOL,
    SUB_AGENT_TOOLS,
    sub_agent_prompt,
)
from oracle_plugins.firecrawl._untrusted import UntrustedAnswerMiddleware, mark_untrusted

__all__ = ["FirecrawlPlugin"]

_HEADERS = no_auth()  # the server is the oracle's, not the user's: no per-user auth


@dataclass
class _Shared:
    """One server's client and how many running runtimes use it."""

    client: McpClient
    users: int = 0


def _read(definition: McpToolDefinition) -> Effect:
    # Search and scrape only read the web, whatever the server annotates (§4 item 3).
    return "read"


def _marked(tool: PluginTool) -> PluginTool:
    """``tool`` whose successful (text) results are marked as untrusted web content."""
    inner = tool.handler
    source = tool.name

    async def handler(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        result = inner(args, rt_ctx)
        if inspect.isawaitable(result):
            result = await result
        # Failures are the plugin's own {ok: false, error} objects: they stay as they are.
        return mark_untrusted(result, source=source) if isinstance(result, str) else result

    return tool.model_copy(update={"handler": handler})


class FirecrawlPlugin(OraclePlugin):
    """Web search and page reading through the ``call_firecrawl_agent`` sub-agent.

    The sub-agent holds exactly ``firecrawl_search`` and ``firecrawl_scrape`` of the
    Firecrawl MCP server at ``FIRECRAWL_MCP_URL``, with the server's own schemas; every
    other tool of the server is left out, and the main agent gets no Firecrawl tool of its
    own. The tools are listed on every agent build (the client reuses a listing for
    ``tools_ttl`` seconds); when the server cannot be reached the sub-agent is absent for
    that turn and "Firecrawl Agent" is listed under the prompt's degraded services. Web
    content is untrusted: tool results reach the sub-agent, and its answer reaches the
    main agent, inside a delimited block marked as data (``mark_untrusted``).

    Args:
        tool_timeout: Seconds a search or scrape may take.
        reconnect_attempts: Reconnections after a failed connection.
        reconnect_delay: Seconds between them.
        tools_ttl: Seconds a tool listing is reused.
        down_ttl: Seconds an unreachable server is not asked again (the reconnect delays
            are paid once, not on every turn).
    """

    name = "firecrawl"
    version = "0.1.0"
    manifest = MANIFEST
    config_schema = FirecrawlConfig
    auto_detect_hint = "FIRECRAWL_MCP_URL is set"

    def __init__(
        self,
        *,
        tool_timeout: float = 120.0,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        tools_ttl: float = 300.0,
        down_ttl: float = 30.0,
    ) -> None:
        self.tool_timeout = tool_timeout
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.tools_ttl = tools_ttl
        self.down_ttl = down_ttl
        # One instance may serve several runtimes in a process (the entry point names a
        # module-level instance); runtimes on the same server share its client.
        self._clients: dict[str, _Shared] = {}

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On when ``FIRECRAWL_MCP_URL`` is set; there is no embedded backend."""
        return wants_firecrawl(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[FirecrawlConfig]) -> AsyncIterator[None]:
        """Open (or share) the server's MCP client; close it with its last runtime."""
        url = ctx.plugin_config.FIRECRAWL_MCP_URL
        shared = self._clients.get(url)
        if shared is None:
            shared = self._clients[url] = _Shared(
                McpClient(
                    url,
                    name="firecrawl",
                    tool_timeout=self.tool_timeout,
                    reconnect_attempts=self.reconnect_attempts,
                    reconnect_delay=self.reconnect_delay,
                    tools_ttl=self.tools_ttl,
                    down_ttl=self.down_ttl,
                )
            )
        shared.users += 1
        # The URL is not logged: the hosted server's carries the API key.
        ctx.logger.info("firecrawl: Firecrawl MCP server configured")
        try:
            yield
        finally:
            shared.users -= 1
            if shared.users == 0:
                self._clients.pop(url, None)
                await shared.client.aclose()

    def get_middlewares(
        self, ctx: PluginContext[FirecrawlConfig]
    ) -> list[AgentMiddleware[Any, Any]]:
        """Marks the Firecrawl Agent's answers as web content for the main agent."""
        return [UntrustedAnswerMiddleware(SUB_AGENT_TOOL, SUB_AGENT_NAME)]

    async def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        """The Firecrawl Agent over the server's search and scrape tools, or nothing."""
        config = rt_ctx.plugin_config
        shared = self._clients.get(config.FIRECRAWL_MCP_URL) if config is not None else None
        if shared is None:
            return []
        client = shared.client
        try:
            listed = await client.list_tools({})
        except McpUnavailableError as exc:
            rt_ctx.logger.warning("firecrawl: Firecrawl Agent unavailable this turn: %s", exc)
            rt_ctx.report_degraded(SUB_AGENT_NAME)
            return []
        offered = {definition.name: definition for definition in listed}
        chosen = [offered[name] for name in SUB_AGENT_TOOLS if name in offered]
        missing = [name for name in SUB_AGENT_TOOLS if name not in offered]
        if not chosen:
            rt_ctx.logger.warning("firecrawl: the server lists neither %s", " nor ".join(missing))
            rt_ctx.report_degraded(SUB_AGENT_NAME)
            return []
        if missing:
            rt_ctx.logger.warning("firecrawl: the server does not list %s", ", ".join(missing))
        tools = mcp_plugin_tools(
            client,
            chosen,
            headers=_HEADERS,
            label="the Firecrawl server",
            effect=_read,
        )
        return [
            PluginSubAgent(
                name=SUB_AGENT_NAME,
                description=SUB_AGENT_DESCRIPTION,
                system_prompt=sub_agent_prompt([tool.name for tool in tools]),
                tools=[_marked(tool) for tool in tools],
                model="subagent",
            )
        ]
