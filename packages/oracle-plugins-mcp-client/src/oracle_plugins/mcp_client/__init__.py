"""oracle-plugins-mcp-client: the MCP hub (plugin ``mcp-client``).

``plugin`` is the instance the ``oracle.plugins`` entry point ``mcp-client`` names.
"""

from oracle_plugins.mcp_client._config import (
    McpClientConfig,
    McpServerSpec,
    UcanGrant,
    parse_servers,
)
from oracle_plugins.mcp_client._plugin import McpClientPlugin, ServerStatus

__version__ = "0.1.0"

plugin = McpClientPlugin()
"""The bundled instance (default options)."""

__all__ = [
    "McpClientConfig",
    "McpClientPlugin",
    "McpServerSpec",
    "ServerStatus",
    "UcanGrant",
    "parse_servers",
    "plugin",
]
