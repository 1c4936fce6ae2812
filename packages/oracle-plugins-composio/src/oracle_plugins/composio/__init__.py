"""oracle-plugins-composio: the user's SaaS apps through Composio's Tool Router.

``plugin`` is the instance the ``oracle.plugins`` entry point ``composio`` names; pass
your own ``ComposioPlugin(...)`` in ``plugins=`` to change its options. The protocol
double of the IXO composio-worker is in ``oracle_plugins.composio.testing``.
"""

from oracle_plugins.composio._auth import COMPOSIO_ABILITY, COMPOSIO_CAPABILITY
from oracle_plugins.composio._cache import SessionCache, SessionKey
from oracle_plugins.composio._client import (
    API_PREFIX,
    MetaToolDefinition,
    WorkerClient,
    WorkerError,
    WorkerSession,
)
from oracle_plugins.composio._config import DEFAULT_BASE_URL, ComposioConfig, wants_composio
from oracle_plugins.composio._envelope import (
    ENVELOPE_ERROR_CODE,
    ENVELOPE_EXAMPLE,
    ENVELOPE_SCHEMA,
    check_envelope,
)
from oracle_plugins.composio._names import (
    GET_TOOL_SCHEMAS,
    MANAGE_CONNECTIONS,
    META_TOOLS,
    MULTI_EXECUTE_TOOL,
    SEARCH_TOOLS,
)
from oracle_plugins.composio._plugin import MANIFEST, ComposioPlugin
from oracle_plugins.composio._prompt import composio_block
from oracle_plugins.composio._session import DEGRADED_LABEL

__version__ = "0.1.0"

plugin = ComposioPlugin()
"""The instance the ``oracle.plugins`` entry point ``composio`` names."""

__all__ = [
    "API_PREFIX",
    "COMPOSIO_ABILITY",
    "COMPOSIO_CAPABILITY",
    "DEFAULT_BASE_URL",
    "DEGRADED_LABEL",
    "ENVELOPE_ERROR_CODE",
    "ENVELOPE_EXAMPLE",
    "ENVELOPE_SCHEMA",
    "GET_TOOL_SCHEMAS",
    "MANAGE_CONNECTIONS",
    "MANIFEST",
    "META_TOOLS",
    "MULTI_EXECUTE_TOOL",
    "SEARCH_TOOLS",
    "ComposioConfig",
    "ComposioPlugin",
    "MetaToolDefinition",
    "SessionCache",
    "SessionKey",
    "WorkerClient",
    "WorkerError",
    "WorkerSession",
    "check_envelope",
    "composio_block",
    "plugin",
    "wants_composio",
]
