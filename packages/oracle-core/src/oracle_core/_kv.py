"""Per-user key-value storage for plugins, with hard caps (``rt_ctx.kv``).

Each plugin sees its own namespace of the user's store: ``rt_ctx.kv`` is scoped to the
user of the request and to the plugin whose hook or tool runs. Values are JSON. Every
user has a hard cap on keys and on bytes (keys plus values) across all plugins, checked
atomically with each write, so one plugin (or one user) cannot fill the store; a write
past a cap raises ``KvQuotaError`` and stores nothing.

The local backend is SQLite (``SqliteKvBackend``); the server uses Redis when
``REDIS_URL`` is set. Both implement :class:`KvBackend`, and :class:`KeyValueService`
adds the JSON encoding, the checks and the scoping on top.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from oracle_core._errors import OracleError

if TYPE_CHECKING:
    from oracle_core._context import UserInfo
    from oracle_core._sqlite_connection import PooledConnection

__all__ = [
    "KeyValueAccessor",
    "KeyValueService",
    "KvBackend",
    "KvLimits",
    "KvQuotaError",
    "KvWrite",
    "SqliteKvBackend",
]

MAX_KEY_CHARS = 256


class KvQuotaError(OracleError):
    """A write would take the user past a cap (``kv.quota_exceeded``) or is too big
    on its own (``kv.value_too_large``); nothing was stored."""

    code = "kv.quota_exceeded"


@dataclass(frozen=True)
class KvLimits:
    """The caps of every user's store.

    Attributes:
        max_keys: Keys per user, over every plugin's namespace.
        max_bytes: Bytes per user: each entry's key and encoded value.
        max_value_bytes: Bytes of one encoded value.
    """

    max_keys: int = 1000
    max_bytes: int = 1024 * 1024
    max_value_bytes: int = 256 * 1024


KvWrite = Literal["ok", "keys", "bytes"]
"""What a backend's ``put`` did: stored, or refused for the key cap or the byte cap."""


class KvBackend(Protocol):
    """Raw storage of encoded entries by ``(user, namespace, key)``.

    ``put`` must check the caps and write in one atomic step across every process
    sharing the store; expired entries count for nothing.
    """

    async def get(self, user: str, namespace: str, key: str, now: float) -> bytes | None:
        """The entry's bytes, or ``None`` (absent or expired)."""
        ...

    async def put(
        self,
        user: str,
        namespace: str,
        key: str,
        data: bytes,
        expires_at: float | None,
        now: float,
        limits: KvLimits,
    ) -> KvWrite:
        """Store the entry unless the user's store would pass a cap."""
        ...

    async def delete(self, user: str, namespace: str, key: str) -> bool:
        """Remove the entry; whether there was one."""
        ...

    async def keys(self, user: str, namespace: str, prefix: str, now: float) -> list[str]:
        """The namespace's live keys starting with ``prefix``, sorted."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class KeyValueAccessor(Protocol):
    """One user's store as one plugin sees it (``rt_ctx.kv``)."""

    async def get(self, key: str, default: Any = None) -> Any:
        """The stored JSON value, or ``default``."""
        ...

    async def set(self, key: str, value: Any, *, ttl_seconds: float | None = None) -> None:
        """Store a JSON value, for ``ttl_seconds`` or until deleted.

        Raises:
            KvQuotaError: The user's store would pass its key or byte cap, or the value
                alone is over the per-value cap; nothing was stored.
            ValueError: The key is empty or longer than 256 characters, or the value is
                not JSON.
        """
        ...

    async def delete(self, key: str) -> bool:
        """Remove a key; whether it was there."""
        ...

    async def keys(self, prefix: str = "") -> list[str]:
        """This namespace's keys starting with ``prefix``, sorted."""
        ...

    def scoped(self, namespace: str) -> KeyValueAccessor:
        """The same user's store in another namespace (the runtime scopes per plugin)."""
        ...


@dataclass
class KeyValueService:
    """Gives each request the user's store, scoped per plugin.

    Args:
        backend: Where entries live.
        limits: The caps.
        clock: Seconds since the epoch (tests move it).
    """

    backend: KvBackend
    limits: KvLimits = field(default_factory=KvLimits)
    clock: Callable[[], float] = time.time

    def for_user(self, user: UserInfo, namespace: str = "runtime") -> KeyValueAccessor:
        """The accessor of ``user`` in ``namespace``."""
        return _ScopedKv(self, user.did, namespace)

    async def aclose(self) -> None:
        """Close the backend."""
        await self.backend.aclose()


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise ValueError(f"a key is a string of 1 to {MAX_KEY_CHARS} characters")


