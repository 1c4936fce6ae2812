"""Timestamps as the JavaScript client writes and reads them."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["timestamp"]


def timestamp(when: datetime | None = None) -> str:
    """UTC ISO-8601 with milliseconds and ``Z``, as JavaScript's ``toISOString``."""
    moment = (when or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
