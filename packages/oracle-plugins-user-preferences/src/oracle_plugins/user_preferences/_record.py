"""The preferences record: the tool's input, merging, and the graph-state view.

The stored record keeps the TypeScript spelling (``agentName``, ``updatedAt``) so both
runtimes and the portal read each other's writes; the graph state holds the snake_case
view that the core prompt renders as its "User Preferences" section.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from oracle_plugins.user_preferences._superjson import js_iso_string

__all__ = [
    "PREFERENCE_FIELDS",
    "SetUserPreferencesArgs",
    "merge_record",
    "normalise_record",
    "state_view",
]

PREFERENCE_FIELDS: Mapping[str, str] = {
    "agentName": "agent_name",
    "language": "language",
    "tone": "tone",
    "formality": "formality",
    "customInstructions": "custom_instructions",
}
"""Stored key → key of ``state.user_preferences`` (the ones section 11 renders)."""

_UPDATED_AT = "updatedAt"


def _compact_schema(schema: dict[str, Any]) -> None:
    # Every field is optional; "default": null on each adds tokens to every model call
    # and tells the model nothing. (Nullability is hidden with SkipJsonSchema.)
    for field_schema in schema.get("properties", {}).values():
        if field_schema.get("default", ...) is None:
            del field_schema["default"]


class SetUserPreferencesArgs(BaseModel):
    """Arguments of ``set_user_preferences``: only the fields to change."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_compact_schema)

    # Field names keep the anchor's camelCase: they are the keys the model sends.
    agentName: Annotated[str, Field(max_length=80)] | SkipJsonSchema[None] = Field(
        None, description="Your name, as the user wants it."
    )
    language: Annotated[str, Field(max_length=20)] | SkipJsonSchema[None] = Field(
        None, description="Reply language, free-form, e.g. 'pt-BR'."
    )
    tone: str | SkipJsonSchema[None] = Field(None, description="e.g. 'warm', 'playful'.")
    formality: Literal["casual", "neutral", "formal"] | SkipJsonSchema[None] = None
    customInstructions: Annotated[str, Field(max_length=2000)] | SkipJsonSchema[None] = Field(
        None,
        description=(
            "Standing instructions, written for your future self. Send the full text: "
            "the existing instructions plus the new ones."
        ),
    )

    @model_validator(mode="after")
    def _something_to_set(self) -> SetUserPreferencesArgs:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError(
                "set at least one of agentName, language, tone, formality, customInstructions"
            )
        return self


def normalise_record(value: Any) -> dict[str, Any] | None:
    """A stored value as a record, or ``None`` when it is not an object.

    Known fields that are not strings are dropped (one bad field does not lose the
    others); fields this runtime does not know (another runtime's ``userName``) are
    kept, so that a write here never erases them.
    """
    if not isinstance(value, dict):
        return None
    record: dict[str, Any] = {}
    for key, item in value.items():
        if key in PREFERENCE_FIELDS or key == _UPDATED_AT:
            if isinstance(item, str) and item.strip():
                record[key] = item
        else:
            record[str(key)] = item
    return record


def merge_record(
    current: Mapping[str, Any] | None, update: SetUserPreferencesArgs, now: datetime
) -> dict[str, Any]:
    """``current`` with the given fields of ``update`` applied, stamped ``updatedAt``.

    Only the fields the model passed change; an empty string removes that field. A
    ``null`` counts as not passed: some models send every property, null when unchanged.

    Args:
        current: The stored record, or ``None``.
        update: The validated tool arguments.
        now: The time of the write.

    Returns:
        The new record.
    """
    record = dict(current or {})
    for key in PREFERENCE_FIELDS:
        value = getattr(update, key)
        if value is None:
            continue
        if value.strip():
            record[key] = value.strip()
        else:
            record.pop(key, None)
    record[_UPDATED_AT] = js_iso_string(now)
    return record


def state_view(record: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The ``state.user_preferences`` value for ``record``; ``None`` when no field is set."""
    if not record:
        return None
    view = {
        state_key: str(record[key])
        for key, state_key in PREFERENCE_FIELDS.items()
        if isinstance(record.get(key), str) and str(record[key]).strip()
    }
    if not view:
        return None
    updated = record.get(_UPDATED_AT)
    if isinstance(updated, str):
        view["updated_at"] = updated
    return view