@dataclass(frozen=True)
class _ScopedKv:
    service: KeyValueService
    user: str
    namespace: str

    def scoped(self, namespace: str) -> KeyValueAccessor:
        return _ScopedKv(self.service, self.user, namespace)

    async def get(self, key: str, default: Any = None) -> Any:
        _check_key(key)
        service = self.service
        data = await service.backend.get(self.user, self.namespace, key, service.clock())
        return default if data is None else json.loads(data)

    async def set(self, key: str, value: Any, *, ttl_seconds: float | None = None) -> None:
        _check_key(key)
        if not self.user:
            raise ValueError("the store needs a user; rt_ctx.kv has none outside a request")
        try:
            data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the value is not JSON: {exc}") from None
        service = self.service
        limits = service.limits
        if len(data) > limits.max_value_bytes:
            raise KvQuotaError(
                f"the value is {len(data)} bytes; one value may hold {limits.max_value_bytes}",
                code="kv.value_too_large",
            )
        now = service.clock()
        expires = None if ttl_seconds is None else now + max(ttl_seconds, 0.001)
        written = await service.backend.put(
            self.user, self.namespace, key, data, expires, now, limits
        )
        if written == "keys":
            raise KvQuotaError(
                f"the user's store holds its {limits.max_keys} keys; delete some first",
                hint="raise KV_MAX_KEYS_PER_USER, or delete keys no longer needed",
            )
        if written == "bytes":
            raise KvQuotaError(
                f"the user's store would pass its {limits.max_bytes} bytes",
                hint="raise KV_MAX_BYTES_PER_USER, or store less",
            )

    async def delete(self, key: str) -> bool:
        _check_key(key)
        return await self.service.backend.delete(self.user, self.namespace, key)

    async def keys(self, prefix: str = "") -> list[str]:
        service = self.service
        return await service.backend.keys(self.user, self.namespace, prefix, service.clock())


_SCHEMA = """
CREATE TABLE IF NOT EXISTS plugin_kv (
    user_did TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (user_did, namespace, key)
) WITHOUT ROWID;
"""


class SqliteKvBackend:
    """Entries in one SQLite file (``:memory:`` for tests), for one machine.

    Each write checks the caps and writes in one ``BEGIN IMMEDIATE`` transaction, so
    processes sharing the file (workers on one machine) cannot pass a cap together.
    """

    def __init__(self, path: Path | str) -> None:
        self._path = path
        self._db: PooledConnection | None = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> PooledConnection:
        if self._db is None:
            from oracle_core._sqlite_connection import connect_sqlite

            self._db = await connect_sqlite(self._path, schema=_SCHEMA)
        return self._db

    async def get(self, user: str, namespace: str, key: str, now: float) -> bytes | None:
        db = await self._connection()
        async with db.execute(
            "SELECT value FROM plugin_kv WHERE user_did = ? AND namespace = ? AND key = ?"
            " AND (expires_at IS NULL OR expires_at > ?)",
            (user, namespace, key, now),
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else bytes(row[0])

    async def put(
        self,
        user: str,
        namespace: str,
        key: str,
        data: bytes,
        expires_at: float | None,
        now: float,
        limits: KvLimits,
    ) -> KvWrite:
        async with self._lock:
            db = await self._connection()
            await db.execute("BEGIN IMMEDIATE")
            await db.execute(
                "DELETE FROM plugin_kv WHERE user_did = ? AND expires_at <= ?", (user, now)
            )
            async with db.execute(
                "SELECT count(*), coalesce(sum(length(CAST(key AS BLOB)) + length(value)), 0)"
                " FROM plugin_kv WHERE user_did = ? AND NOT (namespace = ? AND key = ?)",
                (user, namespace, key),
            ) as cursor:
                row = await cursor.fetchone()
            count, used = (int(row[0]), int(row[1])) if row else (0, 0)
            if count + 1 > limits.max_keys:
                await db.rollback()
                return "keys"
            if used + len(key.encode()) + len(data) > limits.max_bytes:
                await db.rollback()
                return "bytes"
            await db.execute(
                "INSERT OR REPLACE INTO plugin_kv VALUES (?, ?, ?, ?, ?)",
                (user, namespace, key, data, expires_at),
            )
            await db.commit()
            return "ok"

    async def delete(self, user: str, namespace: str, key: str) -> bool:
        async with self._lock:
            db = await self._connection()
            cursor = await db.execute(
                "DELETE FROM plugin_kv WHERE user_did = ? AND namespace = ? AND key = ?",
                (user, namespace, key),
            )
            await db.commit()
            return bool(cursor.rowcount)

    async def keys(self, user: str, namespace: str, prefix: str, now: float) -> list[str]:
        db = await self._connection()
        async with db.execute(
            "SELECT key FROM plugin_kv WHERE user_did = ? AND namespace = ?"
            " AND substr(key, 1, ?) = ? AND (expires_at IS NULL OR expires_at > ?)"
            " ORDER BY key",
            (user, namespace, len(prefix), prefix, now),
        ) as cursor:
            rows = await cursor.fetchall()
        return [str(row[0]) for row in rows]

    async def aclose(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()
