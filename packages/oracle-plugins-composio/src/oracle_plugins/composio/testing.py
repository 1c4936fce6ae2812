"""A double of the IXO composio-worker that speaks its protocol (03-plugins §6 item 6).

``ComposioWorkerDouble`` is a Starlette app serving the routes the plugin uses:

- ``GET /.well-known/did.json``: the worker's ``did:web`` document;
- ``POST /api/v3/tool_router/session`` ``{"user_id"}`` → ``{"session_id", …}``;
- ``GET /api/v3/tool_router/session/{id}/tools`` → ``{"items": [...]}``: the four
  meta-tools (plus the remote workbench, which a client must leave out), with schemas;
- ``POST /api/v3/tool_router/session/{id}/execute_meta`` ``{"slug", "arguments"}`` →
  ``{"data", "error", "log_id"}``.

Every route but the DID document needs ``x-api-key`` (else 401) and
``x-ucan-invocation``: an invocation addressed to the double's DID claiming ``sandbox/*``
on ``ixo:sandbox`` with a proof chain rooted at a trusted user, checked with
``oracle_ucan.validate_invocation`` and **single-use**, as the worker keeps it (else 401).
A session belongs to the composite of the chain's user and the invoking oracle.

Behaviour: per-user connection state (``COMPOSIO_MANAGE_CONNECTIONS`` answers a
``redirect_url`` until a test calls ``mark_connected``), ``COMPOSIO_SEARCH_TOOLS`` and
``COMPOSIO_GET_TOOL_SCHEMAS`` over a tiny fixture catalog, ``COMPOSIO_MULTI_EXECUTE_TOOL``
echoing each tool's arguments (an app tool of an unconnected toolkit fails), and a
malformed execute envelope refused with 400. Hooks inject a failing session creation,
forget a session, or change the tools a user's session lists.

Needs ``oracle-ucan`` and ``starlette`` (``pip install 'oracle-plugins-composio[testing]'``).
Serve ``routes`` with any ASGI server and set ``origin``, e.g. with ``oracle_server``'s
``LoopbackServer(double.routes)``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_ucan import CapabilityDef, ChainVerifier
from oracle_ucan.testing import InvocationGate, did_web_document

__all__ = [
    "FIXTURE_CATALOG",
    "META_TOOL_DEFINITIONS",
    "CatalogTool",
    "ComposioWorkerDouble",
    "Execution",
    "RecordedRequest",
    "WorkerCaller",
]

_PREFIX = "/api/v3/tool_router"
_CAPABILITY = CapabilityDef(can="sandbox/*", protocol="ixo:")
_RESOURCE = "ixo:sandbox"
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class WorkerCaller:
    """Who a request is from: the user at the root of the chain, the invoking oracle."""

    user: str
    oracle: str

    @property
    def composite_id(self) -> str:
        """The Composio user the worker derives from both DIDs."""
        return hashlib.sha256(f"{self.oracle}|{self.user}".encode()).hexdigest()[:24]


@dataclass(frozen=True)
class RecordedRequest:
    """One authenticated request as the double saw it."""

    method: str
    path: str
    caller: WorkerCaller
    audience: str
    capability: Mapping[str, Any]
    network: str | None
    body: Any


@dataclass(frozen=True)
class Execution:
    """One ``execute_meta`` call that reached a meta-tool."""

    slug: str
    arguments: Mapping[str, Any]
    caller: WorkerCaller
    session_id: str


@dataclass(frozen=True)
class CatalogTool:
    """An app tool of the fixture catalog."""

    slug: str
    toolkit: str
    description: str
    input_schema: Mapping[str, Any]
    needs_connection: bool = True


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


FIXTURE_CATALOG: tuple[CatalogTool, ...] = (
    CatalogTool(
        "GMAIL_SEND_EMAIL",
        "gmail",
        "Send an email from the user's Gmail account.",
        _object(
            recipient_email={"type": "string"}, subject={"type": "string"}, body={"type": "string"}
        ),
    ),
    CatalogTool(
        "GMAIL_FETCH_EMAILS",
        "gmail",
        "Fetch recent emails from the user's Gmail inbox.",
        _object(max_results={"type": "integer"}),
    ),
    CatalogTool(
        "GITHUB_CREATE_AN_ISSUE",
        "github",
        "Create an issue in a GitHub repository.",
        _object(owner={"type": "string"}, repo={"type": "string"}, title={"type": "string"}),
    ),
    CatalogTool(
        "COMPOSIO_SEARCH_WEB",
        "composio_search",
        "Search the web and return the top results.",
        _object(query={"type": "string"}),
        needs_connection=False,
    ),
)
"""The double's app tools."""

