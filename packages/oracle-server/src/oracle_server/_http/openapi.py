"""The OpenAPI 3.1 document of the oracle, built once at boot from its routes (SRV-36).

Built-in operations are described by hand (summaries, response shapes) and take their
request bodies from the pydantic models of ``dto.py``; host and plugin routes are read
from their Starlette ``Route`` objects (path, methods, endpoint docstring). Whether an
operation needs authentication comes from the same ``ExclusionMatcher`` the request
pipeline uses, so the document cannot disagree with what the server enforces.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.convertors import (
    Convertor,
    FloatConvertor,
    IntegerConvertor,
    PathConvertor,
    UUIDConvertor,
)
from starlette.endpoints import HTTPEndpoint
from starlette.routing import BaseRoute, Mount, Route

from oracle_server._http.dto import AbortDto, SendMessageDto, StoreDelegationDto
from oracle_server._http.pipeline import ExclusionMatcher

__all__ = ["OPENAPI_VERSION", "PROTECTED_SECURITY", "SECURITY_SCHEMES", "build_openapi"]

OPENAPI_VERSION = "3.1.0"
SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "ucanInvocation": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "UCAN invocation (base64 CAR)",
        "description": (
            "A UCAN invocation issued by the user to the oracle, sent as "
            "`Authorization: Bearer <invocation>` **together with the header "
            "`X-Auth-Type: ucan`**; a bearer token without that header is ignored."
        ),
    },
    "ucanDelegation": {
        "type": "apiKey",
        "in": "header",
        "name": "x-ucan-delegation",
        "description": "A UCAN delegation from the user to the oracle (base64 CAR).",
    },
}
# Either scheme satisfies a protected operation: two alternatives, not one combined entry.
PROTECTED_SECURITY: list[dict[str, list[str]]] = [{"ucanInvocation": []}, {"ucanDelegation": []}]
MOUNT_METHODS = ("GET", "POST")
_HTTP_METHODS = ("GET", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "TRACE")
_PARAM_RE = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_TIMESTAMP = {"type": "string", "format": "date-time", "examples": ["2026-01-01T09:00:00.000Z"]}
_STRINGS = {"type": "array", "items": {"type": "string"}}


def _object(required: Sequence[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": properties}


RESPONSE_SCHEMAS: dict[str, dict[str, Any]] = {
    "ErrorBody": {
        **_object(
            ["statusCode", "message", "error"],
            statusCode={"type": "integer", "description": "Equals the HTTP status."},
            message={"anyOf": [{"type": "string"}, _STRINGS]},
            error={"type": "string", "description": "The reason phrase of the status."},
            code={
                "type": "string",
                "description": "A stable error code, when the error has one "
                "(e.g. `message.model_unknown`).",
            },
            outstandingClaims={**_STRINGS, "description": "402 only: unpaid claim ids."},
            claims={**_STRINGS, "description": "402 only: the same ids as outstandingClaims."},
        ),
        "description": "Every non-2xx response (SRV-1).",
    },
    "ChatSession": _object(
        ["sessionId", "lastUpdatedAt", "createdAt", "oracleName", "oracleDid", "oracleEntityDid"],
        sessionId={"type": "string"},
        title={"type": "string"},
        lastUpdatedAt=_TIMESTAMP,
        createdAt=_TIMESTAMP,
        oracleName={"type": "string"},
        oracleDid=_nullable({"type": "string"}),
        oracleEntityDid=_nullable({"type": "string"}),
        lastProcessedCount={"type": "integer"},
        userContext={"type": "object"},
        roomId={"type": "string"},
        slackThreadTs={"type": "string"},
    ),
    "SessionList": _object(
        ["sessions", "total"],
        sessions={"type": "array", "items": _ref("ChatSession")},
        total={"type": "integer", "minimum": 0},
    ),
    "SessionDeleted": _object(["message"], message={"const": "Session deleted successfully"}),
    "ToolCallDto": _object(
        ["name", "id", "args"],
        name={"type": "string"},
        id=_nullable({"type": "string"}),
        args={"type": "object"},
        status={"const": "done"},
        output={"type": "string", "description": "The tool's result, JSON-encoded."},
    ),
    "MessageDto": _object(
        ["id", "type", "content", "isComplete", "isReasoning"],
        id={"type": "string"},
        type={"enum": ["ai", "human"]},
        content={"type": "string"},
        toolCalls={"type": "array", "items": _ref("ToolCallDto")},
        reasoning={"type": "string"},
        isComplete={"const": True},
        isReasoning={"const": False},
        attachment={"type": "object"},
    ),
    "MessageList": _object(["messages"], messages={"type": "array", "items": _ref("MessageDto")}),
    "ActiveRun": _object(
        ["run"],
        run=_nullable(
            _object(
                ["runId", "status"],
                runId={"type": "string"},
                status={"enum": ["queued", "running", "recovering"]},
            )
        ),
    ),
    "MessagePage": _object(
        ["messages", "prevCursor", "nextCursor", "hasOlder", "hasNewer"],
        messages={"type": "array", "items": _ref("MessageDto")},
        prevCursor={"type": "string", "description": "Pass as `before` for older messages."},
        nextCursor={"type": "string", "description": "Pass as `after` for newer messages."},
        hasOlder={"type": "boolean"},
        hasNewer={"type": "boolean"},
    ),
    "MessageReply": _object(
        ["message", "sessionId"],
        message=_object(
            ["type", "content", "id"],
            type={"const": "ai"},
            content={"type": "string"},
            id={"type": "string"},
        ),
        sessionId={"type": "string"},
        messages={
            "type": "array",
            "items": _ref("MessageDto"),
            "description": "With `returnAllMessages`: the whole thread.",
        },
    ),
    "AbortResult": _object(["success"], success={"type": "boolean"}),
    "DelegationStored": _object(
        ["ok"], ok={"const": True}, expiration={"type": "integer", "description": "Unix seconds."}
    ),
    "DelegationStatus": _object(
        ["authorized"],
        authorized={"type": "boolean"},
        expiration={"type": "integer", "description": "Unix seconds."},
    ),
    "Ok": _object(["ok"], ok={"const": True}),
    "RootStatus": _object(
        ["status", "message", "timestamp"],
        status={"const": "ok"},
        message={"type": "string", "examples": ["My Oracle is running"]},
        timestamp=_TIMESTAMP,
    ),
    "Health": _object(["status", "timestamp"], status={"const": "ok"}, timestamp=_TIMESTAMP),
    "Readiness": _object(
        ["status", "matrix", "signingKey", "timestamp"],
        status={"enum": ["ready", "starting"]},
        matrix={"type": "string"},
        signingKey={"type": "boolean"},
        timestamp=_TIMESTAMP,
    ),
    "ModelList": _object(
        ["models"],
        models={
            "type": "array",
            "items": _object(["id"], id={"type": "string"}, isDefault={"type": "boolean"}),
        },
        default=_nullable({"type": "string"}),
    ),
    "OpenApiDocument": {"type": "object", "description": "This document."},
}
_SSE_DESCRIPTION = (
    "With `stream: true`: server-sent events, each frame `event: <name>\\ndata: <JSON>\\n\\n`. "
    "Events: `reasoning`, `message`, `tool_call`, `action_call`, `render_component`, "
    "`router.update`, `message_cache_invalidation`, `error`, and `done` last."
)


def _json_response(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _error(description: str) -> dict[str, Any]:
    return _json_response(description, "ErrorBody")


@dataclass(frozen=True)
class _Operation:
    """What the document says about one built-in operation."""

    summary: str
    tag: str
    responses: Mapping[str, Mapping[str, Any]]
    request_model: type[BaseModel] | None = None
    parameters: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_OK = "200"
_BUILTIN: dict[tuple[str, str], _Operation] = {
    ("GET", "/"): _Operation(
        "Oracle status", "system", {_OK: _json_response("Running.", "RootStatus")}
    ),
    ("GET", "/health"): _Operation(
        "Liveness", "system", {_OK: _json_response("Serving.", "Health")}
    ),
    ("GET", "/ready"): _Operation(
        "Readiness",
        "system",
        {
            _OK: _json_response("Protected routes can be served.", "Readiness"),
            "503": _json_response("Still starting.", "Readiness"),
        },
    ),
    ("GET", "/models"): _Operation(
        "Models a message may select", "system", {_OK: _json_response("Models.", "ModelList")}
    ),
    ("POST", "/sessions"): _Operation(
        "Create a session",
        "sessions",
        {"201": _json_response("Created.", "ChatSession"), "400": _error("Creation failed.")},
    ),
    ("GET", "/sessions"): _Operation(
        "List the caller's sessions, newest first",
        "sessions",
        {_OK: _json_response("A page of sessions.", "SessionList"), "400": _error("Bad paging.")},
        parameters=(
            _query("limit", {"type": "integer", "minimum": 1, "default": 20}, "Clamped to 100."),
            _query("offset", {"type": "integer", "minimum": 0, "default": 0}, "Sessions skipped."),
        ),
    ),
    ("DELETE", "/sessions/{sessionId}"): _Operation(
        "Delete a session and its checkpoints",
        "sessions",
        {
            _OK: _json_response("Deleted.", "SessionDeleted"),
            "404": _error("Session not found."),
        },
    ),
    ("POST", "/messages/abort"): _Operation(
        "Abort the caller's running turn",
        "messages",
        {_OK: _json_response("Whether a turn was aborted.", "AbortResult")},
        request_model=AbortDto,
    ),
    ("POST", "/messages/{sessionId}"): _Operation(
        "Send a message (JSON reply, or SSE with `stream: true`)",
        "messages",
        {
            _OK: {
                "description": "The reply, or with `stream: true` the event stream.",
                "content": {
                    "application/json": {"schema": _ref("MessageReply")},
                    "text/event-stream": {
                        "schema": {"type": "string", "description": _SSE_DESCRIPTION}
                    },
                },
            },
            "400": _error(
                "Invalid body (`message` lists the problems), or a `model` that "
                "`GET /models` does not list (`code`: `message.model_unknown`)."
            ),
            "404": _error("Session not found."),
            "409": _error("A turn is already running, or the turn was aborted."),
        },
        request_model=SendMessageDto,
    ),
    ("GET", "/messages/{sessionId}"): _Operation(
        "Messages of a session",
        "messages",
        {_OK: _json_response("The thread.", "MessageList"), "404": _error("Session not found.")},
    ),
    ("GET", "/sessions/{sessionId}/messages"): _Operation(
        "Messages of a session, a page at a time (newest page without a cursor)",
        "sessions",
        {
            _OK: _json_response("A page of the thread.", "MessagePage"),
            "400": _error("Bad limit or cursor."),
            "404": _error("Session not found."),
        },
        parameters=(
            _query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "Page size.",
            ),
            _query("before", {"type": "string"}, "A `prevCursor`: the page before it."),
            _query("after", {"type": "string"}, "A `nextCursor`: the page after it."),
        ),
    ),
    ("GET", "/runs/{runId}"): _Operation(
        "Rejoin a run: its events after `after`, then live until `done` (SSE)",
        "messages",
        {
            _OK: {
                "description": "The run's events as server-sent events.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            "400": _error("Bad `after`."),
            "404": _error("Run not found, expired, or its events after `after` were dropped."),
        },
        parameters=(
            _query("after", {"type": "integer", "minimum": 0, "default": 0}, "Last event id seen."),
        ),
    ),
    ("GET", "/sessions/{sessionId}/run"): _Operation(
        "The session's queued, running or recovering run",
        "sessions",
        {_OK: _json_response("The run or null.", "ActiveRun"), "404": _error("Session not found.")},
    ),
    ("POST", "/delegation"): _Operation(
        "Store the caller's delegation to the oracle",
        "delegation",
        {
            _OK: _json_response("Stored.", "DelegationStored"),
            "403": _error("Not issued by the authenticated user."),
        },
        request_model=StoreDelegationDto,
    ),
    ("GET", "/delegation"): _Operation(
        "Whether a usable delegation is stored",
        "delegation",
        {_OK: _json_response("Status.", "DelegationStatus")},
    ),
    ("DELETE", "/delegation"): _Operation(
        "Remove and revoke the stored delegation",
        "delegation",
        {_OK: _json_response("Removed.", "Ok")},
    ),
    ("GET", "/openapi.json"): _Operation(
        "This OpenAPI document", "docs", {_OK: _json_response("OpenAPI 3.1.", "OpenApiDocument")}
    ),
    ("GET", "/docs/json"): _Operation(
        "This OpenAPI document (Swagger UI's copy)",
        "docs",
        {_OK: _json_response("OpenAPI 3.1.", "OpenApiDocument")},
    ),
    ("GET", "/docs"): _Operation(
        "Swagger UI",
        "docs",
        {
            _OK: {
                "description": "HTML page.",
                "content": {"text/html": {"schema": {"type": "string"}}},
            }
        },
    ),
    ("GET", "/docs/{path}"): _Operation(
        "Swagger UI asset (served by the oracle, no CDN)",
        "docs",
        {_OK: {"description": "CSS, JavaScript or image.", "content": {"*/*": {}}}},
    ),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _param_schema(convertor: Convertor[Any] | None) -> dict[str, Any]:
    if isinstance(convertor, IntegerConvertor):
        return {"type": "integer", "minimum": 0}
    if isinstance(convertor, FloatConvertor):
        return {"type": "number", "minimum": 0}
    if isinstance(convertor, UUIDConvertor):
        return {"type": "string", "format": "uuid"}
    return {"type": "string"}


@dataclass(frozen=True)
class _Endpoint:
    """One (path, method) the app serves, flattened out of routes and mounts."""

    path_format: str
    method: str
    endpoint: Any
    name: str
    convertors: Mapping[str, Convertor[Any]]


def _route_methods(route: Route) -> list[str]:
    if route.methods is not None:
        methods = set(route.methods)
    elif inspect.isclass(route.endpoint) and issubclass(route.endpoint, HTTPEndpoint):
        methods = {m for m in _HTTP_METHODS if hasattr(route.endpoint, m.lower())}
    else:
        methods = {"GET"}
    if "GET" in methods:
        methods.discard("HEAD")
    return [m for m in (*_HTTP_METHODS, "HEAD") if m in methods]


def _flatten(route: BaseRoute, prefix: str = "") -> Iterator[_Endpoint]:
    if isinstance(route, Route):
        for method in _route_methods(route):
            endpoint = route.endpoint
            if inspect.isclass(endpoint) and issubclass(endpoint, HTTPEndpoint):
                endpoint = getattr(endpoint, method.lower(), endpoint)
            yield _Endpoint(
                prefix + route.path_format, method, endpoint, route.name, route.param_convertors
            )
    elif isinstance(route, Mount):
        inner = getattr(route.app, "routes", None)
        if inner:
            for child in inner:
                for found in _flatten(child, prefix + route.path):
                    convertors = {**route.param_convertors, **found.convertors}
                    yield _Endpoint(
                        found.path_format,
                        found.method,
                        found.endpoint,
                        found.name,
                        convertors,
                    )
        else:
            for method in MOUNT_METHODS:
                yield _Endpoint(
                    prefix + route.path or "/",
                    method,
                    route.app,
                    route.name or "mount",
                    route.param_convertors,
                )
    # WebSocket routes and hosts have no place in an OpenAPI document.


def _builtin_tag(path: str) -> str:
    """The tag of a built-in route with no hand-written entry: its first path segment."""
    segment = path.strip("/").split("/", 1)[0]
    return segment if segment and "{" not in segment else "system"


def _restates_route(line: str) -> bool:
    """Whether a docstring line only names the route (``GET /health``.): no news for readers."""
    return not re.sub(r"^``[^`]*``", "", line).strip(" .:")


def _docstring(endpoint: Any) -> tuple[str | None, str | None]:
    doc = inspect.getdoc(endpoint)
    if not doc:
        return None, None
    first, _, rest = doc.partition("\n")
    return first.strip() or None, rest.strip() or None


class _DocumentBuilder:
    def __init__(self, exclusions: ExclusionMatcher) -> None:
        self.exclusions = exclusions
        self.paths: dict[str, dict[str, Any]] = {}
        self.schemas: dict[str, Any] = dict(RESPONSE_SCHEMAS)
        self.operation_ids: set[str] = set()

    def request_body(self, model: type[BaseModel]) -> dict[str, Any]:
        schema = model.model_json_schema(by_alias=True, ref_template=_REF)
        self.schemas.update(schema.pop("$defs", {}))
        self.schemas[model.__name__] = schema
        return {"required": True, "content": {"application/json": {"schema": _ref(model.__name__)}}}

    def operation_id(self, name: str, method: str) -> str:
        base = _camel(re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")) or method.lower()
        candidate = base if base not in self.operation_ids else base + method.title()
        counter = 2
        while candidate in self.operation_ids:
            candidate, counter = f"{base}{method.title()}{counter}", counter + 1
        self.operation_ids.add(candidate)
        return candidate

    def add(self, found: _Endpoint, *, owner: str | None) -> None:
        path = _PARAM_RE.sub(lambda m: "{" + _camel(m.group(1)) + "}", found.path_format)
        sample = _PARAM_RE.sub("_", found.path_format)
        public = self.exclusions.matches(found.method, sample)
        known = _BUILTIN.get((found.method, path)) if owner is None else None
        summary, description = _docstring(found.endpoint)
        operation: dict[str, Any] = {
            "operationId": self.operation_id(found.name, found.method),
            "summary": known.summary if known else summary or f"{found.method} {path}",
        }
        if known and summary and not _restates_route(summary):
            description = "\n\n".join(p for p in (summary, description) if p)
        if description:
            operation["description"] = description
        operation["tags"] = [known.tag if known else owner or _builtin_tag(path)]
        if owner not in (None, "host"):
            operation["x-oracle-plugin"] = owner
        parameters: list[dict[str, Any]] = [
            {
                "name": _camel(name),
                "in": "path",
                "required": True,
                "schema": _param_schema(found.convertors.get(name)),
                **(
                    {"description": "May contain `/`."}
                    if isinstance(found.convertors.get(name), PathConvertor)
                    else {}
                ),
            }
            for name in _PARAM_RE.findall(found.path_format)
        ]
        parameters.extend(dict(p) for p in (known.parameters if known else ()))
        if not public:
            parameters.append({"$ref": "#/components/parameters/XAuthType"})
        if parameters:
            operation["parameters"] = parameters
        if known and known.request_model is not None:
            operation["requestBody"] = self.request_body(known.request_model)
        responses: dict[str, Any] = (
            {k: dict(v) for k, v in known.responses.items()}
            if known
            else {_OK: {"description": "Success."}}
        )
        if "requestBody" in operation:
            responses.setdefault("400", _error("Invalid body; `message` lists the problems."))
            responses.setdefault("413", _error("Body over the size limit."))
        if not public:
            responses.setdefault("401", _error("Missing or invalid UCAN, or oracle not ready."))
            responses.setdefault("402", _error("Subscription or credits required."))
            responses.setdefault("429", _error("Too many requests."))
        responses["default"] = _error("Error (SRV-1 shape).")
        operation["responses"] = dict(sorted(responses.items()))
        operation["security"] = [] if public else PROTECTED_SECURITY
        self.paths.setdefault(path, {})[found.method.lower()] = operation


def build_openapi(
    *,
    title: str,
    version: str,
    routes: Iterable[BaseRoute],
    exclusions: ExclusionMatcher,
    extra_routes: Iterable[tuple[str, BaseRoute]] = (),
    description: str | None = None,
) -> dict[str, Any]:
    """Build the OpenAPI 3.1 document of an oracle.

    Args:
        title: ``info.title``, usually the oracle's name.
        version: ``info.version``.
        routes: The built-in routes. Known operations get hand-written summaries, response
            schemas and request bodies from ``dto.py``; unknown ones are read like
            ``extra_routes``.
        exclusions: The pipeline's public-route matcher: an operation it matches declares
            ``security: []``, every other one accepts either UCAN scheme.
        extra_routes: ``(owner, route)`` pairs for host routes (owner ``"host"``) and plugin
            routes (owner the plugin name, also recorded as ``x-oracle-plugin``). Path and
            methods come from the ``Route``; summary and description from the endpoint's
            docstring.
        description: ``info.description``.

    Returns:
        The document as JSON-ready dicts. Starlette path parameters ``{name}`` and
        ``{name:path}`` become OpenAPI path parameters named in camelCase, the wire style.
    """
    builder = _DocumentBuilder(exclusions)
    for route in routes:
        for found in _flatten(route):
            builder.add(found, owner=None)
    for owner, route in extra_routes:
        for found in _flatten(route):
            builder.add(found, owner=owner)
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return {
        "openapi": OPENAPI_VERSION,
        "info": info,
        "paths": builder.paths,
        "components": {
            "schemas": dict(sorted(builder.schemas.items())),
            "securitySchemes": SECURITY_SCHEMES,
            "parameters": {
                "XAuthType": {
                    "name": "X-Auth-Type",
                    "in": "header",
                    "required": False,
                    "schema": {"const": "ucan"},
                    "description": "Send `ucan` with `Authorization: Bearer <invocation>`.",
                }
            },
        },
        "security": PROTECTED_SECURITY,
        "tags": [
            {"name": "system", "description": "Status, liveness, readiness, models."},
            {"name": "sessions", "description": "Chat sessions (threads)."},
            {"name": "messages", "description": "Turns, history and abort."},
            {"name": "delegation", "description": "The user's stored UCAN delegation."},
            {"name": "docs", "description": "This document and Swagger UI."},
        ],
    }
