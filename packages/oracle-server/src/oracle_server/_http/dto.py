"""Request bodies (SRV-22, SRV-27, SRV-34): pydantic models with the client's camelCase keys.

In every body, ``null`` for an optional field means the field is absent (JavaScript
clients send ``undefined`` members as ``null``), and numbers are finite and bounded.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.alias_generators import to_camel

from oracle_core import TOOL_NAME_PATTERN, ClientSchemaError, client_args_model

__all__ = [
    "AbortDto",
    "AgActionDto",
    "ApprovalDecisionDto",
    "AttachmentDto",
    "BrowserToolDto",
    "SecretValueDto",
    "SendMessageDto",
    "StoreDelegationDto",
]

_MXC_RE = re.compile(r"^(mxc|https?)://.+")
_TOOL_KEY_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}__[A-Za-z0-9_.-]{1,128}")
# Standard or URL-safe alphabet, padded or not, with whitespace (UCAN-3).
_BASE64_RE = re.compile(r"[A-Za-z0-9+/_\-=\s]+")
MAX_MCP_INVOCATIONS = 64
MAX_INVOCATION_CHARS = 64 * 1024


def _document_null(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The OpenAPI schema says what ``_null_is_absent`` does: optional fields take null."""
    required = set(schema.get("required", ()))
    properties: dict[str, Any] = schema.get("properties", {})
    for name, prop in properties.items():
        if name in required or {"type": "null"} in prop.get("anyOf", ()):
            continue
        kept = {k: v for k, v in prop.items() if k in ("default", "description", "title")}
        shape = {k: v for k, v in prop.items() if k not in kept}
        properties[name] = {"anyOf": [shape, {"type": "null"}], **kept}


