"""The oracle's MCP client, shared by every MCP-backed plugin.

``McpClient`` lists and calls one server's tools over streamable HTTP (the stateless
2026-07-28 revision, or the handshake of older servers, negotiated once), with the
caller's headers on every request, a per-tool timeout, and reconnects only when no
connection was made. ``UcanInvocationAuth`` mints those headers per user;
``mcp_plugin_tools`` binds the tools as plugin tools, schemas verbatim and ``effect``
from the server's annotations.
"""

from oracle_mcp._auth import AuthFailure, HeaderSource, UcanInvocationAuth, no_auth
from oracle_mcp._client import McpClient, McpToolDefinition, McpUnavailableError, render_result
from oracle_mcp._tools import ArgumentHook, bound_name, mcp_plugin_tools

__all__ = [
    "ArgumentHook",
    "AuthFailure",
    "HeaderSource",
    "McpClient",
    "McpToolDefinition",
    "McpUnavailableError",
    "UcanInvocationAuth",
    "bound_name",
    "mcp_plugin_tools",
    "no_auth",
    "render_result",
]
