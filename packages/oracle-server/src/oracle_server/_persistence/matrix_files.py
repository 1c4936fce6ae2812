"""The last Matrix upload of each backed-up file (SRV-56 ``matrix_file_events``).

A restore on this node reads the pointer here before asking the homeserver, and an
upload knows which event it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_server._persistence.tables import insert_for, matrix_file_events

__all__ = ["MatrixFileEvent", "MatrixFileEvents"]


@dataclass(frozen=True)
class MatrixFileEvent:
    """One file's last upload: its event id, the pointer content and the checksum."""

    storage_key: str
    event_id: str
    event: dict[str, Any]
    content_checksum: str


class MatrixFileEvents:
    """Reads and records the last upload of each storage key."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get(self, storage_key: str) -> MatrixFileEvent | None:
        """The last recorded upload of ``storage_key``."""
        query = select(matrix_file_events).where(matrix_file_events.c.storage_key == storage_key)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().one_or_none()
        if row is None:
            return None
        return MatrixFileEvent(
            row["storage_key"], row["event_id"], dict(row["event"]), row["content_checksum"]
        )

    async def put(self, record: MatrixFileEvent) -> None:
        """Record an upload, replacing the previous one."""
        values = {
            "storage_key": record.storage_key,
            "event_id": record.event_id,
            "event": record.event,
            "content_checksum": record.content_checksum,
        }
        statement = insert_for(self._engine.dialect.name, matrix_file_events).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[matrix_file_events.c.storage_key],
            set_={k: v for k, v in values.items() if k != "storage_key"},
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def forget(self, storage_key: str) -> None:
        """Drop the record (the backup was found unusable)."""
        statement = delete(matrix_file_events).where(
            matrix_file_events.c.storage_key == storage_key
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)