class _Dto(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        json_schema_extra=_document_null,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # A required field keeps its null, which then fails as a wrong type.
        if not isinstance(data, dict):
            return data
        optional = _optional_keys(cls)
        return {k: v for k, v in data.items() if v is not None or k not in optional}


@functools.cache
def _optional_keys(model: type[BaseModel]) -> frozenset[str]:
    """The names and aliases of ``model``'s fields that have a default."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if not info.is_required():
            keys.add(name)
            if info.alias:
                keys.add(info.alias)
    return frozenset(keys)


class _ClientToolDto(_Dto):
    """A tool the client declares: its name must be a tool name and its schema one that
    becomes an argument model, so a tool the model could never call is refused here."""

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    schema_: dict[str, Any] = Field(alias="schema")

    @field_validator("name")
    @classmethod
    def _tool_name(cls, value: str) -> str:
        if not TOOL_NAME_PATTERN.fullmatch(value):
            raise ValueError("a tool name is 1 to 64 letters, digits, _ or -")
        return value

    @field_validator("schema_")
    @classmethod
    def _not_empty(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("schema should not be empty")
        return value

    @model_validator(mode="after")
    def _usable_schema(self) -> _ClientToolDto:
        try:
            client_args_model(self.schema_, name=self.name)
        except ClientSchemaError as exc:
            raise ValueError(exc.message) from None
        return self


class BrowserToolDto(_ClientToolDto):
    """A browser tool the portal can run (``tools``)."""


class AgActionDto(_ClientToolDto):
    """An AG-UI action the client can run (``agActions``)."""

    has_render: StrictBool | None = None


class AttachmentDto(_Dto):
    """A file attached to the message."""

    mxc_uri: str | None = None
    event_id: str | None = None
    filename: str = Field(min_length=1, max_length=255)
    mimetype: str = Field(min_length=1)
    size: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _source(self) -> AttachmentDto:
        if not self.mxc_uri and not self.event_id:
            raise ValueError("Either mxcUri or eventId must be provided")
        if self.mxc_uri and not _MXC_RE.match(self.mxc_uri):
            raise ValueError("mxcUri must start with mxc://, http://, or https://")
        if self.event_id and not self.event_id.startswith("$"):
            raise ValueError("eventId must start with $")
        return self


MultitaskStrategy = Literal["enqueue", "reject", "interrupt", "rollback"]
"""What a message does while its session runs a turn (double texting)."""


class SendMessageDto(_Dto):
    """``POST /messages/{sessionId}``."""

    message: str = Field(min_length=1, max_length=100_000)
    stream: StrictBool = False
    return_all_messages: StrictBool = False
    tools: list[BrowserToolDto] | None = None
    ag_actions: list[AgActionDto] | None = None
    attachments: list[AttachmentDto] | None = Field(None, max_length=10)
    multitask_strategy: MultitaskStrategy | None = Field(
        None,
        description=(
            "What this message does if the session is running a turn: wait for it "
            "(enqueue), be refused with 409 (reject), cancel it and keep what it did "
            "(interrupt), or cancel it and discard what it did (rollback). Default: "
            "the session's, else SESSION_CONCURRENCY_POLICY."
        ),
    )
    mcp_invocations: dict[str, str] | None = Field(
        None,
        max_length=MAX_MCP_INVOCATIONS,
        description="UCAN invocations for protected MCP tools (UCAN-28): base64 CAR by "
        "`<server>__<tool>`, checked when the tool is called.",
    )
    timezone: str | None = None
    home_server: str | None = None
    metadata: dict[str, Any] | None = None
    model: str | None = Field(
        None,
        description="Runs the turn's main agent with this id from `GET /models`; "
        "absent or null: the default. An unlisted id answers 400 `message.model_unknown`.",
    )

    @field_validator("message")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("message should not be empty")
        return value

    @field_validator("mcp_invocations")
    @classmethod
    def _invocations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for key, token in value.items():
            if not _TOOL_KEY_RE.fullmatch(key):
                raise ValueError(
                    f"key {key[:80]!r} is not <server>__<tool> (letters, digits, _ . -)"
                )
            if not token.strip() or len(token) > MAX_INVOCATION_CHARS:
                raise ValueError(f"{key}: an invocation is 1 to {MAX_INVOCATION_CHARS} characters")
            if not _BASE64_RE.fullmatch(token):
                raise ValueError(f"{key}: an invocation is base64 (a CAR file)")
        return value

    def turn_state(self) -> dict[str, Any]:
        """State keys the server supplies for the turn (CORE-53: they win)."""
        state: dict[str, Any] = {}
        if self.tools is not None:
            state["browser_tools"] = [
                {"name": t.name, "description": t.description, "schema": t.schema_}
                for t in self.tools
            ]
        if self.ag_actions is not None:
            state["ag_actions"] = [
                {
                    "name": a.name,
                    "description": a.description,
                    "schema": a.schema_,
                    **({"has_render": a.has_render} if a.has_render is not None else {}),
                }
                for a in self.ag_actions
            ]
        metadata = self.metadata or {}
        for key, target in (
            ("editorRoomId", "editor_room_id"),
            ("spaceId", "space_id"),
        ):
            if isinstance(metadata.get(key), str):
                state[target] = metadata[key]
        # The entity page the client is on: this turn's only. A message without it
        # clears the previous one instead of leaving it in the checkpoint.
        entity = metadata.get("currentEntityDid")
        state["current_entity_did"] = entity if isinstance(entity, str) and entity else None
        return state


class SecretValueDto(_Dto):
    """``PUT /secrets/{name}``."""

    value: str = Field(min_length=1, max_length=16_384, description="The secret's value.")


class SessionSettingsDto(_Dto):
    """``PATCH /sessions/{sessionId}``: the session's own settings."""

    multitask_strategy: MultitaskStrategy | None = Field(
        description=(
            "What a message does while the session runs a turn (enqueue, reject, "
            "interrupt, rollback); null goes back to SESSION_CONCURRENCY_POLICY."
        ),
    )


class AbortDto(_Dto):
    """``POST /messages/abort``."""

    session_id: str = Field(min_length=1)


class ApprovalDecisionDto(_Dto):
    """``POST /approvals/{approvalId}`` (plugins spec §20.2)."""

    decision: Literal["approved", "declined"]
    edited_args: dict[str, Any] | None = Field(
        None,
        description="Run the call with these arguments instead of the model's "
        "(`approved` only); the tool validates them as it would the model's.",
    )
    stream: StrictBool = Field(
        False, description="Answer with the resumed turn's event stream (SSE)."
    )

    @model_validator(mode="after")
    def _edits_need_approval(self) -> ApprovalDecisionDto:
        if self.edited_args is not None and self.decision != "approved":
            raise ValueError("editedArgs is only allowed with decision approved")
        return self


class StoreDelegationDto(_Dto):
    """``POST /delegation``."""

    raw: str = Field(min_length=1)
    issuer: str | None = None
    audience: str | None = None
    expiration: float | None = Field(None, ge=0)