META_TOOL_DEFINITIONS: Mapping[str, Mapping[str, Any]] = {
    "COMPOSIO_MANAGE_CONNECTIONS": {
        "description": "Check or start the user's connections to toolkits (apps).",
        "input_parameters": _object(
            toolkits={"type": "array", "items": {"type": "string"}, "description": "e.g. gmail"}
        ),
    },
    "COMPOSIO_SEARCH_TOOLS": {
        "description": "Find the tools that do a use case; returns their slugs.",
        "input_parameters": _object(
            queries={
                "type": "array",
                "items": _object(use_case={"type": "string"}),
            }
        ),
    },
    "COMPOSIO_GET_TOOL_SCHEMAS": {
        "description": "Get the input schemas of tools by slug.",
        "input_parameters": _object(tool_slugs={"type": "array", "items": {"type": "string"}}),
    },
    "COMPOSIO_MULTI_EXECUTE_TOOL": {
        "description": "Execute one or more tools by slug.",
        "input_parameters": {
            "type": "object",
            "properties": {
                "tools": {"type": "array", "items": {"type": "object"}},
                "sync_response_to_workbench": {"type": "boolean"},
                "thought": {"type": "string"},
            },
            "required": ["tools", "sync_response_to_workbench"],
        },
    },
    "COMPOSIO_REMOTE_WORKBENCH": {
        "description": "Run Python in a remote sandbox.",
        "input_parameters": _object(code_to_execute={"type": "string"}),
    },
}
"""What a session lists by default: the four meta-tools and the remote workbench."""


