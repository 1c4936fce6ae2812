"""What the OpenAPI document says about the built-in routes: response schemas, summaries,
tags and parameters (SRV-36). Request bodies come from the pydantic models of ``dto.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from oracle_server._http.dto import (
    AbortDto,
    ApprovalDecisionDto,
    SecretValueDto,
    SendMessageDto,
    SessionSettingsDto,
    StoreDelegationDto,
)

__all__ = [
    "BUILTIN_OPERATIONS",
    "OK",
    "REF",
    "RESPONSE_SCHEMAS",
    "Operation",
    "error_response_doc",
    "schema_ref",
]

REF = "#/components/schemas/{model}"


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


TIMESTAMP = {"type": "string", "format": "date-time", "examples": ["2026-01-01T09:00:00.000Z"]}
STRINGS = {"type": "array", "items": {"type": "string"}}


def object_schema(required: Sequence[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "ErrorBody": {
        **object_schema(
            ["statusCode", "message", "error", "requestId"],
            statusCode={"type": "integer", "description": "Equals the HTTP status."},
            message={"anyOf": [{"type": "string"}, STRINGS]},
            error={"type": "string", "description": "The reason phrase of the status."},
            requestId={
                "type": "string",
                "description": "The request's id, as in its `X-Request-Id` header.",
            },
            code={
                "type": "string",
                "description": "A stable error code, when the error has one "
                "(e.g. `message.model_unknown`, `request.bad_number`, `server.not_ready`).",
            },
            outstandingClaims={**STRINGS, "description": "402 only: unpaid claim ids."},
            claims={**STRINGS, "description": "402 only: the same ids as outstandingClaims."},
        ),
        "description": "Every non-2xx response (SRV-1).",
    },
    "ChatSession": object_schema(
        ["sessionId", "lastUpdatedAt", "createdAt", "oracleName", "oracleDid", "oracleEntityDid"],
        sessionId={"type": "string"},
        title={"type": "string"},
        lastUpdatedAt=TIMESTAMP,
        createdAt=TIMESTAMP,
        oracleName={"type": "string"},
        oracleDid=nullable({"type": "string"}),
        oracleEntityDid=nullable({"type": "string"}),
        lastProcessedCount={"type": "integer"},
        userContext={"type": "object"},
        roomId={"type": "string"},
        slackThreadTs={"type": "string"},
        multitaskStrategy={
            "type": "string",
            "enum": ["enqueue", "reject", "interrupt", "rollback"],
            "description": "The session's double-texting policy, when it has its own.",
        },
    ),
    "SessionList": object_schema(
        ["sessions", "total"],
        sessions={"type": "array", "items": schema_ref("ChatSession")},
        total={"type": "integer", "minimum": 0},
    ),
    "UploadedFile": object_schema(
        ["mxcUri", "filename", "mimetype", "size"],
        mxcUri={"type": "string"},
        filename={"type": "string"},
        mimetype={"type": "string"},
        size={"type": "integer"},
    ),
    "SecretList": object_schema(
        ["secrets"],
        secrets={
            "type": "array",
            "items": object_schema(["name"], name={"type": "string"}, updatedAt={"type": "string"}),
        },
    ),
    "SecretSaved": object_schema(["name"], name={"type": "string"}),
    "SecretDeleted": object_schema(["deleted"], deleted={"const": True}),
    "SessionDeleted": object_schema(["message"], message={"const": "Session deleted successfully"}),
    "ToolCallDto": object_schema(
        ["name", "id", "args"],
        name={"type": "string"},
        id=nullable({"type": "string"}),
        args={"type": "object"},
        status={"const": "done"},
        output={"type": "string", "description": "The tool's result, JSON-encoded."},
    ),
    "MessageDto": object_schema(
        ["id", "type", "content", "isComplete", "isReasoning"],
        id={"type": "string"},
        type={"enum": ["ai", "human"]},
        content={"type": "string"},
        toolCalls={"type": "array", "items": schema_ref("ToolCallDto")},
        reasoning={"type": "string"},
        isComplete={"const": True},
        isReasoning={"const": False},
        attachment={"type": "object"},
        attachments={
            "type": "array",
            "description": "The files the user attached (their text went to the model only).",
            "items": object_schema(
                ["filename", "mimetype", "size"],
                filename={"type": "string"},
                mimetype={"type": "string"},
                size={"type": "integer"},
                source={"type": "string", "description": "The mxc:// URI or event id."},
            ),
        },
    ),
    "MessageList": object_schema(
        ["messages"], messages={"type": "array", "items": schema_ref("MessageDto")}
    ),
    "ActiveRun": object_schema(
        ["run"],
        run=nullable(
            object_schema(
                ["runId", "status"],
                runId={"type": "string"},
                status={"enum": ["queued", "running", "recovering"]},
            )
        ),
    ),
    "MessagePage": object_schema(
        ["messages", "prevCursor", "nextCursor", "hasOlder", "hasNewer"],
        messages={"type": "array", "items": schema_ref("MessageDto")},
        prevCursor={"type": "string", "description": "Pass as `before` for older messages."},
        nextCursor={"type": "string", "description": "Pass as `after` for newer messages."},
        hasOlder={"type": "boolean"},
        hasNewer={"type": "boolean"},
    ),
    "MessageReply": object_schema(
        ["message", "sessionId"],
        message=object_schema(
            ["type", "content", "id"],
            type={"const": "ai"},
            content={"type": "string"},
            id={"type": "string"},
        ),
        sessionId={"type": "string"},
        messages={
            "type": "array",
            "items": schema_ref("MessageDto"),
            "description": "With `returnAllMessages`: the whole thread.",
        },
        approvals={
            "type": "array",
            "items": schema_ref("Approval"),
            "description": "Tool calls the turn paused on for the user's approval; "
            "`message` then asks for a yes or no.",
        },
    ),
    "AbortResult": object_schema(["success"], success={"type": "boolean"}),
    "Approval": object_schema(
        [
            "approvalId",
            "sessionId",
            "runId",
            "toolCallId",
            "toolName",
            "args",
            "reason",
            "requestedAt",
            "expiresAt",
            "status",
        ],
        approvalId={"type": "string"},
        sessionId={"type": "string"},
        runId={"type": "string", "description": "The run that paused."},
        toolCallId={"type": "string"},
        toolName={"type": "string"},
        args={
            "type": "object",
            "description": "The call's arguments as shown to the user (through the tool's "
            "redaction hook).",
        },
        reason={"type": "string", "description": "The policy rule that asked for approval."},
        requestedAt=TIMESTAMP,
        expiresAt=TIMESTAMP,
        status={"enum": ["pending", "approved", "declined", "expired", "superseded"]},
        decidedAt=TIMESTAMP,
        decidedVia={"enum": ["api", "message"]},
    ),
    "ApprovalList": object_schema(
        ["approvals"], approvals={"type": "array", "items": schema_ref("Approval")}
    ),
    "ApprovalDecided": {
        **object_schema(
            ["approvalId", "decision", "runId", "message", "sessionId"],
            approvalId={"type": "string"},
            decision={"enum": ["approved", "declined"]},
            runId={"type": "string", "description": "The run that resumed the turn."},
            message=object_schema(
                ["type", "content", "id"],
                type={"const": "ai"},
                content={"type": "string"},
                id={"type": "string"},
            ),
            sessionId={"type": "string"},
            approvals={
                "type": "array",
                "items": schema_ref("Approval"),
                "description": "Calls the resumed turn paused on in turn.",
            },
        ),
        "description": "The decision and the resumed turn's reply.",
    },
    "DelegationStored": object_schema(
        ["ok"], ok={"const": True}, expiration={"type": "integer", "description": "Unix seconds."}
    ),
    "DelegationStatus": object_schema(
        ["authorized"],
        authorized={"type": "boolean"},
        expiration={"type": "integer", "description": "Unix seconds."},
    ),
    "Ok": object_schema(["ok"], ok={"const": True}),
    "RootStatus": object_schema(
        ["status", "message", "timestamp"],
        status={"const": "ok"},
        message={"type": "string", "examples": ["My Oracle is running"]},
        timestamp=TIMESTAMP,
    ),
    "Health": object_schema(
        ["status", "timestamp"],
        status={"const": "ok"},
        timestamp=TIMESTAMP,
        worker={
            "type": "integer",
            "description": "Under `oracle serve --workers N`: the index of the worker process "
            "that answered (0 … N-1).",
        },
    ),
    "Readiness": object_schema(
        ["status", "matrix", "signingKey", "timestamp"],
        status={"enum": ["ready", "starting"]},
        matrix={"type": "string"},
        signingKey={"type": "boolean"},
        timestamp=TIMESTAMP,
    ),
    "ModelList": object_schema(
        ["models"],
        models={
            "type": "array",
            "items": object_schema(["id"], id={"type": "string"}, isDefault={"type": "boolean"}),
        },
        default=nullable({"type": "string"}),
    ),
    "OpenApiDocument": {"type": "object", "description": "This document."},
}
SSE_DESCRIPTION = (
    "With `stream: true`: server-sent events, each frame `event: <name>\\ndata: <JSON>\\n\\n`. "
    "Events: `reasoning`, `message`, `tool_call`, `action_call`, `render_component`, "
    "`router.update`, `message_cache_invalidation`, `tool_approval_request` (a call waits "
    "for the user's approval), `error`, and `done` last."
)


def json_response(description: str, schema: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": schema_ref(schema)}},
    }


def error_response_doc(description: str) -> dict[str, Any]:
    return json_response(description, "ErrorBody")


@dataclass(frozen=True)
class Operation:
    """What the document says about one built-in operation."""

    summary: str
    tag: str
    responses: Mapping[str, Mapping[str, Any]]
    request_model: type[BaseModel] | None = None
    parameters: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    raw_body: Mapping[str, Any] | None = None
    """A body that is not JSON: its ``content`` by media type."""


def query_parameter(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


OK = "200"
BUILTIN_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/"): Operation(
        "Oracle status", "system", {OK: json_response("Running.", "RootStatus")}
    ),
    ("GET", "/health"): Operation("Liveness", "system", {OK: json_response("Serving.", "Health")}),
    ("GET", "/ready"): Operation(
        "Readiness",
        "system",
        {
            OK: json_response("Protected routes can be served.", "Readiness"),
            "503": json_response("Still starting.", "Readiness"),
        },
    ),
    ("GET", "/models"): Operation(
        "Models a message may select", "system", {OK: json_response("Models.", "ModelList")}
    ),
    ("POST", "/sessions"): Operation(
        "Create a session",
        "sessions",
        {
            "201": json_response("Created.", "ChatSession"),
            "400": error_response_doc("Creation failed."),
        },
    ),
    ("GET", "/sessions"): Operation(
        "List the caller's sessions, newest first",
        "sessions",
        {
            OK: json_response("A page of sessions.", "SessionList"),
            "400": error_response_doc("Bad paging."),
        },
        parameters=(
            query_parameter(
                "limit", {"type": "integer", "minimum": 1, "default": 20}, "Clamped to 100."
            ),
            query_parameter(
                "offset", {"type": "integer", "minimum": 0, "default": 0}, "Sessions skipped."
            ),
        ),
    ),
    ("PATCH", "/sessions/{sessionId}"): Operation(
        "Change a session's settings (its double-texting policy)",
        "sessions",
        {
            OK: json_response("The session.", "ChatSession"),
            "400": error_response_doc("Bad settings."),
            "404": error_response_doc("Session not found."),
        },
        request_model=SessionSettingsDto,
    ),
    ("DELETE", "/sessions/{sessionId}"): Operation(
        "Delete a session and its checkpoints",
        "sessions",
        {
            OK: json_response("Deleted.", "SessionDeleted"),
            "404": error_response_doc("Session not found."),
        },
    ),
    ("POST", "/attachments"): Operation(
        "Upload a file to attach to a message (the body is the file)",
        "messages",
        {
            "201": json_response("Stored; send it as an entry of `attachments`.", "UploadedFile"),
            "400": error_response_doc("No filename, or an empty body."),
            "409": error_response_doc("This oracle has nowhere to keep uploads."),
            "422": error_response_doc("A type the oracle does not read (attachment.unsupported)."),
            "429": error_response_doc(
                "The daily upload quota is spent (attachment.quota_exceeded)."
            ),
        },
        parameters=(
            {
                "name": "filename",
                "in": "query",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                "description": "The file's name.",
            },
        ),
        raw_body={"*/*": {"schema": {"type": "string", "format": "binary"}}},
    ),
    ("GET", "/secrets"): Operation(
        "List the caller's secrets (names, never values)",
        "secrets",
        {OK: json_response("The names.", "SecretList")},
    ),
    ("PUT", "/secrets/{name}"): Operation(
        "Set one of the caller's secrets",
        "secrets",
        {
            OK: json_response("Saved.", "SecretSaved"),
            "400": error_response_doc("Bad name or value (code secrets.bad_name / too_large)."),
            "409": error_response_doc("Too many secrets, or this oracle cannot store them."),
            "503": error_response_doc("The store cannot be reached right now."),
        },
        request_model=SecretValueDto,
    ),
    ("DELETE", "/secrets/{name}"): Operation(
        "Delete one of the caller's secrets",
        "secrets",
        {
            OK: json_response("Deleted.", "SecretDeleted"),
            "404": error_response_doc("No such secret."),
        },
    ),
    ("POST", "/messages/abort"): Operation(
        "Abort the caller's running turn",
        "messages",
        {OK: json_response("Whether a turn was aborted.", "AbortResult")},
        request_model=AbortDto,
    ),
    ("POST", "/messages/{sessionId}"): Operation(
        "Send a message (JSON reply, or SSE with `stream: true`)",
        "messages",
        {
            OK: {
                "description": "The reply, or with `stream: true` the event stream.",
                "content": {
                    "application/json": {"schema": schema_ref("MessageReply")},
                    "text/event-stream": {
                        "schema": {"type": "string", "description": SSE_DESCRIPTION}
                    },
                },
            },
            "400": error_response_doc(
                "Invalid body (`message` lists the problems), or a `model` that "
                "`GET /models` does not list (`code`: `message.model_unknown`)."
            ),
            "404": error_response_doc("Session not found."),
            "409": error_response_doc("A turn is already running, or the turn was aborted."),
        },
        request_model=SendMessageDto,
    ),
    ("GET", "/messages/{sessionId}"): Operation(
        "Messages of a session",
        "messages",
        {
            OK: json_response("The thread.", "MessageList"),
            "404": error_response_doc("Session not found."),
        },
    ),
    ("GET", "/sessions/{sessionId}/messages"): Operation(
        "Messages of a session, a page at a time (newest page without a cursor)",
        "sessions",
        {
            OK: json_response("A page of the thread.", "MessagePage"),
            "400": error_response_doc("Bad limit or cursor."),
            "404": error_response_doc("Session not found."),
        },
        parameters=(
            query_parameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "Page size.",
            ),
            query_parameter("before", {"type": "string"}, "A `prevCursor`: the page before it."),
            query_parameter("after", {"type": "string"}, "A `nextCursor`: the page after it."),
        ),
    ),
    ("GET", "/runs/{runId}"): Operation(
        "Rejoin a run: its events after `after`, then live until `done` (SSE)",
        "messages",
        {
            OK: {
                "description": "The run's events as server-sent events.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            "400": error_response_doc("Bad `after`."),
            "404": error_response_doc(
                "Run not found, expired, or its events after `after` were dropped."
            ),
        },
        parameters=(
            query_parameter(
                "after", {"type": "integer", "minimum": 0, "default": 0}, "Last event id seen."
            ),
        ),
    ),
    ("GET", "/sessions/{sessionId}/run"): Operation(
        "The session's queued, running or recovering run",
        "sessions",
        {
            OK: json_response("The run or null.", "ActiveRun"),
            "404": error_response_doc("Session not found."),
        },
    ),
    ("GET", "/approvals"): Operation(
        "The caller's tool approvals, newest first",
        "approvals",
        {
            OK: json_response("Up to 100 approvals.", "ApprovalList"),
            "400": error_response_doc("Unknown `status` (`code`: `approval.bad_status`)."),
        },
        parameters=(
            query_parameter("sessionId", {"type": "string"}, "Only this session's."),
            query_parameter(
                "status",
                {"enum": ["pending", "approved", "declined", "expired", "superseded"]},
                "Only approvals with this status.",
            ),
        ),
    ),
    ("POST", "/approvals/{approvalId}"): Operation(
        "Approve or decline a tool call; the paused turn resumes (JSON, or SSE with `stream`)",
        "approvals",
        {
            OK: {
                "description": "The decision with the resumed turn's reply, or its events.",
                "content": {
                    "application/json": {"schema": schema_ref("ApprovalDecided")},
                    "text/event-stream": {
                        "schema": {"type": "string", "description": SSE_DESCRIPTION}
                    },
                },
            },
            "400": error_response_doc("Invalid body (`message` lists the problems)."),
            "404": error_response_doc(
                "No such approval of the caller's (`code`: `approval.not_found`)."
            ),
            "409": error_response_doc(
                "Already answered (`code`: `approval.decided`), or a turn is running and the "
                "session rejects a second one (the decision stands; the next turn applies it)."
            ),
            "410": error_response_doc(
                "Expired before the decision; the call was not run (`code`: `approval.expired`)."
            ),
        },
        request_model=ApprovalDecisionDto,
    ),
    ("POST", "/delegation"): Operation(
        "Store the caller's delegation to the oracle",
        "delegation",
        {
            OK: json_response("Stored.", "DelegationStored"),
            "403": error_response_doc("Not issued by the authenticated user."),
        },
        request_model=StoreDelegationDto,
    ),
    ("GET", "/delegation"): Operation(
        "Whether a usable delegation is stored",
        "delegation",
        {OK: json_response("Status.", "DelegationStatus")},
    ),
    ("DELETE", "/delegation"): Operation(
        "Remove and revoke the stored delegation",
        "delegation",
        {OK: json_response("Removed.", "Ok")},
    ),
    ("GET", "/openapi.json"): Operation(
        "This OpenAPI document", "docs", {OK: json_response("OpenAPI 3.1.", "OpenApiDocument")}
    ),
    ("GET", "/docs/json"): Operation(
        "This OpenAPI document (Swagger UI's copy)",
        "docs",
        {OK: json_response("OpenAPI 3.1.", "OpenApiDocument")},
    ),
    ("GET", "/docs"): Operation(
        "Swagger UI",
        "docs",
        {
            OK: {
                "description": "HTML page.",
                "content": {"text/html": {"schema": {"type": "string"}}},
            }
        },
    ),
    ("GET", "/docs/{path}"): Operation(
        "Swagger UI asset (served by the oracle, no CDN)",
        "docs",
        {OK: {"description": "CSS, JavaScript or image.", "content": {"*/*": {}}}},
    ),
}
