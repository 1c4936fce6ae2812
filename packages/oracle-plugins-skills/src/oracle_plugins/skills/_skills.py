"""Registry rows as the agent sees them: normalised, private first, deduplicated by name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from oracle_plugins.skills._client import RegistryCapsule

__all__ = [
    "SKILLS_MOUNT",
    "Source",
    "dedupe_by_name",
    "normalise_created_at",
    "private_first",
    "skill_entry",
]

SKILLS_MOUNT = "/workspace/skills"
"""Where the sandbox mounts each skill read-only, as ``<mount>/<name>``."""

Source = Literal["private", "public"]


def _parse_instant(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    # An instant without an offset is read as UTC, as JavaScript reads ISO dates.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def normalise_created_at(value: str | None) -> str | None:
    """``createdAt`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC, milliseconds).

    A value that is not ISO 8601 is kept as the registry sent it: nothing is lost, and
    it simply never counts as newer in the dedupe.
    """
    if value is None:
        return None
    instant = _parse_instant(value)
    if instant is None:
        return value
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"


def skill_entry(capsule: RegistryCapsule) -> dict[str, Any]:
    """One skill for the agent: ``{title, description, path, source, cid, createdAt?}``."""
    entry: dict[str, Any] = {
        "title": capsule.name,
        "description": capsule.description or "",
        "path": f"{SKILLS_MOUNT}/{capsule.name}",
        "source": "private" if capsule.private else "public",
        "cid": capsule.cid,
    }
    created_at = normalise_created_at(capsule.createdAt)
    if created_at is not None:
        entry["createdAt"] = created_at
    return entry


def _newer(incoming: RegistryCapsule, kept: RegistryCapsule) -> bool:
    if incoming.createdAt is None or kept.createdAt is None:
        return False
    a, b = _parse_instant(incoming.createdAt), _parse_instant(kept.createdAt)
    return a is not None and b is not None and a > b


def dedupe_by_name(capsules: Iterable[RegistryCapsule]) -> list[RegistryCapsule]:
    """One row per skill name: a private row beats a public one, otherwise the newest
    ``createdAt`` wins (the first row when either has none).

    A name keeps the position of its first row in the registry's order.
    """
    kept: dict[str, RegistryCapsule] = {}
    for capsule in capsules:
        existing = kept.get(capsule.name)
        if existing is None:
            kept[capsule.name] = capsule
        elif capsule.private != existing.private:
            if capsule.private:
                kept[capsule.name] = capsule
        elif _newer(capsule, existing):
            kept[capsule.name] = capsule
    return list(kept.values())


def private_first(capsules: Sequence[RegistryCapsule]) -> list[RegistryCapsule]:
    """The caller's own rows, then the public ones; each group in the registry's order."""
    return [c for c in capsules if c.private] + [c for c in capsules if not c.private]
