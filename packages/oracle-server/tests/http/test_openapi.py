"""The OpenAPI document and the offline Swagger UI (SRV-36, SRV-70 d)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

from oracle_core import AuthExcludedRoute, OraclePlugin, PluginContext
from oracle_server import OracleApp, create_oracle_app
from oracle_server._http.docs_ui import ApiDocs, swagger_ui_dir
from oracle_server._http.openapi import PROTECTED_SECURITY, build_openapi
from oracle_server._http.pipeline import BUILTIN_EXCLUSIONS, ExclusionMatcher

BOTH_SCHEMES: list[dict[str, list[str]]] = [{"ucanInvocation": []}, {"ucanDelegation": []}]
# The route table of spec §3.2 and §3.8, as (method, OpenAPI path, public).
SPEC_ROUTES = [
    ("GET", "/", True),
    ("GET", "/health", True),
    ("GET", "/ready", True),
    ("GET", "/models", True),
    ("GET", "/docs", True),
    ("GET", "/docs/json", True),
    ("GET", "/openapi.json", True),
    ("POST", "/sessions", False),
    ("GET", "/sessions", False),
    ("DELETE", "/sessions/{sessionId}", False),
    ("POST", "/messages/{sessionId}", False),
    ("GET", "/messages/{sessionId}", False),
    ("POST", "/messages/abort", False),
    ("POST", "/delegation", False),
    ("GET", "/delegation", False),
    ("DELETE", "/delegation", False),
]
CONTENT_TYPES = {
    ".css": "text/css",
    ".js": "text/javascript",
    ".png": "image/png",
}


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A local-mode oracle that never reaches a network."""
    return {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(tmp_path),
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "m",
        **extra,
    }


async def approve(request: Request) -> Response:
    """Resolve a pending approval.

    The caller approves or declines the tool call the approval is about.
    """
    return JSONResponse({"approvalId": request.path_params["approval_id"]})


async def approval_status(request: Request) -> Response:
    """Public status of the approval service."""
    return JSONResponse({"ok": True})


async def host_ping(request: Request) -> Response:
    """Host liveness probe."""
    return JSONResponse({"pong": True})


async def host_report(request: Request) -> Response:
    """Host report for the signed-in user."""
    return JSONResponse({"report": []})


class ApprovalsPlugin(OraclePlugin):
    """A plugin that contributes one protected and one public route."""

    name = "approvals"
    version = "1.0.0"
    manifest = {
        "title": "Approvals",
        "summary": "Human approval of tool calls.",
        "when_to_use": ["a tool call needs a person's approval"],
    }

    def get_routes(self, ctx: PluginContext[Any]) -> list[Any]:
        return [
            Route("/approvals/{approval_id}", approve, methods=["POST"]),
            Route("/approvals-status", approval_status, methods=["GET"]),
        ]

    def get_auth_excluded_routes(self) -> list[AuthExcludedRoute]:
        return [AuthExcludedRoute("/approvals-status", "GET")]


Client = Callable[..., Awaitable[tuple[OracleApp, httpx.AsyncClient]]]


@pytest.fixture
async def boot(tmp_path: Path) -> AsyncIterator[Client]:
    """Boot real oracles (closed at teardown) and give each an in-process HTTP client."""
    apps: list[OracleApp] = []
    clients: list[httpx.AsyncClient] = []

    async def start(
        *,
        plugins: Sequence[OraclePlugin] = (),
        routes: Sequence[BaseRoute] = (),
        auth_excluded_routes: Sequence[AuthExcludedRoute] = (),
        **extra_env: str,
    ) -> tuple[OracleApp, httpx.AsyncClient]:
        app = await create_oracle_app(
            {"name": "Docs Oracle"},
            env=env_for(tmp_path, **extra_env),
            plugins=plugins,
            routes=routes,
            auth_excluded_routes=auth_excluded_routes,
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        apps.append(app)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app.asgi), base_url="http://test"
        )
        clients.append(client)
        return app, client

    try:
        yield start
    finally:
        for client in clients:
            await client.aclose()
        for app in apps:
            await app.aclose()


