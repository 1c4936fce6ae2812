"""The Tool Router's meta-tools: the only Composio tools the plugin ever binds."""

from __future__ import annotations

from collections.abc import Mapping

from oracle_core import Effect

__all__ = [
    "GET_TOOL_SCHEMAS",
    "MANAGE_CONNECTIONS",
    "META_TOOLS",
    "MULTI_EXECUTE_TOOL",
    "SEARCH_TOOLS",
]

MANAGE_CONNECTIONS = "COMPOSIO_MANAGE_CONNECTIONS"
SEARCH_TOOLS = "COMPOSIO_SEARCH_TOOLS"
GET_TOOL_SCHEMAS = "COMPOSIO_GET_TOOL_SCHEMAS"
MULTI_EXECUTE_TOOL = "COMPOSIO_MULTI_EXECUTE_TOOL"

META_TOOLS: Mapping[str, Effect] = {
    MANAGE_CONNECTIONS: "write",  # starts an auth connection for the user
    SEARCH_TOOLS: "read",
    GET_TOOL_SCHEMAS: "read",
    MULTI_EXECUTE_TOOL: "write",  # runs app tools, which act in the user's accounts
}
"""The four meta-tools, in the order they are bound, and the effect of each.

Whatever else a session lists (app tools such as ``GMAIL_SEND_EMAIL``, the remote
workbench) is never bound: app tools run only through ``COMPOSIO_MULTI_EXECUTE_TOOL``.
"""
