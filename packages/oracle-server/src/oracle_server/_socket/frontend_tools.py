"""``frontend-tools``: the client's browser tools and AG-UI actions as tools of the turn.

A message can carry ``tools`` (browser tools) and ``agActions`` (AG-UI actions); the
server puts them in the turn state as ``browser_tools`` and ``ag_actions``. This bundled
plugin turns each into a request-time tool whose handler runs it in the client of the
session over socket.io and returns the client's result to the model (SRV-51).

A call runs in one client of the session (the turn's socket, else the newest). A client
that answers with an error, none connected, or no answer in time fails the tool call with
that text; the turn goes on. These tools may change what the user sees, so they are ``write`` tools
and never re-run by ``tool-retry``. They are ``overridable``: one named like a server tool
is dropped for the turn with a ``warning`` event, and the server tool is used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from oracle_core import OraclePlugin, PluginManifest, PluginTool, RuntimeContext

__all__ = ["FrontendToolCaller", "FrontendToolsPlugin", "tool_schema"]

logger = logging.getLogger("oracle.server.frontend_tools")


class FrontendToolCaller(Protocol):
    """Runs a tool in the client of a session (the socket.io gateway)."""

    async def call_browser_tool(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """Run a browser tool and return its result."""
        ...

    async def call_action(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """Run an AG-UI action and return its result."""
        ...


def tool_schema(schema: Any) -> dict[str, Any]:
    """The client's JSON schema as a tool's argument schema: an object schema.

    A schema without ``type`` is taken as an object; an object without ``properties``
    gets an empty one (some providers require the key).
    """
    result = dict(schema) if isinstance(schema, Mapping) else {}
    result.setdefault("type", "object")
    if result["type"] == "object":
        result.setdefault("properties", {})
    return result


def _specs(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, Mapping)]


class FrontendToolsPlugin(OraclePlugin):
    """Gives the model the turn's browser tools and AG-UI actions.

    Args:
        caller: Runs the calls in the client (the ``SocketGateway``).
    """

    name = "frontend-tools"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Client tools",
        summary="Runs the browser tools and AG-UI actions that the user's client offers.",
        visibility="silent",
    )

    def __init__(self, caller: FrontendToolCaller) -> None:
        self._caller = caller

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """One tool per ``browser_tools`` and ``ag_actions`` entry of the turn state."""
        state = rt_ctx.history.state
        tools: list[PluginTool] = []
        for spec in _specs(state.get("browser_tools")):
            tool = self._tool(spec, action=False)
            if tool is not None:
                tools.append(tool)
        for spec in _specs(state.get("ag_actions")):
            tool = self._tool(spec, action=True)
            if tool is not None:
                tools.append(tool)
        return tools

    def _tool(self, spec: Mapping[str, Any], *, action: bool) -> PluginTool | None:
        tool_name = str(spec.get("name") or "")
        caller = self._caller

        async def run(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
            call = caller.call_action if action else caller.call_browser_tool
            return await call(
                rt_ctx.session.id,
                tool_name,
                dict(args) if isinstance(args, Mapping) else {},
                request_id=rt_ctx.session.request_id,
                socket_id=rt_ctx.session.ws_id,
            )

        try:
            return PluginTool(
                name=tool_name,
                description=str(spec.get("description") or tool_name),
                args_schema=tool_schema(spec.get("schema")),
                handler=run,
                effect="write",
                # A client's tool never replaces one of the oracle's (a memory tool,
                # `set_user_preferences`): the oracle's is used, the client is warned.
                overridable=True,
            )
        except ValidationError as exc:
            kind = "AG-UI action" if action else "browser tool"
            logger.warning("%s %r skipped: %s", kind, tool_name, exc.errors()[0]["msg"])
            return None
