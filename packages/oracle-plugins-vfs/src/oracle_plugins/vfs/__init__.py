"""oracle-plugins-vfs: the user's files for the oracle (03-plugins §17).

``plugin`` is the instance the ``oracle.plugins`` entry point ``vfs`` names; pass your own
``VfsPlugin(...)`` in ``plugins=`` to change its options. Other plugins reach the
request's files through the shared-state key ``vfsFiles`` (a :class:`VfsFiles`). The
protocol doubles are in ``oracle_plugins.vfs.testing``.
"""

from oracle_plugins.vfs._backend import (
    DeleteResult,
    FileInfo,
    GrepMatch,
    Node,
    ReadWindow,
    SearchHit,
    SearchResult,
    VfsBackend,
    VfsError,
    VfsErrorKind,
)
from oracle_plugins.vfs._config import (
    MAX_READ_LINES_CAP,
    UCAN_STORE_URLS,
    VFS_URLS,
    VfsConfig,
    VfsReads,
    wants_remote,
)
from oracle_plugins.vfs._delegations import (
    STORE_ABILITY,
    VFS_CAPABILITY,
    DelegationCache,
    StoredDelegation,
)
from oracle_plugins.vfs._files import VfsFiles
from oracle_plugins.vfs._manifest import MANIFEST, OPERATING_GUIDE
from oracle_plugins.vfs._paths import MAX_PATH, check_path, parent_of
from oracle_plugins.vfs._plugin import DEGRADED_LABEL, VfsPlugin
from oracle_plugins.vfs._remote import INVOCATION_TTL_SECONDS, RemoteVfs
from oracle_plugins.vfs._tools import GRANT_STEPS, TOOL_NAMES, error_text, mime_type_for

__version__ = "0.1.0"

plugin = VfsPlugin()
"""The instance the ``oracle.plugins`` entry point ``vfs`` names (default options)."""

__all__ = [
    "DEGRADED_LABEL",
    "GRANT_STEPS",
    "INVOCATION_TTL_SECONDS",
    "MANIFEST",
    "MAX_PATH",
    "MAX_READ_LINES_CAP",
    "OPERATING_GUIDE",
    "STORE_ABILITY",
    "TOOL_NAMES",
    "UCAN_STORE_URLS",
    "VFS_CAPABILITY",
    "VFS_URLS",
    "DelegationCache",
    "DeleteResult",
    "FileInfo",
    "GrepMatch",
    "Node",
    "ReadWindow",
    "RemoteVfs",
    "SearchHit",
    "SearchResult",
    "StoredDelegation",
    "VfsBackend",
    "VfsConfig",
    "VfsError",
    "VfsErrorKind",
    "VfsFiles",
    "VfsPlugin",
    "VfsReads",
    "check_path",
    "error_text",
    "mime_type_for",
    "parent_of",
    "plugin",
    "wants_remote",
]
