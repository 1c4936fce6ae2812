"""Per-user short-lived secrets the model only sees as ids: the ``blobs`` table (SRV-59)."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_core import Blob
from oracle_server._persistence.tables import blobs

__all__ = ["BLOB_DEFAULT_TTL_SECONDS", "BLOB_MAX_TTL_SECONDS", "SqlBlobStore"]

BLOB_DEFAULT_TTL_SECONDS = 3600
BLOB_MAX_TTL_SECONDS = 86400
_BLOB_ID = re.compile(r"blob_[0-9a-f]{16}")


class SqlBlobStore:
    """``oracle_core.BlobStore`` over SQL, shared by every replica.

    Expired rows are swept whenever a blob is stored. Values are secrets (minted CARs
    and the like): nothing here logs them.

    Args:
        engine: The server database.
        clock: Unix time in seconds.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    async def put(
        self, *, user_did: str, name: str, value: str, ttl_seconds: int | None = None
    ) -> str:
        """Store ``value`` for ``user_did`` and return its ``blob_<16 hex>`` id.

        Args:
            user_did: Owner; only they can read it back.
            name: A label for the value (for example ``ucan_invocation``).
            value: The secret itself.
            ttl_seconds: Lifetime, default 3600, clamped to 1 … 86400.

        Raises:
            ValueError: when ``user_did`` is empty.
        """
        if not user_did:
            raise ValueError("blobs.user_required: user_did is required; take it from rt_ctx.user")
        ttl = BLOB_DEFAULT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
        ttl = max(1, min(ttl, BLOB_MAX_TTL_SECONDS))
        now = self._now()
        blob_id = f"blob_{secrets.token_hex(8)}"
        async with self._engine.begin() as conn:
            await conn.execute(delete(blobs).where(blobs.c.expires_at <= now))
            await conn.execute(
                insert(blobs).values(
                    blob_id=blob_id,
                    user_did=user_did,
                    name=name,
                    value=value,
                    expires_at=now + timedelta(seconds=ttl),
                )
            )
        return blob_id

    async def get(self, *, user_did: str, blob_id: str) -> Blob | None:
        """The blob, or ``None`` when unknown, expired, malformed or another user's."""
        if not self.is_valid_blob_id(blob_id):
            return None
        query = select(blobs).where(
            blobs.c.blob_id == blob_id,
            blobs.c.user_did == user_did,
            blobs.c.expires_at > self._now(),
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().one_or_none()
        if row is None:
            return None
        expires_at: datetime = row["expires_at"]
        return Blob(
            blob_id=row["blob_id"],
            user_did=row["user_did"],
            name=row["name"],
            value=row["value"],
            expires_at=expires_at.timestamp(),
        )

    def is_valid_blob_id(self, value: str) -> bool:
        """Whether ``value`` has the shape ``blob_<16 lowercase hex>`` (format only)."""
        return isinstance(value, str) and _BLOB_ID.fullmatch(value) is not None

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)
