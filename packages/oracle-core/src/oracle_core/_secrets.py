"""A user's secrets (``rt_ctx.secrets``): names for the prompt, values on demand.

Plugins see :class:`SecretsAccessor`: ``get_index()`` lists names (never values), and
``get_values(keys)`` returns the values a tool needs, leaving out any it cannot read.
``put`` and ``delete`` are the user's own writes (the server's ``/secrets`` routes).

Implementations: :class:`LocalSecretsService` (values given in memory: tests, fixed
deployments), :class:`SqliteSecretsService` (one machine: a per-user store, encrypted at
rest with a key file beside it) and, in the server's IXO mode, the user's Matrix room
decrypted with the oracle's P-256 key.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cryptography.fernet import Fernet, InvalidToken

from oracle_core._errors import NotConfiguredError, OracleError

if TYPE_CHECKING:
    from oracle_core._context import UserInfo
    from oracle_core._sqlite_connection import PooledConnection

__all__ = [
    "RESERVED_SECRET_PREFIX",
    "SECRETS_PER_USER",
    "SECRET_MAX_VALUE_BYTES",
    "SECRET_NAME_PATTERN",
    "LocalSecretsService",
    "SecretIndexEntry",
    "SecretsAccessor",
    "SecretsError",
    "SecretsService",
    "SqliteSecretsService",
    "check_secret",
    "visible_secret",
]

SECRET_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""A secret's name: an environment variable's (it becomes ``_USER_SECRET_<name>``)."""
SECRET_MAX_VALUE_BYTES = 16 * 1024
SECRETS_PER_USER = 100
RESERVED_SECRET_PREFIX = "BYO_LLM_"
"""Names the runtime keeps for itself (bring-your-own model keys): never shown to plugins."""


class SecretsError(OracleError):
    """A secret was refused: ``secrets.bad_name``, ``secrets.too_large``,
    ``secrets.too_many``; or the store cannot take it: ``secrets.unavailable`` (no key or
    no room to keep it in), ``secrets.forbidden`` (the room does not let the oracle
    write)."""

    code = "secrets.bad_name"


def visible_secret(name: str) -> bool:
    """Whether plugins (and the prompt) may see ``name``."""
    return not name.startswith(RESERVED_SECRET_PREFIX)


def check_secret(name: str, value: str) -> bytes:
    """The value's UTF-8 bytes once ``name`` and ``value`` are acceptable.

    Raises:
        SecretsError: ``secrets.bad_name`` or ``secrets.too_large``.
    """
    if not SECRET_NAME_PATTERN.fullmatch(name):
        raise SecretsError(
            "a secret's name is 1 to 64 letters, digits and underscores, not starting with a digit",
            code="secrets.bad_name",
        )
    data = value.encode()
    if not data or len(data) > SECRET_MAX_VALUE_BYTES:
        raise SecretsError(
            f"a secret's value is 1 to {SECRET_MAX_VALUE_BYTES} bytes", code="secrets.too_large"
        )
    return data


@dataclass(frozen=True)
class SecretIndexEntry:
    """A secret's name and metadata; never its value."""

    name: str
    description: str | None = None
    updated_at: str | None = None


class SecretsAccessor(Protocol):
    """A user's secrets, as a request sees them."""

    async def get_index(self) -> list[SecretIndexEntry]:
        """Names and metadata of the user's secrets (no values), sorted by name."""
        ...

    async def get_values(self, keys: Sequence[str]) -> dict[str, str]:
        """Values for ``keys``; unknown keys, and values that cannot be read, are left
        out (never an error: the caller treats absence as "not configured")."""
        ...

    async def put(self, name: str, value: str) -> None:
        """Store (or replace) a secret.

        Raises:
            SecretsError: a bad name or value, too many secrets, or no way to store.
        """
        ...

    async def delete(self, name: str) -> bool:
        """Remove a secret; whether there was one."""
        ...


class SecretsService(Protocol):
    """Gives each user their own secrets accessor."""

    def for_user(self, user: UserInfo) -> SecretsAccessor:
        """The accessor scoped to ``user``."""
        ...


# --- in memory -------------------------------------------------------------------------


@dataclass
class _StaticSecrets:
    values: Mapping[str, str]

    async def get_index(self) -> list[SecretIndexEntry]:
        return [SecretIndexEntry(name=n) for n in sorted(self.values) if visible_secret(n)]

    async def get_values(self, keys: Sequence[str]) -> dict[str, str]:
        return {k: self.values[k] for k in keys if k in self.values and visible_secret(k)}

    async def put(self, name: str, value: str) -> None:
        raise NotConfiguredError(
            "these secrets are fixed", hint="use SqliteSecretsService for a writable store"
        )

    async def delete(self, name: str) -> bool:
        raise NotConfiguredError("these secrets are fixed")


@dataclass
class LocalSecretsService:
    """Secrets given in memory, per user and shared; read-only; empty by default."""

    values_by_user: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    shared_values: Mapping[str, str] = field(default_factory=dict)

    def for_user(self, user: UserInfo) -> SecretsAccessor:
        values = {**self.shared_values, **self.values_by_user.get(user.did, {})}
        return _StaticSecrets(values)