async def fetch_document(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = response.json()
    return document


def all_refs(node: Any) -> list[str]:
    """Every ``$ref`` value anywhere under ``node``."""
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in all_refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in all_refs(value)]
    return []


def has_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(has_key(value, key) for value in node.values())
    if isinstance(node, list):
        return any(has_key(value, key) for value in node)
    return False


# --- the document ------------------------------------------------------------------------


async def test_the_served_document_is_valid_openapi_3_1(boot: Client) -> None:
    _, client = await boot()
    document = await fetch_document(client)

    validate(document)  # raises on any violation of the 3.1 schema
    assert document["openapi"] == "3.1.0"
    info = document["info"]
    assert (info["title"], info["version"]) == ("Docs Oracle", "0.1.0")
    # The effective tool policy (here the default) is published with the document.
    assert info["x-oracle-tool-policy"]["rules"]["allow"] == ["*"]
    assert info["description"].startswith("### Tool policy")
    assert not has_key(document, "$defs"), "pydantic definitions must move to components"
    schemas = document["components"]["schemas"]
    for ref in all_refs(document):
        if ref.startswith("#/components/schemas/"):
            assert ref.removeprefix("#/components/schemas/") in schemas, ref
    docs_json = await client.get("/docs/json")
    assert docs_json.status_code == 200
    assert docs_json.json() == document


async def test_the_document_shows_the_effective_tool_policy(boot: Client) -> None:
    rules = {"deny": ["frontend_*"], "approvalRequired": ["memory-engine__*"]}
    _, client = await boot(ORACLE_TOOL_POLICY=json.dumps(rules))
    document = await fetch_document(client)

    policy = document["info"]["x-oracle-tool-policy"]
    assert policy["rules"]["deny"] == ["frontend_*"]
    assert policy["rules"]["approval_required"] == ["memory-engine__*"]
    summary = document["info"]["description"]
    assert "- deny: `frontend_*`" in summary
    assert "- approval required: `memory-engine__*` and every destructive tool" in summary


async def test_every_builtin_route_and_method_is_listed(boot: Client) -> None:
    app, client = await boot()
    document = await fetch_document(client)
    paths = document["paths"]

    for method, path, _ in SPEC_ROUTES:
        assert method.lower() in paths.get(path, {}), f"{method} {path} is missing"
    for route in starlette_of(app.asgi).router.routes:
        if not isinstance(route, Route):
            continue  # mounts and websocket routes are covered by the unit test below
        path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: "{" + camel(m.group(1)) + "}", route.path)
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in paths[path], f"{method} {path} is missing"
    assert "head" not in {m for ops in paths.values() for m in ops}


def starlette_of(asgi: Any) -> Starlette:
    """The Starlette app inside the ASGI wrappers of ``OracleApp.asgi`` (Socket.IO …)."""
    for _ in range(8):
        if isinstance(asgi, Starlette):
            return asgi
        asgi = getattr(asgi, "app", None) or getattr(asgi, "other_asgi_app", None)
    raise AssertionError("no Starlette app inside OracleApp.asgi")


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


async def test_public_routes_declare_no_security_and_protected_ones_both_schemes(
    boot: Client,
) -> None:
    _, client = await boot()
    document = await fetch_document(client)

    for method, path, public in SPEC_ROUTES:
        operation = document["paths"][path][method.lower()]
        expected = [] if public else BOTH_SCHEMES
        assert operation["security"] == expected, f"{method} {path}"
        assert ("401" in operation["responses"]) is not public, f"{method} {path}"
    schemes = document["components"]["securitySchemes"]
    assert schemes["ucanInvocation"]["type"] == "http"
    assert schemes["ucanInvocation"]["scheme"] == "bearer"
    assert "X-Auth-Type: ucan" in schemes["ucanInvocation"]["description"]
    assert schemes["ucanDelegation"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-ucan-delegation",
        "description": schemes["ucanDelegation"]["description"],
    }
    header = document["components"]["parameters"]["XAuthType"]
    assert (header["in"], header["name"]) == ("header", "X-Auth-Type")


