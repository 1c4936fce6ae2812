"""``sandbox``: the user's sandbox, its tools passed through per request (03-plugins §7).

A hosted sandbox at ``SANDBOX_MCP_URL``, reached with the user's UCAN invocation, or the
embedded ``oracle-sandbox`` server started beside the oracle with
``SANDBOX_BACKEND=embedded`` (bubblewrap isolation, for one machine).
"""

from oracle_plugins.sandbox._config import SandboxConfig
from oracle_plugins.sandbox._embedded import EmbeddedSandbox
from oracle_plugins.sandbox._files import SandboxFileError, SandboxFiles
from oracle_plugins.sandbox._plugin import MANAGEMENT_PREFIX, WORKSPACE_DATA, SandboxPlugin

__all__ = [
    "MANAGEMENT_PREFIX",
    "WORKSPACE_DATA",
    "EmbeddedSandbox",
    "SandboxConfig",
    "SandboxFileError",
    "SandboxFiles",
    "SandboxPlugin",
    "plugin",
]

plugin = SandboxPlugin()
"""The instance the ``oracle.plugins`` entry point ``sandbox`` names."""
