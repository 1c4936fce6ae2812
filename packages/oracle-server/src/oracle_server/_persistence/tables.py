"""SQLAlchemy tables of the server database (SRV-56).

The same definitions serve SQLite and PostgreSQL. Every timestamp is a timezone-aware
UTC ``datetime`` in Python: PostgreSQL stores ``timestamptz``; SQLite stores UTC text in
a fixed format, so comparing two stored values as text orders them correctly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB

__all__ = [
    "UtcDateTime",
    "blobs",
    "insert_for",
    "matrix_file_events",
    "metadata",
    "oracle_sessions",
    "reauth_prompts",
    "revoked_delegations",
    "tool_approvals",
    "ucan_replay",
    "user_delegations",
]


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC ``datetime`` on every dialect.

    Naive values are refused on the way in: a naive time has no defined instant, and
    storing one would shift silently with the server's zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Convert to UTC; SQLite gets naive UTC so its text form stays uniform."""
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("persistence.naive_datetime: pass a timezone-aware datetime")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC ``datetime`` whatever the dialect handed back."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def insert_for(dialect_name: str, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` that supports ``ON CONFLICT`` on ``dialect_name``.

    Both dialects spell upserts the same way (``on_conflict_do_update(..., where=...)``),
    so stores can build one atomic statement for either backend.

    Raises:
        ValueError: for a dialect other than SQLite or PostgreSQL.
    """
    if dialect_name == "postgresql":
        return postgresql.insert(table)
    if dialect_name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"persistence.dialect_unsupported: {dialect_name!r}; use SQLite or PostgreSQL")


def _json() -> Any:
    # JSONB on PostgreSQL: compact, comparable; plain JSON text elsewhere.
    return JSON().with_variant(JSONB(), "postgresql")


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

oracle_sessions = Table(
    "oracle_sessions",
    metadata,
    Column("session_id", String(255), primary_key=True),
    Column("user_did", String(255), nullable=False),
    Column("title", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("last_updated_at", UtcDateTime(), nullable=False),
    Column("oracle_name", String(255), nullable=False),
    Column("oracle_did", String(255)),
    Column("oracle_entity_did", String(255)),
    Column("last_processed_count", Integer),
    Column("user_context", _json()),
    Column("room_id", String(255)),
    Column("slack_thread_ts", String(64)),
    Column("client", String(32), nullable=False, default="portal"),
    # Added after the first schema: existing databases gain it at boot (additive).
    Column("matrix_thread_id", String(255)),
    # The session's double-texting policy (enqueue, reject, interrupt, rollback).
    Column("multitask_strategy", String(16)),
    Index(None, "user_did", "last_updated_at"),
    Index(None, "user_did", "room_id"),
)

user_delegations = Table(
    "user_delegations",
    metadata,
    Column("user_did", String(255), primary_key=True),
    Column("raw", Text, nullable=False),
    Column("cid", String(255), nullable=False),
    Column("issuer", String(255), nullable=False),
    Column("audience", String(255), nullable=False),
    Column("capabilities", _json(), nullable=False),
    # Unix seconds (UCAN time, SRV-3); None means the delegation never expires.
    Column("expiration", BigInteger),
    Column("stored_at", UtcDateTime(), nullable=False),
)

revoked_delegations = Table(
    "revoked_delegations",
    metadata,
    Column("cid", String(255), primary_key=True),
    Column("user_did", String(255), nullable=False),
    Column("revoked_at", UtcDateTime(), nullable=False),
)

ucan_replay = Table(
    "ucan_replay",
    metadata,
    Column("cid", String(255), primary_key=True),
    Column("expires_at", UtcDateTime(), nullable=False),
    Index(None, "expires_at"),
)

reauth_prompts = Table(
    "reauth_prompts",
    metadata,
    Column("user_did", String(255), primary_key=True),
    Column("last_prompt_at", UtcDateTime(), nullable=False),
)

blobs = Table(
    "blobs",
    metadata,
    Column("blob_id", String(64), primary_key=True),
    Column("user_did", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("value", Text, nullable=False),
    Column("expires_at", UtcDateTime(), nullable=False),
    Index(None, "expires_at"),
)

matrix_file_events = Table(
    "matrix_file_events",
    metadata,
    Column("storage_key", String(64), primary_key=True),
    Column("event_id", String(255), nullable=False),
    Column("event", _json(), nullable=False),
    Column("content_checksum", String(128), nullable=False),
)

tool_approvals = Table(
    "tool_approvals",
    metadata,
    Column("approval_id", String(64), primary_key=True),
    Column("user_did", String(255), nullable=False),
    Column("session_id", String(255), nullable=False),
    Column("run_id", String(64), nullable=False),
    # LangGraph's id of the interrupt the turn paused on: the key it resumes with.
    Column("interrupt_id", String(128), nullable=False),
    Column("tool_call_id", String(255), nullable=False),
    Column("tool_name", String(255), nullable=False),
    # The arguments as shown to the user (through the tool's redaction hook).
    Column("args", _json(), nullable=False),
    Column("args_hash", String(80), nullable=False),
    Column("reason", Text, nullable=False),
    Column("requested_at", UtcDateTime(), nullable=False),
    Column("expires_at", UtcDateTime(), nullable=False),
    # pending, approved, declined, expired or superseded.
    Column("status", String(16), nullable=False),
    Column("decided_by", String(255)),
    Column("decided_at", UtcDateTime()),
    # How it was decided: ``api`` (POST /approvals) or ``message`` (a yes/no reply).
    Column("decided_via", String(16)),
    Column("edited_args_hash", String(80)),
    # The answer the thread resumes with, kept until the turn that applies it runs.
    Column("answer", _json()),
    # When a turn found the call answered in the checkpoint: until then the session may
    # still be paused on it, so a turn of the session reads its checkpoint first.
    Column("resumed_at", UtcDateTime()),
    Index(None, "user_did", "interrupt_id", unique=True),
    Index(None, "user_did", "session_id", "resumed_at"),
)