async def test_send_message_takes_the_camel_case_dto_and_may_stream(boot: Client) -> None:
    _, client = await boot()
    document = await fetch_document(client)
    operation = document["paths"]["/messages/{sessionId}"]["post"]
    schemas = document["components"]["schemas"]

    body = operation["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SendMessageDto"
    }
    dto = schemas["SendMessageDto"]
    assert dto["required"] == ["message"]
    assert dto["additionalProperties"] is False
    assert {
        "message",
        "stream",
        "returnAllMessages",
        "tools",
        "agActions",
        "attachments",
        "mcpInvocations",
        "multitaskStrategy",
        "timezone",
        "homeServer",
        "metadata",
        "model",
    } == set(dto["properties"])
    assert "mxcUri" in schemas["AttachmentDto"]["properties"]
    assert "hasRender" in schemas["AgActionDto"]["properties"]
    ok = operation["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/MessageReply"}
    assert ok["text/event-stream"]["schema"]["type"] == "string"
    assert operation["parameters"][0] == {
        "name": "sessionId",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }


async def test_main_responses_and_the_error_body_have_schemas(boot: Client) -> None:
    _, client = await boot()
    document = await fetch_document(client)
    paths, schemas = document["paths"], document["components"]["schemas"]

    def schema_of(method: str, path: str, status: str) -> str:
        content = paths[path][method]["responses"][status]["content"]["application/json"]
        ref: str = content["schema"]["$ref"]
        return ref.rsplit("/", 1)[1]

    assert schema_of("post", "/sessions", "201") == "ChatSession"
    assert schema_of("get", "/sessions", "200") == "SessionList"
    assert schema_of("get", "/messages/{sessionId}", "200") == "MessageList"
    assert schema_of("post", "/messages/abort", "200") == "AbortResult"
    assert schema_of("post", "/delegation", "200") == "DelegationStored"
    assert schema_of("get", "/delegation", "200") == "DelegationStatus"
    assert schema_of("get", "/health", "200") == "Health"
    assert schema_of("get", "/models", "200") == "ModelList"
    assert schema_of("delete", "/sessions/{sessionId}", "404") == "ErrorBody"
    assert schema_of("get", "/sessions", "default") == "ErrorBody"
    assert schemas["ChatSession"]["required"] == [
        "sessionId",
        "lastUpdatedAt",
        "createdAt",
        "oracleName",
        "oracleDid",
        "oracleEntityDid",
    ]
    error = schemas["ErrorBody"]
    assert error["required"] == ["statusCode", "message", "error", "requestId"]
    assert error["properties"]["message"] == {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    }
    assert schemas["MessageDto"]["properties"]["toolCalls"]["items"] == {
        "$ref": "#/components/schemas/ToolCallDto"
    }


async def test_real_responses_match_their_documented_required_keys(boot: Client) -> None:
    _, client = await boot()
    document = await fetch_document(client)
    schemas = document["components"]["schemas"]

    health = (await client.get("/health")).json()
    assert set(schemas["Health"]["required"]) <= set(health)
    models = (await client.get("/models")).json()
    assert set(schemas["ModelList"]["required"]) <= set(models)
    unauthorised = (await client.post("/sessions")).json()
    assert set(schemas["ErrorBody"]["required"]) == set(unauthorised)