class _Refused(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.response = JSONResponse(
            {"error": {"message": message, "code": code, "status": status}}, status_code=status
        )


@dataclass
class _Session:
    session_id: str
    owner: str
    tools: tuple[str, ...]


@dataclass
class _Links:
    issued: dict[tuple[str, str], str] = field(default_factory=dict)
    connected: set[tuple[str, str]] = field(default_factory=set)


class ComposioWorkerDouble:
    """The double's app and state.

    Args:
        trusted_users: User DIDs whose delegations are accepted at the root of the chain.
        api_key: The ``x-api-key`` it accepts.
        did: The worker's DID (served at ``/.well-known/did.json``).
        verifier: Verifies the chain's signatures; give it a resolver for ``did:ixo``
            oracles (``did:key`` ones need none).
        catalog: The app tools.
    """

    def __init__(
        self,
        *,
        trusted_users: Collection[str],
        api_key: str = "composio-double-api-key",
        did: str = "did:web:composio-worker.test",
        verifier: ChainVerifier | None = None,
        catalog: Sequence[CatalogTool] = FIXTURE_CATALOG,
    ) -> None:
        self.did = did
        self.api_key = api_key
        self.origin: str | None = None
        """Base URL of the served app; set by whoever serves it."""
        self.trusted_users = list(trusted_users)
        self.gate = InvocationGate(
            did, _RESOURCE, _CAPABILITY, self.trusted_users, verifier, single_use=True
        )
        self.catalog = {tool.slug: tool for tool in catalog}
        self.requests: list[RecordedRequest] = []
        self.rejected = self.gate.rejected
        self.executions: list[Execution] = []
        self.sessions: dict[str, _Session] = {}
        self.session_status: int | None = None
        """When set, session creation answers this status (a worker failure)."""
        self.tools_by_user: dict[str, tuple[str, ...]] = {}
        """Per user DID: the tool slugs their sessions list instead of the default."""
        self._links = _Links()
        self._log_ids = 0
        self._session_count = 0

    # --- serving -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``COMPOSIO_BASE_URL`` for the served double."""
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes."""
        return [
            Route("/.well-known/did.json", self._did_document, methods=["GET"]),
            Route(f"{_PREFIX}/session", self._create_session, methods=["POST"]),
            Route(f"{_PREFIX}/session/{{session_id}}/tools", self._list_tools, methods=["GET"]),
            Route(
                f"{_PREFIX}/session/{{session_id}}/execute_meta",
                self._execute_meta,
                methods=["POST"],
            ),
        ]

    # --- test hooks ----------------------------------------------------------------------

    def mark_connected(self, user: str, toolkit: str, *, oracle: str | None = None) -> None:
        """The user finished the connection flow of ``toolkit``: with ``oracle``, for that
        oracle's Composio user; without, for every oracle the user has called through."""
        composites = (
            {WorkerCaller(user, oracle).composite_id}
            if oracle is not None
            else {r.caller.composite_id for r in self.requests if r.caller.user == user}
        )
        self._links.connected.update((composite, toolkit) for composite in composites)

    def is_connected(self, caller: WorkerCaller, toolkit: str) -> bool:
        """Whether the caller's Composio user has connected ``toolkit``."""
        return (caller.composite_id, toolkit) in self._links.connected

    def expire_session(self, session_id: str) -> None:
        """Forget a session, as the worker does when it expires (its routes then 404)."""
        self.sessions.pop(session_id, None)

    def executions_of(self, slug: str) -> list[Execution]:
        """The executions of one meta-tool, in order."""
        return [e for e in self.executions if e.slug == slug]

    # --- auth ------------------------------------------------------------------------

    async def _authenticate(self, request: Request, body: Any = None) -> WorkerCaller:
        if request.headers.get("x-api-key") != self.api_key:
            self.rejected.append("api_key")
            raise _Refused(401, "invalid API key", "unauthorized")
        token = request.headers.get("x-ucan-invocation", "").strip()
        if not token:
            self.rejected.append("missing invocation")
            raise _Refused(401, "x-ucan-invocation is required", "unauthorized")
        result = await self.gate.check_token(token)
        if not result.ok:
            code = result.error.code if result.error else "invalid"
            message = result.error.message if result.error else "invalid invocation"
            raise _Refused(401, f"{code}: {message}", "unauthorized")
        assert result.invoker is not None
        caller = WorkerCaller(user=result.proof_chain[0], oracle=result.invoker)
        assert result.delegation is not None
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.url.path,
                caller=caller,
                audience=result.delegation.audience,
                capability=dict(result.delegation.capabilities[0]),
                network=request.headers.get("x-ixo-network"),
                body=body,
            )
        )
        return caller

    def _session_of(self, request: Request, caller: WorkerCaller) -> _Session:
        session = self.sessions.get(request.path_params["session_id"])
        if session is None or session.owner != caller.composite_id:
            raise _Refused(404, "session not found", "not_found")
        return session

    # --- routes ------------------------------------------------------------------------

    async def _did_document(self, request: Request) -> Response:
        return JSONResponse(did_web_document(self.did))

    async def _create_session(self, request: Request) -> Response:
        try:
            body = await _json(request)
            caller = await self._authenticate(request, body)
            if self.session_status is not None:
                raise _Refused(self.session_status, "session creation failed", "upstream")
            if not isinstance(body, dict) or not isinstance(body.get("user_id"), str):
                raise _Refused(400, "user_id is required", "invalid_request")
            if body["user_id"] != caller.user:
                raise _Refused(403, "user_id is not the invocation's user", "forbidden")
        except _Refused as refused:
            return refused.response
        self._session_count += 1
        session_id = f"trs_{self._session_count}_{caller.composite_id[:8]}"
        tools = self.tools_by_user.get(caller.user, tuple(META_TOOL_DEFINITIONS))
        self.sessions[session_id] = _Session(session_id, caller.composite_id, tools)
        return JSONResponse(
            {
                "session_id": session_id,
                "mcp": {"type": "http", "url": f"{self.origin}/tool_router/{session_id}/mcp"},
                "tool_router_tools": list(tools),
                "config": {"user_id": caller.composite_id},
            },
            status_code=201,
        )

    async def _list_tools(self, request: Request) -> Response:
        try:
            caller = await self._authenticate(request)
            session = self._session_of(request, caller)
        except _Refused as refused:
            return refused.response
        items = []
        for slug in session.tools:
            meta = META_TOOL_DEFINITIONS.get(slug)
            app = self.catalog.get(slug)
            if meta is not None:
                description, schema, toolkit = (
                    meta["description"], meta["input_parameters"], "composio"
                )  # fmt: skip
            elif app is not None:
                description, schema, toolkit = app.description, app.input_schema, app.toolkit
            else:
                continue
            items.append(
                {
                    "slug": slug,
                    "name": slug.replace("_", " ").title(),
                    "description": description,
                    "input_parameters": schema,
                    "output_parameters": {"type": "object"},
                    "tags": [],
                    "toolkit": {"slug": toolkit, "name": toolkit.title()},
                }
            )
        return JSONResponse({"items": items})

    async def _execute_meta(self, request: Request) -> Response:
        try:
            body = await _json(request)
            caller = await self._authenticate(request, body)
            session = self._session_of(request, caller)
            if (
                not isinstance(body, dict)
                or set(body) - {"slug", "arguments"}
                or not isinstance(body.get("slug"), str)
                or not isinstance(body.get("arguments", {}), dict)
            ):
                raise _Refused(400, "body must be {slug, arguments}", "invalid_request")
            slug: str = body["slug"]
            arguments: dict[str, Any] = body.get("arguments", {})
            if slug not in session.tools or slug not in META_TOOL_DEFINITIONS:
                raise _Refused(400, f"{slug} is not a meta tool of this session", "invalid_slug")
            data = self._run(slug, arguments, caller)
        except _Refused as refused:
            return refused.response
        self.executions.append(Execution(slug, arguments, caller, session.session_id))
        self._log_ids += 1
        return JSONResponse({"data": data, "error": None, "log_id": f"log_{self._log_ids}"})

    # --- meta-tools ------------------------------------------------------------------

    def _run(self, slug: str, arguments: dict[str, Any], caller: WorkerCaller) -> dict[str, Any]:
        if slug == "COMPOSIO_MANAGE_CONNECTIONS":
            return self._manage_connections(arguments, caller)
        if slug == "COMPOSIO_SEARCH_TOOLS":
            return self._search(arguments, caller)
        if slug == "COMPOSIO_GET_TOOL_SCHEMAS":
            return self._schemas(arguments)
        if slug == "COMPOSIO_MULTI_EXECUTE_TOOL":
            return self._multi_execute(arguments, caller)
        return {"stdout": "", "stderr": ""}

    def _manage_connections(
        self, arguments: dict[str, Any], caller: WorkerCaller
    ) -> dict[str, Any]:
        toolkits = arguments.get("toolkits")
        if not _strings(toolkits):
            raise _Refused(400, "toolkits must be a non-empty array of strings", "invalid_args")
        results: dict[str, Any] = {}
        for toolkit in toolkits:
            key = (caller.composite_id, toolkit)
            if key in self._links.connected:
                results[toolkit] = {"toolkit": toolkit, "status": "active"}
                continue
            link = self._links.issued.get(key)
            if link is None:
                link_id = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
                link = f"{self.origin}/connect/{link_id}"
                self._links.issued[key] = link
            results[toolkit] = {"toolkit": toolkit, "status": "initiated", "redirect_url": link}
        return {"results": results}

    def _search(self, arguments: dict[str, Any], caller: WorkerCaller) -> dict[str, Any]:
        queries = arguments.get("queries")
        if (
            not isinstance(queries, list)
            or not queries
            or not all(isinstance(q, dict) and isinstance(q.get("use_case"), str) for q in queries)
        ):
            raise _Refused(400, "queries must be [{use_case}]", "invalid_args")
        results = []
        for query in queries:
            wanted = set(_WORD.findall(query["use_case"].lower()))
            found = [
                tool
                for tool in self.catalog.values()
                if wanted & set(_WORD.findall(f"{tool.slug} {tool.description}".lower()))
            ]
            results.append(
                {
                    "use_case": query["use_case"],
                    "primary_tool_slugs": [t.slug for t in found],
                    "tools": [
                        {
                            "tool_slug": t.slug,
                            "toolkit": t.toolkit,
                            "description": t.description,
                            "connected": not t.needs_connection
                            or self.is_connected(caller, t.toolkit),
                        }
                        for t in found
                    ],
                }
            )
        return {"results": results}

    def _schemas(self, arguments: dict[str, Any]) -> dict[str, Any]:
        slugs = arguments.get("tool_slugs")
        if not _strings(slugs):
            raise _Refused(400, "tool_slugs must be a non-empty array of strings", "invalid_args")
        known = {s: self.catalog[s] for s in slugs if s in self.catalog}
        return {
            "tool_schemas": {
                s: {"description": t.description, "input_schema": t.input_schema}
                for s, t in known.items()
            },
            "not_found": [s for s in slugs if s not in known],
        }

    def _multi_execute(self, arguments: dict[str, Any], caller: WorkerCaller) -> dict[str, Any]:
        problem = _envelope_problem(arguments)
        if problem is not None:
            raise _Refused(
                400, f"invalid COMPOSIO_MULTI_EXECUTE_TOOL input: {problem}", "invalid_envelope"
            )
        results = []
        for item in arguments["tools"]:
            tool = self.catalog.get(item["tool_slug"])
            if tool is None:
                results.append(
                    {"tool_slug": item["tool_slug"], "successful": False, "error": "tool not found"}
                )
            elif tool.needs_connection and not self.is_connected(caller, tool.toolkit):
                results.append(
                    {
                        "tool_slug": tool.slug,
                        "successful": False,
                        "error": f"no active connection for toolkit '{tool.toolkit}'; "
                        "call COMPOSIO_MANAGE_CONNECTIONS",
                    }
                )
            else:
                results.append(
                    {
                        "tool_slug": tool.slug,
                        "successful": True,
                        "response": {"echo": item["arguments"]},
                    }
                )
        return {
            "results": results,
            "success_count": sum(1 for r in results if r["successful"]),
        }


def _envelope_problem(arguments: Mapping[str, Any]) -> str | None:
    """The worker's own strict check (independent of the plugin's)."""
    if set(arguments) != {"tools", "sync_response_to_workbench"}:
        return "exactly the keys tools and sync_response_to_workbench are allowed"
    if not isinstance(arguments["sync_response_to_workbench"], bool):
        return "sync_response_to_workbench must be a boolean"
    tools = arguments["tools"]
    if not isinstance(tools, list) or not tools:
        return "tools must be a non-empty array"
    for item in tools:
        if (
            not isinstance(item, dict)
            or set(item) != {"tool_slug", "arguments"}
            or not isinstance(item["tool_slug"], str)
            or not isinstance(item["arguments"], dict)
        ):
            return "each entry of tools must be exactly {tool_slug, arguments}"
    return None


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    try:
        return await request.json()
    except ValueError as exc:
        raise _Refused(400, "the body is not JSON", "invalid_request") from exc
