"""``/mcp``: the oracle's tools for outside MCP clients (plugins spec §20.4).

Off unless ``ORACLE_MCP_EXPOSE=true``. The route sits behind the same pipeline as
``/messages``: authentication, the subscription gate and the per-user throttle apply to
every MCP request (each spends from the user's ``reads`` budget, like any other request),
and each ``tools/call`` also spends one turn from the user's ``turns`` budget, since it
does the work a turn's tool call does.

The tool list is what that user's turn would bind (``OracleRuntime.user_toolset``) minus
the meta-tools, sub-agent wrappers unless ``ORACLE_MCP_EXPOSE_SUB_AGENTS=true``, denied
tools, and tools the policy wants the user to approve: no conversation can pause for
that here, so such a call is refused and never runs. ``readOnlyHint`` /
``destructiveHint`` come from each tool's ``effect``. No client declares browser tools or
AG-UI actions here, so the portal and AG-UI sub-agents are never built.

The MCP SDK's low-level server does the protocol: the stateless 2026-07-28 revision and
the ``initialize`` handshake of the older ones, over streamable HTTP with JSON responses.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from oracle_core import (
    ROUTE_USER_SCOPE_STATE,
    ExposedTool,
    SessionInfo,
    TurnRequest,
    UserInfo,
    UserToolset,
)
from oracle_server._http.routing import LimitedRoute, RouteLimits

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from oracle_server._http.state import ServerState

__all__ = ["MCP_PATH", "McpExposure"]

MCP_PATH = "/mcp"

logger = logging.getLogger("oracle.server.mcp")


def _annotations(tool: ExposedTool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=tool.effect == "read",
        destructive_hint=tool.effect == "destructive",
    )


def _error(text: str, code: str, **meta: Any) -> CallToolResult:
    """A tool error the MCP client sees, with a stable ``code`` in ``_meta``."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        is_error=True,
        meta={"code": code, **meta},
    )


class McpExposure:
    """The ``/mcp`` endpoint: an MCP server over the authenticated user's tools.

    Args:
        state: The booted server (runtime, throttle, turn runner).
        sub_agents: Whether sub-agents' ``call_…`` wrappers are listed
            (``ORACLE_MCP_EXPOSE_SUB_AGENTS``).
    """

    def __init__(self, state: ServerState, *, sub_agents: bool = False) -> None:
        self.state = state
        self.sub_agents = sub_agents
        runtime = state.runtime
        self.server: Server[Any] = Server(
            runtime.identity.name,
            version=version("oracle-server"),
            instructions=runtime.identity.description or None,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=True
        )

    def route(self) -> LimitedRoute:
        """The route serving MCP at ``/mcp`` (POST; GET and DELETE answer 405 themselves)."""
        return LimitedRoute(
            MCP_PATH,
            StreamableHTTPASGIApp(self.manager),
            limits=RouteLimits(),
            methods=["GET", "POST", "DELETE"],
            name="mcp",
            include_in_schema=False,
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the session manager (entered by the app's lifespan)."""
        async with self.manager.run():
            yield

    # -- what a user sees ---------------------------------------------------------------

    def _listed(self, tool: ExposedTool) -> bool:
        if tool.verdict.action != "allow":
            return False
        return self.sub_agents or not tool.sub_agent

    @staticmethod
    def _user(ctx: ServerRequestContext[Any]) -> UserInfo:
        request = ctx.request
        user = getattr(request, "scope", {}).get("state", {}).get(ROUTE_USER_SCOPE_STATE)
        if not isinstance(user, UserInfo):  # the pipeline authenticates every /mcp request
            raise MCPError(INVALID_PARAMS, "not authenticated", {"code": "mcp.unauthenticated"})
        return user

    @contextlib.asynccontextmanager
    async def _toolset(self, user: UserInfo) -> AsyncIterator[UserToolset]:
        runner = self.state.runner
        delegation = await runner.delegation_for(user.did, user.ucan_delegation)
        turn = TurnRequest(
            user=UserInfo(did=user.did, ucan_delegation=delegation, timezone=user.timezone),
            session=SessionInfo(id=f"mcp-{uuid.uuid4().hex}", request_id=None),
        )
        scope = runner.user_scope(user.did) if runner.user_scope else contextlib.nullcontext()
        async with scope:
            yield await self.state.runtime.user_toolset(turn)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        async with self._toolset(self._user(ctx)) as toolset:
            tools = [
                Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=dict(tool.input_schema),
                    annotations=_annotations(tool),
                )
                for tool in toolset.tools.values()
                if self._listed(tool)
            ]
        return ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        user = self._user(ctx)
        throttled = await self._spend_turn(user.did)
        if throttled is not None:
            return throttled
        async with self._toolset(user) as toolset:
            tool = toolset.tools.get(params.name)
            if tool is None or not self._listed(tool):
                if tool is not None and tool.verdict.action == "approve":
                    outcome = await toolset.call(params.name, params.arguments)
                    return _error(outcome.text, "tool.approval_required")
                raise MCPError(
                    INVALID_PARAMS,
                    f"Unknown tool: {params.name}",
                    {"code": "mcp.unknown_tool"},
                )
            outcome = await toolset.call(params.name, params.arguments)
        logger.info("mcp tool call %s (error: %s)", params.name, outcome.is_error)
        return CallToolResult(
            content=[TextContent(type="text", text=outcome.text)], is_error=outcome.is_error
        )

    async def _spend_turn(self, did: str) -> CallToolResult | None:
        """Count the call in the user's ``turns`` budget; the refusal when it is spent."""
        retry_after = await self.state.spend_turn(did)
        if retry_after is None:
            return None
        return _error(
            f"Too many tool calls: try again in {retry_after} s.",
            "mcp.rate_limited",
            retryAfter=retry_after,
        )