async def test_plugin_and_host_routes_are_documented(boot: Client) -> None:
    _, client = await boot(
        plugins=[ApprovalsPlugin()],
        routes=[
            Route("/host/ping", host_ping, methods=["GET"]),
            Route("/host/report", host_report, methods=["GET", "POST"]),
        ],
        auth_excluded_routes=[AuthExcludedRoute("/host/ping")],
    )
    document = await fetch_document(client)
    validate(document)
    paths = document["paths"]

    approval = paths["/approvals/{approvalId}"]["post"]
    assert approval["summary"] == "Resolve a pending approval."
    assert approval["description"].startswith("The caller approves or declines")
    assert approval["tags"] == ["approvals"]
    assert approval["x-oracle-plugin"] == "approvals"
    assert approval["security"] == BOTH_SCHEMES
    assert approval["parameters"][0]["name"] == "approvalId"
    assert approval["parameters"][0]["in"] == "path"
    status = paths["/approvals-status"]["get"]
    assert status["security"] == []
    assert status["summary"] == "Public status of the approval service."

    ping = paths["/host/ping"]["get"]
    assert ping["security"] == []
    assert ping["tags"] == ["host"]
    assert "x-oracle-plugin" not in ping
    assert set(paths["/host/report"]) == {"get", "post"}
    for operation in paths["/host/report"].values():
        assert operation["security"] == BOTH_SCHEMES
        assert operation["summary"] == "Host report for the signed-in user."
    operation_ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids))

    assert (await client.post("/approvals/a1")).status_code == 401
    assert (await client.get("/approvals-status")).status_code == 200
    assert (await client.get("/host/ping")).status_code == 200


async def test_the_document_is_public_while_protected_routes_answer_401(boot: Client) -> None:
    _, client = await boot()

    for path in ("/openapi.json", "/docs/json", "/docs"):
        response = await client.get(path)
        assert response.status_code == 200, path
    protected = await client.get("/sessions")
    assert protected.status_code == 401
    assert protected.json()["statusCode"] == 401


# --- the Swagger UI ------------------------------------------------------------------------


