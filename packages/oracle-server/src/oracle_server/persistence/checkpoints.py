"""LangGraph checkpointers for each storage mode (SRV-55/57).

Embedded mode keeps one SQLite file per user (``oracle_core.SqliteCheckpointers``); shared
mode hands every user the same ``AsyncPostgresSaver``, which is safe because thread ids
are session ids and those are unique across users.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from oracle_core import SqliteCheckpointers
from oracle_server.persistence.engine import StorageKind

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "CheckpointerFactory",
    "PostgresCheckpointers",
    "SqliteUserCheckpointers",
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


class SqliteUserCheckpointers:
    """One SQLite checkpoint file per user under ``<sqlite_path>/checkpoints``.

    Args:
        base_path: Directory of the per-user files.
    """

    def __init__(self, base_path: str | Path) -> None:
        self.base_path = Path(base_path)
        self._savers = SqliteCheckpointers(self.base_path)

    def path_for(self, user_did: str) -> Path:
        """Where ``user_did``'s checkpoint file lives."""
        return self._savers.path_for(user_did)

    async def __call__(self, user_did: str) -> BaseCheckpointSaver[Any]:
        """The user's saver, opening (and creating) their file on first use."""
        return await self._savers(user_did)

    async def delete_threads(self, user_did: str, thread_ids: Sequence[str]) -> None:
        """Delete these threads from the user's file; a user without a file has none."""
        if not thread_ids or not self.path_for(user_did).exists():
            return
        saver = await self._savers(user_did)
        for thread_id in thread_ids:
            await saver.adelete_thread(thread_id)

    async def delete_session_threads(self, user_did: str, session_id: str) -> list[str]:
        """Delete the session's thread and its sub-agent threads from the user's file."""
        if not self.path_for(user_did).exists():
            return []
        saver = cast("AsyncSqliteSaver", await self._savers(user_did))
        query = (
            "SELECT thread_id FROM checkpoints WHERE thread_id = ?"
            " OR thread_id LIKE ? ESCAPE '\\'"
            " UNION SELECT thread_id FROM writes WHERE thread_id = ?"
            " OR thread_id LIKE ? ESCAPE '\\'"
        )
        pattern = _like_prefix(f"{session_id}_")
        async with (
            saver.lock,
            saver.conn.execute(query, (session_id, pattern, session_id, pattern)) as cursor,
        ):
            thread_ids = sorted(str(row[0]) for row in await cursor.fetchall())
        await self.delete_threads(user_did, thread_ids)
        return thread_ids

    async def aclose(self) -> None:
        """Close every user's file."""
        await self._savers.aclose()


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
                saver = AsyncPostgresSaver(conn=pool)
                await saver.setup()
            except BaseException:
                await pool.close()
                raise
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
    return PostgresCheckpointers(saver, pool)


async def open_checkpointers(
    kind: StorageKind | str, url_or_path: str, *, schema: str | None = None
) -> CheckpointerFactory:
    """Open the checkpointer factory of a storage mode.

    Args:
        kind: ``"sqlite"`` (embedded) or ``"postgresql"`` (shared).
        url_or_path: For SQLite, ``SQLITE_DATABASE_PATH``: user files go under its
            ``checkpoints`` directory. For PostgreSQL, the database URL (with or without
            the ``+psycopg`` driver suffix).
        schema: PostgreSQL only: keep the checkpoint tables in this schema.

    Raises:
        ValueError: for an unknown kind, a bad schema name, or a schema with SQLite.
        ImportError: when PostgreSQL is asked for without the ``postgres`` extra.
    """
    if kind == "sqlite":
        if schema is not None:
            raise ValueError("persistence.schema_unsupported: schema= needs PostgreSQL")
        return SqliteUserCheckpointers(Path(url_or_path) / "checkpoints")
    if kind == "postgresql":
        return await _open_postgres(url_or_path, schema)
    raise ValueError(f"persistence.dialect_unsupported: {kind!r}; use 'sqlite' or 'postgresql'")
