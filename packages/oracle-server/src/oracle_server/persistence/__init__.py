"""Persistence of the oracle server: one SQL database plus LangGraph checkpointers.

Embedded mode (``DATABASE_URL`` unset or ``sqlite…``) keeps the server database in
``<SQLITE_DATABASE_PATH>/oracle.db`` and one checkpoint file per user; shared mode
(``postgresql://…``) keeps both in PostgreSQL, as several replicas need (SRV-55).
"""

from __future__ import annotations

from oracle_server.persistence.blobs import SqlBlobStore
from oracle_server.persistence.checkpoints import (
    CheckpointerFactory,
    PostgresCheckpointers,
    SqliteUserCheckpointers,
    open_checkpointers,
)
from oracle_server.persistence.delegations import DelegationStore, ReauthPrompts, StoredDelegation
from oracle_server.persistence.engine import Storage, StorageKind, database_url, storage_kind
from oracle_server.persistence.replay import ReplayStore
from oracle_server.persistence.sessions import (
    DuplicateSessionError,
    SessionRecord,
    SessionStore,
    to_js_iso,
)

__all__ = [
    "CheckpointerFactory",
    "DelegationStore",
    "DuplicateSessionError",
    "PostgresCheckpointers",
    "ReauthPrompts",
    "ReplayStore",
    "SessionRecord",
    "SessionStore",
    "SqlBlobStore",
    "SqliteUserCheckpointers",
    "Storage",
    "StorageKind",
    "StoredDelegation",
    "database_url",
    "open_checkpointers",
    "storage_kind",
    "to_js_iso",
]
