"""UCAN replay protection shared by every replica: the ``ucan_replay`` table (UCAN-34)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_server._persistence.tables import insert_for, ucan_replay

__all__ = ["MAX_TTL_SECONDS", "ReplayStore"]

MAX_TTL_SECONDS = 24 * 3600
CLEANUP_EVERY_SECONDS = 3600


class ReplayStore:
    """An ``oracle_ucan.InvocationStore`` over SQL: single use holds across replicas.

    TTLs are clamped to 1 s … 24 h. Expired rows are swept by :meth:`cleanup`, which
    also runs at most hourly from :meth:`add` and :meth:`claim`.

    Args:
        engine: The server database.
        clock: Unix time in seconds.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        self._next_cleanup = clock() + CLEANUP_EVERY_SECONDS

    async def has(self, cid: str) -> bool:
        """Whether ``cid`` was used and its record has not expired."""
        query = select(ucan_replay.c.cid).where(
            ucan_replay.c.cid == cid, ucan_replay.c.expires_at > self._now()
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def add(self, cid: str, ttl_seconds: int) -> None:
        """Record ``cid`` as used for ``ttl_seconds``, replacing any earlier expiry."""
        now = self._now()
        statement = insert_for(self._engine.dialect.name, ucan_replay).values(
            cid=cid, expires_at=_expiry(now, ttl_seconds)
        )
        statement = statement.on_conflict_do_update(
            index_elements=[ucan_replay.c.cid],
            set_={"expires_at": statement.excluded.expires_at},
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)
        await self._maybe_cleanup()

    async def claim(self, cid: str, ttl_seconds: int) -> bool:
        """Record ``cid`` unless an unexpired record exists; ``True`` when this call won.

        A single ``INSERT … ON CONFLICT DO UPDATE … WHERE expired`` decides, so of any
        number of concurrent claims (any connection, any replica) exactly one wins:
        PostgreSQL makes the losers wait on the row lock and re-check the condition,
        SQLite serialises writers.
        """
        now = self._now()
        insert = insert_for(self._engine.dialect.name, ucan_replay).values(
            cid=cid, expires_at=_expiry(now, ttl_seconds)
        )
        statement = insert.on_conflict_do_update(
            index_elements=[ucan_replay.c.cid],
            set_={"expires_at": insert.excluded.expires_at},
            where=ucan_replay.c.expires_at <= now,
        ).returning(ucan_replay.c.cid)
        async with self._engine.begin() as conn:
            won = (await conn.execute(statement)).first() is not None
        await self._maybe_cleanup()
        return won

    async def cleanup(self) -> int:
        """Delete expired records; returns how many went."""
        statement = delete(ucan_replay).where(ucan_replay.c.expires_at <= self._now())
        async with self._engine.begin() as conn:
            result = await conn.execute(statement)
        self._next_cleanup = self._clock() + CLEANUP_EVERY_SECONDS
        return result.rowcount

    async def _maybe_cleanup(self) -> None:
        if self._clock() >= self._next_cleanup:
            await self.cleanup()

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)


def _expiry(now: datetime, ttl_seconds: int) -> datetime:
    return now + timedelta(seconds=max(1, min(ttl_seconds, MAX_TTL_SECONDS)))
