"""A session's meta-tools as plugin tools.

Each keeps the session's description and input schema (bound verbatim, not pinned),
except ``COMPOSIO_MULTI_EXECUTE_TOOL``, whose envelope is the one pinned shape: it is
bound with ``ENVELOPE_SCHEMA`` and checked before any request. Whatever else the session
lists (app tools, the remote workbench) is left out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from oracle_core import PluginTool, RuntimeContext
from oracle_plugins.composio._client import MetaToolDefinition
from oracle_plugins.composio._envelope import (
    ENVELOPE_ERROR_CODE,
    ENVELOPE_EXAMPLE,
    ENVELOPE_SCHEMA,
    check_envelope,
)
from oracle_plugins.composio._names import META_TOOLS, MULTI_EXECUTE_TOOL

__all__ = ["Executor", "build_meta_tools"]

Executor = Callable[[RuntimeContext[Any], str, dict[str, Any]], Awaitable[Any]]
"""``(rt_ctx, slug, arguments) -> result``: runs one meta-tool on the user's session."""

_FALLBACK_DESCRIPTIONS = {
    "COMPOSIO_MANAGE_CONNECTIONS": "Connect the user's account of an app (toolkit).",
    "COMPOSIO_SEARCH_TOOLS": "Find the Composio tools (slugs) that do an action.",
    "COMPOSIO_GET_TOOL_SCHEMAS": "Get the input schemas of Composio tools by slug.",
    MULTI_EXECUTE_TOOL: "Run Composio app tools by slug.",
}


def build_meta_tools(
    definitions: Iterable[MetaToolDefinition], execute: Executor
) -> list[PluginTool]:
    """The meta-tools among ``definitions``, in ``META_TOOLS`` order, each calling
    ``execute``."""
    by_slug: dict[str, MetaToolDefinition] = {}
    for definition in definitions:
        if definition.slug in META_TOOLS:
            by_slug.setdefault(definition.slug, definition)
    return [_tool(by_slug[slug], execute) for slug in META_TOOLS if slug in by_slug]


def _tool(definition: MetaToolDefinition, execute: Executor) -> PluginTool:
    slug = definition.slug
    description = definition.description.strip() or _FALLBACK_DESCRIPTIONS[slug]
    schema: Mapping[str, Any] = definition.input_schema
    if slug == MULTI_EXECUTE_TOOL:
        schema = ENVELOPE_SCHEMA
        description = f"{description}\nArguments are exactly {ENVELOPE_EXAMPLE}"

    async def call(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        if isinstance(args, BaseModel):
            payload: Any = args.model_dump()
        elif isinstance(args, Mapping):
            payload = dict(args)
        else:
            payload = args
        if slug == MULTI_EXECUTE_TOOL:
            problem = check_envelope(payload)
            if problem is not None:
                return {"ok": False, "code": ENVELOPE_ERROR_CODE, "error": problem}
        if not isinstance(payload, dict):
            return {
                "ok": False,
                "code": "composio.invalid_arguments",
                "error": f"{slug} takes a JSON object of arguments.",
            }
        return await execute(rt_ctx, slug, payload)

    return PluginTool(
        name=slug,
        description=description,
        args_schema=dict(schema),
        handler=call,
        effect=META_TOOLS[slug],
    )