# --- one machine -----------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS user_secrets (
    user_did TEXT NOT NULL,
    name TEXT NOT NULL,
    value BLOB NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (user_did, name)
) WITHOUT ROWID;
"""


class SqliteSecretsService:
    """Per-user secrets in one SQLite file, each value encrypted at rest (Fernet).

    The key is a file beside the database (``<path>.key``, mode 0600), made on first use:
    a copy of the database alone reveals names, never values. Losing the key file loses
    the values (they then read as absent, and the user sets them again).

    Args:
        path: The database file (``:memory:`` for tests, with ``key_path`` given).
        key_path: Where the key lives (default: ``<path>.key``).
    """

    def __init__(self, path: Path | str, *, key_path: Path | None = None) -> None:
        self._path = path
        self._key_path = key_path or Path(f"{path}.key")
        self._db: PooledConnection | None = None
        self._fernet: Fernet | None = None
        self._lock = asyncio.Lock()

    def for_user(self, user: UserInfo) -> SecretsAccessor:
        """The accessor scoped to ``user``."""
        return _SqliteSecrets(self, user.did)

    async def aclose(self) -> None:
        """Close the database."""
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    def _cipher(self) -> Fernet:
        if self._fernet is None:
            try:
                key = self._key_path.read_bytes().strip()
            except FileNotFoundError:
                self._key_path.parent.mkdir(parents=True, exist_ok=True)
                key = Fernet.generate_key()
                # Created with its final mode, and never replaced once there: two
                # processes racing here keep whichever key landed first.
                try:
                    fd = os.open(self._key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    key = self._key_path.read_bytes().strip()
                else:
                    with os.fdopen(fd, "wb") as out:
                        out.write(key)
            self._fernet = Fernet(key)
        return self._fernet

    def _decrypt(self, token: bytes) -> str | None:
        try:
            return self._cipher().decrypt(token).decode()
        except (InvalidToken, UnicodeDecodeError):
            return None

    async def _connection(self) -> PooledConnection:
        if self._db is None:
            from oracle_core._sqlite_connection import connect_sqlite

            self._db = await connect_sqlite(self._path, schema=_SCHEMA)
        return self._db

    async def index(self, user_did: str) -> list[SecretIndexEntry]:
        """The user's secret names, sorted, with when each was last set."""
        db = await self._connection()
        async with db.execute(
            "SELECT name, updated_at FROM user_secrets WHERE user_did = ? ORDER BY name",
            (user_did,),
        ) as cursor:
            rows = await cursor.fetchall()
        return [
            SecretIndexEntry(name=row[0], updated_at=_iso(row[1]))
            for row in rows
            if visible_secret(row[0])
        ]

    async def values(self, user_did: str, keys: Sequence[str]) -> dict[str, str]:
        """The readable values of ``keys``."""
        wanted = [k for k in dict.fromkeys(keys) if visible_secret(k)]
        if not wanted:
            return {}
        db = await self._connection()
        marks = ",".join("?" * len(wanted))
        async with db.execute(
            f"SELECT name, value FROM user_secrets WHERE user_did = ? AND name IN ({marks})",
            (user_did, *wanted),
        ) as cursor:
            rows = await cursor.fetchall()
        out = {}
        for name, token in rows:
            value = self._decrypt(bytes(token))
            if value is not None:
                out[name] = value
        return out

    async def put(self, user_did: str, name: str, value: str) -> None:
        """Store a secret (see :meth:`SecretsAccessor.put`)."""
        data = check_secret(name, value)
        token = self._cipher().encrypt(data)
        async with self._lock:
            db = await self._connection()
            await db.execute("BEGIN IMMEDIATE")
            async with db.execute(
                "SELECT count(*) FROM user_secrets WHERE user_did = ? AND name != ?",
                (user_did, name),
            ) as cursor:
                row = await cursor.fetchone()
            if row is not None and int(row[0]) >= SECRETS_PER_USER:
                await db.rollback()
                raise SecretsError(
                    f"at most {SECRETS_PER_USER} secrets per user", code="secrets.too_many"
                )
            await db.execute(
                "INSERT OR REPLACE INTO user_secrets (user_did, name, value, updated_at)"
                " VALUES (?, ?, ?, ?)",
                (user_did, name, token, time.time()),
            )
            await db.commit()

    async def delete(self, user_did: str, name: str) -> bool:
        """Remove a secret; whether there was one."""
        async with self._lock:
            db = await self._connection()
            cursor = await db.execute(
                "DELETE FROM user_secrets WHERE user_did = ? AND name = ?", (user_did, name)
            )
            await db.commit()
            return bool(cursor.rowcount)


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


@dataclass
class _SqliteSecrets:
    store: SqliteSecretsService
    user_did: str

    async def get_index(self) -> list[SecretIndexEntry]:
        return await self.store.index(self.user_did)

    async def get_values(self, keys: Sequence[str]) -> dict[str, str]:
        return await self.store.values(self.user_did, keys)

    async def put(self, name: str, value: str) -> None:
        await self.store.put(self.user_did, name, value)

    async def delete(self, name: str) -> bool:
        return await self.store.delete(self.user_did, name)
