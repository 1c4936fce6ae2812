"""LangGraph checkpointers for each storage mode (SRV-55/57).

Embedded mode keeps one SQLite file per user (:class:`UserDatabases`); shared
mode hands every user the same ``AsyncPostgresSaver``, which is safe because thread ids
are session ids and those are unique across users.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from oracle_server._persistence.engine import StorageKind
from oracle_server._persistence.userdb import UserDatabases

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "CheckpointerFactory",
    "PostgresCheckpointers",
    "open_checkpointers",
]

_POSTGRES_INSTALL_HINT = (
    "persistence.postgres_missing: DATABASE_URL points at PostgreSQL but its drivers are "
    "not installed; run: pip install 'oracle-server[postgres]'"
)
# Arbitrary constant, distinct from the server tables' lock.
_SETUP_LOCK_KEY = 0x6F72_6163_6C66
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class CheckpointerFactory(Protocol):
    """Gives each user their checkpointer; usable as ``hooks.checkpointer_for_user``."""

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        """The checkpointer holding ``user_did``'s threads."""
        ...

    async def delete_threads(self, user_did: str, thread_ids: Sequence[str]) -> None:
        """Delete every checkpoint and pending write of these threads of the user."""
        ...

    async def delete_session_threads(self, user_did: str, session_id: str) -> list[str]:
        """Delete thread ``session_id`` and its sub-agent threads ``"{session_id}_…"``.

        Returns the thread ids that had data (SRV-20).
        """
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


class PostgresCheckpointers:
    """One ``AsyncPostgresSaver`` on a psycopg pool, shared by every user.

    Build it with :func:`open_checkpointers`.
    """

    def __init__(self, saver: AsyncPostgresSaver, pool: AsyncConnectionPool[Any]) -> None:
        self.saver = saver
        self._pool = pool

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        """The shared saver (thread ids, being session ids, never collide)."""
        if not user_did:
            raise ValueError("a checkpointer needs the user's DID")
        return self.saver

    async def delete_threads(self, user_did: str, thread_ids: Sequence[str]) -> None:
        """Delete these threads (the caller has checked that ``user_did`` owns them)."""
        for thread_id in thread_ids:
            await self.saver.adelete_thread(thread_id)

    async def delete_session_threads(self, user_did: str, session_id: str) -> list[str]:
        """Delete the session's thread and its sub-agent threads."""
        query = (
            "SELECT thread_id FROM checkpoints WHERE thread_id = %(id)s"
            " OR thread_id LIKE %(prefix)s ESCAPE '\\'"
            " UNION SELECT thread_id FROM checkpoint_writes WHERE thread_id = %(id)s"
            " OR thread_id LIKE %(prefix)s ESCAPE '\\'"
        )
        params = {"id": session_id, "prefix": _like_prefix(f"{session_id}_")}
        async with self._pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(query, params)
            rows = await cursor.fetchall()
        thread_ids = sorted(str(row["thread_id"]) for row in rows)
        await self.delete_threads(user_did, thread_ids)
        return thread_ids

    async def aclose(self) -> None:
        """Close the pool."""
        await self._pool.close()


def _libpq_url(url: str) -> str:
    # psycopg takes a libpq URI; SQLAlchemy's driver suffix means nothing to it.
    scheme, separator, rest = url.partition("://")
    if separator and scheme.startswith(("postgresql", "postgres")):
        return f"postgresql://{rest}"
    return url


async def _open_postgres(url: str, schema: str | None) -> PostgresCheckpointers:
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        from oracle_core import CheckpointSerializer
    except ImportError as exc:  # pragma: no cover - the test environment has the extra
        raise ImportError(_POSTGRES_INSTALL_HINT) from exc

    conninfo = _libpq_url(url)
    # The saver's setup runs CREATE INDEX CONCURRENTLY, which needs autocommit.
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    if schema is not None:
        if _SCHEMA_NAME.fullmatch(schema) is None:
            raise ValueError(f"persistence.bad_schema: {schema!r} is not a plain identifier")
        kwargs["options"] = f"-c search_path={schema}"
    # One session-level advisory lock keeps replicas from migrating at the same time.
    async with await AsyncConnection.connect(conninfo, autocommit=True) as lock_conn:
        await lock_conn.execute("SELECT pg_advisory_lock(%s)", (_SETUP_LOCK_KEY,))
        try:
            if schema is not None:
                await lock_conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                conninfo, kwargs=kwargs, min_size=1, max_size=10, open=False
            )
            await pool.open(wait=True)
            try:
                saver = AsyncPostgresSaver(conn=pool, serde=CheckpointSerializer())
                await saver.setup()
            except BaseException:
                await pool.close()
                raise
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
    return PostgresCheckpointers(saver, pool)


async def open_checkpointers(
    kind: StorageKind | str,
    url_or_path: str,
    *,
    schema: str | None = None,
    oracle_did: str = "",
    max_open: int = 256,
) -> CheckpointerFactory:
    """Open the checkpointer factory of a storage mode.

    Args:
        kind: ``"sqlite"`` (embedded) or ``"postgresql"`` (shared).
        url_or_path: For SQLite, ``SQLITE_DATABASE_PATH``: user files go under its
            ``user_dbs`` directory (see :class:`UserDatabases`). For PostgreSQL, the
            database URL (with or without the ``+psycopg`` driver suffix).
        schema: PostgreSQL only: keep the checkpoint tables in this schema.
        oracle_did: SQLite only: part of each user's storage key (SRV-60).
        max_open: SQLite only: user databases kept open at most (SRV-58).

    Raises:
        ValueError: for an unknown kind, a bad schema name, or a schema with SQLite.
        ImportError: when PostgreSQL is asked for without the ``postgres`` extra.
    """
    if kind == "sqlite":
        if schema is not None:
            raise ValueError("persistence.schema_unsupported: schema= needs PostgreSQL")
        return UserDatabases(url_or_path, oracle_did=oracle_did, max_open=max_open)
    if kind == "postgresql":
        return await _open_postgres(url_or_path, schema)
    raise ValueError(f"persistence.dialect_unsupported: {kind!r}; use 'sqlite' or 'postgresql'")
