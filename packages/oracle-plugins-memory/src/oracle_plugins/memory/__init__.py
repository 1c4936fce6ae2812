"""oracle-plugins-memory: the always-visible memory plugin of the oracle.

``plugin`` is the instance the ``oracle.plugins`` entry point ``memory`` names; pass your
own ``MemoryPlugin(...)`` in ``plugins=`` to change its options.
"""

from oracle_plugins.memory._config import Backend, MemoryConfig, select_backend, wants_memory
from oracle_plugins.memory._embedding import PACKAGED_MODEL_ID, Embedder, load_embedder
from oracle_plugins.memory._ingest import HistoryIngestionMiddleware, turn_messages
from oracle_plugins.memory._names import (
    DEFAULT_SELECTED_TOOLS,
    MAIN_AGENT_ONLY,
    TOOL_PREFIX,
    WIRE_TOOLS,
)
from oracle_plugins.memory._plugin import MEMORY_DATABASE_NAME, MemoryPlugin, UserContextReader
from oracle_plugins.memory._slots import SLOT_NAMES, SLOTS, SlotQuery, batch_request, format_slot
from oracle_plugins.memory._store import EmbeddedMemoryStore, SearchResult

__version__ = "0.1.0"

plugin = MemoryPlugin()
"""The bundled instance (default options)."""

__all__ = [
    "DEFAULT_SELECTED_TOOLS",
    "MAIN_AGENT_ONLY",
    "MEMORY_DATABASE_NAME",
    "PACKAGED_MODEL_ID",
    "SLOTS",
    "SLOT_NAMES",
    "TOOL_PREFIX",
    "WIRE_TOOLS",
    "Backend",
    "EmbeddedMemoryStore",
    "Embedder",
    "HistoryIngestionMiddleware",
    "MemoryConfig",
    "MemoryPlugin",
    "SearchResult",
    "SlotQuery",
    "UserContextReader",
    "batch_request",
    "format_slot",
    "load_embedder",
    "plugin",
    "select_backend",
    "turn_messages",
    "wants_memory",
]
