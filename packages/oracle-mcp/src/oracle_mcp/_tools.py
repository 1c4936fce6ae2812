"""An MCP server's tools as plugin tools: bound verbatim, called with the user's headers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from oracle_core import Effect, PluginTool, RuntimeContext
from oracle_mcp._auth import AuthFailure, HeaderSource
from oracle_mcp._client import McpClient, McpToolDefinition, McpUnavailableError, render_result

__all__ = ["ArgumentHook", "bound_name", "mcp_plugin_tools"]

ArgumentHook = Callable[[McpToolDefinition, dict[str, Any], RuntimeContext[Any]], dict[str, Any]]
"""``(tool, arguments, rt_ctx) -> arguments`` sent instead (e.g. narrowed to a data scope)."""

_ERROR_CHARS = 1000
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


def mcp_plugin_tools(
    client: McpClient,
    definitions: Iterable[McpToolDefinition],
    *,
    headers: HeaderSource,
    prefix: str = "",
    label: str | None = None,
    effect: Callable[[McpToolDefinition], Effect] | None = None,
    arguments: ArgumentHook | None = None,
    capability: str | None = None,
) -> list[PluginTool]:
    """Plugin tools that call ``client``'s tools.

    Each keeps the server's JSON schema verbatim (the runtime validates the model's
    arguments against it before the call), its description, and an ``effect`` from its
    annotations. A call that cannot be made (no authorisation, server down, refused, too
    slow) returns ``{"ok": False, "error": …}`` for the model instead of raising, and so
    does a result the server marks as an error.

    Args:
        client: The server.
        definitions: The tools to bind (from ``client.list_tools``), in order.
        headers: The caller's headers for each call.
        prefix: Put before each wire name (``memory-engine__``, ``<server>__``).
        label: How errors name the service to the model (default: the client's name).
        effect: Overrides the annotation-derived effect.
        arguments: Rewrites the arguments before they are sent.
        capability: The plugin-declared capability the tools belong to.

    A wire name that is not a valid tool name (``^[A-Za-z0-9_-]{1,64}$`` with the prefix)
    is bound with its other characters as ``_`` and cut to 64; a name that then clashes
    with an earlier one is left out.
    """
    service = label or f"the {client.name} service"
    tools: list[PluginTool] = []
    taken: set[str] = set()
    for definition in definitions:
        name = bound_name(prefix, definition.name)
        if name in taken:
            continue
        taken.add(name)
        tools.append(
            _tool(client, definition, headers, name, service, effect, arguments, capability)
        )
    return tools


def bound_name(prefix: str, wire: str) -> str:
    """``prefix + wire`` as a valid tool name (other characters as ``_``, at most 64)."""
    return _INVALID.sub("_", prefix + wire)[:64]


def _tool(
    client: McpClient,
    definition: McpToolDefinition,
    headers: HeaderSource,
    name: str,
    service: str,
    effect: Callable[[McpToolDefinition], Effect] | None,
    arguments: ArgumentHook | None,
    capability: str | None,
) -> PluginTool:
    wire = definition.name

    async def call(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        payload = args.model_dump() if isinstance(args, BaseModel) else dict(args)
        if arguments is not None:
            payload = arguments(definition, payload, rt_ctx)
        sent = await headers(rt_ctx)
        if isinstance(sent, AuthFailure):
            rt_ctx.logger.warning("MCP tool %s not called: %s", wire, sent.reason)
            return {
                "ok": False,
                "error": f"{service.capitalize()} is unavailable for this request: "
                "no authorisation for it. Tell the user if they asked for it.",
            }
        try:
            result = await client.call_tool(wire, payload, sent)
        except McpUnavailableError as exc:
            rt_ctx.logger.warning("MCP tool %s failed: %s", wire, exc)
            if exc.timed_out:
                seconds = client.timeout_for(wire)
                return {
                    "ok": False,
                    "error": f"{wire} did not finish within {seconds:g} s; "
                    "it may still complete on the server.",
                }
            return {"ok": False, "error": f"{service.capitalize()} is unavailable ({exc})."}
        text = render_result(result)
        if result.is_error:
            return {"ok": False, "error": text[:_ERROR_CHARS] or f"{service} refused."}
        return text

    return PluginTool(
        name=name,
        description=definition.description,
        # The server's schema, verbatim: the runtime validates the arguments against it.
        args_schema=dict(definition.input_schema),
        handler=call,
        effect=effect(definition) if effect is not None else definition.effect,
        capability=capability,
    )
