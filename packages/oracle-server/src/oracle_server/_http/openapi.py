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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
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

from oracle_server._http.openapi_operations import (
    BUILTIN_OPERATIONS,
    OK,
    REF,
    RESPONSE_SCHEMAS,
    error_response_doc,
    schema_ref,
)
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
        schema = model.model_json_schema(by_alias=True, ref_template=REF)
        self.schemas.update(schema.pop("$defs", {}))
        self.schemas[model.__name__] = schema
        return {
            "required": True,
            "content": {"application/json": {"schema": schema_ref(model.__name__)}},
        }

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
        known = BUILTIN_OPERATIONS.get((found.method, path)) if owner is None else None
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
        elif known and known.raw_body is not None:
            operation["requestBody"] = {"required": True, "content": dict(known.raw_body)}
        responses: dict[str, Any] = (
            {k: dict(v) for k, v in known.responses.items()}
            if known
            else {OK: {"description": "Success."}}
        )
        if "requestBody" in operation:
            responses.setdefault(
                "400", error_response_doc("Invalid body; `message` lists the problems.")
            )
            responses.setdefault("413", error_response_doc("Body over the size limit."))
        if not public:
            responses.setdefault("401", error_response_doc("Missing or invalid UCAN."))
            responses.setdefault("402", error_response_doc("Subscription or credits required."))
            responses.setdefault("429", error_response_doc("Too many requests."))
            responses.setdefault("503", error_response_doc("Oracle not ready yet (`Retry-After`)."))
        responses["default"] = error_response_doc("Error (SRV-1 shape).")
        operation["responses"] = dict(sorted(responses.items()))
        operation["security"] = [] if public else PROTECTED_SECURITY
        self.paths.setdefault(path, {})[found.method.lower()] = operation


def _policy_markdown(report: Mapping[str, Any]) -> str:
    """The effective tool policy as a short Markdown section of ``info.description``."""
    rules = report["rules"]

    def globs(patterns: Iterable[str]) -> str:
        return ", ".join(f"`{p}`" for p in patterns) or "none"

    destructive = " and every destructive tool" if rules["approve_destructive"] else ""
    lines = [
        "### Tool policy",
        "",
        f"- allow: {globs(rules['allow'])}",
        f"- deny: {globs(rules['deny'])}",
        f"- approval required: {globs(rules['approval_required'])}{destructive}",
    ]
    if report["denied"]:
        lines.append(f"- denied here: {globs(report['denied'])}")
    if report["approval_required"]:
        lines.append(f"- need approval here: {globs(report['approval_required'])}")
    return "\n".join(lines)


def build_openapi(
    *,
    title: str,
    version: str,
    routes: Iterable[BaseRoute],
    exclusions: ExclusionMatcher,
    extra_routes: Iterable[tuple[str, BaseRoute]] = (),
    description: str | None = None,
    tool_policy: Mapping[str, Any] | None = None,
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
        tool_policy: ``OracleRuntime.tool_policy_report()``: published as
            ``info.x-oracle-tool-policy`` and summarised at the end of the description.

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
    if tool_policy is not None:
        summary = _policy_markdown(tool_policy)
        description = f"{description}\n\n{summary}" if description else summary
        info["x-oracle-tool-policy"] = dict(tool_policy)
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
            {"name": "secrets", "description": "The caller's secrets: names and writes only."},
            {"name": "messages", "description": "Turns, history and abort."},
            {"name": "approvals", "description": "Tool calls waiting for the user's approval."},
            {"name": "delegation", "description": "The user's stored UCAN delegation."},
            {"name": "docs", "description": "This document and Swagger UI."},
        ],
    }
