"""Persistence of the oracle server: one SQL database plus LangGraph checkpointers.

Embedded mode (``DATABASE_URL`` unset or ``sqlite…``) keeps the server database in
``<SQLITE_DATABASE_PATH>/oracle.db`` and one file per user with that user's sessions and
checkpoints; shared mode
(``postgresql://…``) keeps both in PostgreSQL, as several replicas need (SRV-55).
"""

from __future__ import annotations

from oracle_server._persistence.approvals import ApprovalRecord, ApprovalStatus, ApprovalStore
from oracle_server._persistence.blobs import SqlBlobStore
from oracle_server._persistence.checkpoints import (
    CheckpointerFactory,
    PostgresCheckpointers,
    open_checkpointers,
)
from oracle_server._persistence.delegations import DelegationStore, ReauthPrompts, StoredDelegation
from oracle_server._persistence.engine import Storage, StorageKind, database_url, storage_kind
from oracle_server._persistence.matrix_files import MatrixFileEvent, MatrixFileEvents
from oracle_server._persistence.replay import ReplayStore
from oracle_server._persistence.sessions import (
    DuplicateSessionError,
    SessionRecord,
    Sessions,
    SessionStore,
    to_js_iso,
)
from oracle_server._persistence.userdb import (
    StorageUnavailableError,
    UserDatabase,
    UserDatabases,
    UserRestorer,
    UserSessions,
    checkpoint_storage_key,
)

__all__ = [
    "ApprovalRecord",
    "ApprovalStatus",
    "ApprovalStore",
    "CheckpointerFactory",
    "DelegationStore",
    "DuplicateSessionError",
    "MatrixFileEvent",
    "MatrixFileEvents",
    "PostgresCheckpointers",
    "ReauthPrompts",
    "ReplayStore",
    "SessionRecord",
    "SessionStore",
    "Sessions",
    "SqlBlobStore",
    "Storage",
    "StorageKind",
    "StorageUnavailableError",
    "StoredDelegation",
    "UserDatabase",
    "UserDatabases",
    "UserRestorer",
    "UserSessions",
    "checkpoint_storage_key",
    "database_url",
    "open_checkpointers",
    "storage_kind",
    "to_js_iso",
]