def page_urls(page: str) -> list[str]:
    """Every ``src`` and ``href`` of the page's ``script`` and ``link`` elements."""
    return re.findall(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", page)


async def test_the_docs_page_loads_every_asset_from_the_oracle(boot: Client) -> None:
    _, client = await boot()
    response = await client.get("/docs")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    page = response.text

    urls = page_urls(page)
    assert len(urls) == 7  # two stylesheets, two icons, three scripts
    for url in urls:
        assert not url.startswith(("http://", "https://", "//")), url
        assert url.startswith("/docs/"), url
    assert 'data-spec-url="/docs/json"' in page
    assert "<script>" not in page, "no inline script"
    bundle = swagger_ui_dir()
    for url in urls:
        asset = await client.get(url)
        assert asset.status_code == 200, url
        suffix = url[url.rfind(".") :]
        assert asset.headers["content-type"].split(";")[0] == CONTENT_TYPES[suffix], url
        assert "max-age" in asset.headers["cache-control"]
        name = url.removeprefix("/docs/")
        if name != "swagger-initializer.js":
            assert asset.content == (bundle / name).read_bytes(), url


async def test_the_initializer_points_at_docs_json_and_disables_the_online_validator(
    boot: Client,
) -> None:
    _, client = await boot()
    script = (await client.get("/docs/swagger-initializer.js")).text

    assert 'getAttribute("data-spec-url")' in script
    assert "validatorUrl: null" in script
    assert "petstore" not in script
    assert not re.search(r"https?://", script)


async def test_unknown_and_template_files_are_not_served(boot: Client) -> None:
    _, client = await boot()

    for path in ("/docs/index.j2", "/docs/index.html", "/docs/nope.js", "/docs/vendor/x.css"):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.json()["message"] == f"Cannot GET {path}"


async def test_assets_answer_304_to_a_matching_etag(boot: Client) -> None:
    _, client = await boot()
    first = await client.get("/docs/swagger-ui.css")
    etag = first.headers["etag"]

    again = await client.get("/docs/swagger-ui.css", headers={"If-None-Match": etag})

    assert again.status_code == 304
    assert again.content == b""


async def test_an_asset_base_url_moves_only_the_static_assets(boot: Client) -> None:
    _, client = await boot(DOCS_ASSET_BASE_URL="https://assets.example/swagger-ui/")
    page = (await client.get("/docs")).text

    urls = page_urls(page)
    assert "https://assets.example/swagger-ui/swagger-ui.css" in urls
    assert "https://assets.example/swagger-ui/swagger-ui-bundle.js" in urls
    assert "/docs/swagger-initializer.js" in urls
    assert 'data-spec-url="/docs/json"' in page


def test_an_asset_base_url_must_be_a_url_or_an_absolute_path() -> None:
    with pytest.raises(ValueError, match=r"^docs\.asset_base_url: 'cdn\.example'"):
        ApiDocs(title="x", asset_base_url="cdn.example")
    assert ApiDocs(title="x", asset_base_url="/static/swagger/").asset_base_url == (
        "/static/swagger"
    )
    assert ApiDocs(title="x", asset_base_url="  ").asset_base_url is None


async def test_the_page_honours_the_root_path() -> None:
    docs = ApiDocs(title="Mounted")
    app = Starlette(routes=docs.routes())
    transport = httpx.ASGITransport(app=app, root_path="/oracle")
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        page = (await client.get("/docs")).text

    assert 'data-spec-url="/oracle/docs/json"' in page
    assert all(url.startswith("/oracle/docs/") for url in page_urls(page))


# --- build_openapi on hand-made routes ---------------------------------------------------


class Items(HTTPEndpoint):
    """Items of a shelf."""

    async def get(self, request: Request) -> Response:
        """List the items."""
        return JSONResponse([])

    async def put(self, request: Request) -> Response:
        """Replace the items."""
        return JSONResponse([])


async def by_id(request: Request) -> Response:
    """One item by number."""
    return JSONResponse({})


async def file_of(request: Request) -> Response:
    return JSONResponse({})


async def socket(websocket: WebSocket) -> None:
    """Not an HTTP operation."""


class McpApp:
    """A mounted ASGI app without routes of its own."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


def test_build_openapi_reads_endpoints_mounts_and_convertors() -> None:
    exclusions = ExclusionMatcher([*BUILTIN_EXCLUSIONS, AuthExcludedRoute("/shelf/files/*")])
    document = build_openapi(
        title="Unit",
        version="9.9.9",
        routes=[WebSocketRoute("/ws", socket)],
        exclusions=exclusions,
        extra_routes=[
            (
                "shelf",
                Mount(
                    "/shelf",
                    routes=[
                        Route("/items", Items),
                        Route("/items/{item_id:int}", by_id, methods=["DELETE"]),
                        Route("/files/{file_path:path}", file_of),
                    ],
                ),
            ),
            ("mcp", Mount("/mcp", app=McpApp())),
        ],
        description="Hand-made routes.",
    )
    validate(document)
    paths = document["paths"]

    assert "/ws" not in paths
    assert set(paths["/shelf/items"]) == {"get", "put"}
    assert paths["/shelf/items"]["put"]["summary"] == "Replace the items."
    item = paths["/shelf/items/{itemId}"]["delete"]
    assert item["parameters"][0]["schema"] == {"type": "integer", "minimum": 0}
    assert item["security"] == PROTECTED_SECURITY
    files = paths["/shelf/files/{filePath}"]["get"]
    assert files["security"] == []
    assert files["summary"] == "GET /shelf/files/{filePath}"
    assert files["parameters"][0]["description"] == "May contain `/`."
    assert set(paths["/mcp"]) == {"get", "post"}
    assert paths["/mcp"]["post"]["x-oracle-plugin"] == "mcp"
    assert document["info"]["description"] == "Hand-made routes."
