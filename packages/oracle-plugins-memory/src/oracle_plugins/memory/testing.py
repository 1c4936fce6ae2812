"""A Memory Engine test double that speaks the real protocols (03-plugins §2 item 6).

``MemoryEngineDouble`` is one Starlette app with:

- ``/mcp/``: a real MCP server (the ``mcp`` SDK's ``MCPServer``, stateless streamable HTTP) exposing
  ``search_memory_engine``, ``add_memory``, ``delete_episode``, ``clear``,
  ``add_oracle_knowledge`` and ``delete_edge`` with the contract's argument names;
- ``POST /search-enhanced-batch`` and ``POST /messages``, the REST surface;
- ``GET /.well-known/did.json``, the engine's ``did:web`` document.

Every request but the DID document must carry ``Authorization: Bearer <invocation>`` and
``X-Auth-Type: ucan``: an invocation addressed to the double's DID, claiming
``memory/*`` on ``ixo:memory``, whose proof chain is rooted at a trusted user (checked
with ``oracle_ucan.validate_invocation``); anything else gets ``401``. Memories live in
memory, keyed by ``(caller DID, scope)``: the user's own space under the user DID, the
oracle's under the invoking oracle DID. The double records ``x-room-id`` and can delay
the batch or answer an error slot.

Needs ``oracle-ucan`` (``pip install 'oracle-plugins-memory[testing]'``). Serve it with
any ASGI server while ``running()`` is entered, e.g. ``oracle_server.testing``'s
``LoopbackServer(double.routes)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid as uuid_lib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_mcp.testing import mounted_app, running
from oracle_ucan import CapabilityDef, ChainVerifier
from oracle_ucan.testing import InvocationGate, did_web_document

__all__ = ["Caller", "MemoryEngineDouble", "RecordedRequest", "StoredMemory"]

_MEMORY = CapabilityDef(can="memory/*", protocol="ixo:")
_WORD = re.compile(r"\w+")
_COMMON = frozenset(
    {"the", "a", "an", "and", "or", "of", "to", "in", "is", "are", "what", "who", "user"}
)


@dataclass(frozen=True)
class Caller:
    """Who a request is from: the user at the root of the chain and the invoking oracle."""

    user: str
    oracle: str


@dataclass(frozen=True)
class RecordedRequest:
    """One authenticated request as the double saw it."""

    path: str
    caller: Caller
    room_id: str | None


@dataclass
class StoredMemory:
    """One episode in the double's store."""

    uuid: str
    name: str
    content: str
    visibility: Literal["public", "private"] = "private"
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    fact_uuid: str = field(default_factory=lambda: str(uuid_lib.uuid4()))


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _COMMON


class MemoryEngineDouble:
    """The double's app and store.

    Args:
        trusted_users: User DIDs whose delegations are accepted at the root of the chain.
        did: The engine's DID (served at ``/.well-known/did.json``).
        verifier: Verifies the chain's signatures; give it a resolver for ``did:ixo``
            oracles (``did:key`` ones need none).
        oracle_owners: User DIDs allowed to write oracle knowledge.
    """

    def __init__(
        self,
        *,
        trusted_users: Collection[str],
        did: str = "did:web:memory-engine.test",
        verifier: ChainVerifier | None = None,
        oracle_owners: Collection[str] = (),
    ) -> None:
        self.did = did
        self.origin: str | None = None
        """Base URL of the served app; set by whoever serves it."""
        self.trusted_users = list(trusted_users)
        self.gate = InvocationGate(did, "ixo:memory", _MEMORY, self.trusted_users, verifier)
        self.oracle_owners = frozenset(oracle_owners)
        self.memories: dict[tuple[str, str], list[StoredMemory]] = {}
        self.requests: list[RecordedRequest] = []
        self.rejected = self.gate.rejected
        self.batch_bodies: list[dict[str, Any]] = []
        self.ingested: list[dict[str, Any]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.batch_delay = 0.0
        self.error_slots: set[int] = set()
        self.batch_status: int | None = None
        self.ingested_event = asyncio.Event()
        self.mcp: MCPServer[Any] = MCPServer("memory-engine-double", log_level="WARNING")
        self._register_tools()
        # Building the app creates the session manager that running() starts.
        self._mcp_app = _AuthenticatedMcp(self, mounted_app(self.mcp))

    # --- serving -------------------------------------------------------------------

    @property
    def mcp_url(self) -> str:
        """``MEMORY_MCP_URL`` for the served double."""
        return f"{self._served()}/mcp/"

    @property
    def engine_url(self) -> str:
        """``MEMORY_ENGINE_URL`` for the served double."""
        return self._served()

    def _served(self) -> str:
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes (MCP at ``/mcp/``)."""
        return [
            Route("/.well-known/did.json", self._did_document, methods=["GET"]),
            Route("/search-enhanced-batch", self._authenticated(self._batch), methods=["POST"]),
            Route("/messages", self._authenticated(self._messages), methods=["POST"]),
            Mount("/mcp", app=self._mcp_app),
        ]

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Run the MCP session manager (a mounted app's own lifespan does not run)."""
        return running(self.mcp)

    # --- store helpers for tests --------------------------------------------------------

    def seed(
        self,
        owner: str,
        content: str,
        *,
        name: str = "memory",
        scope: Literal["user", "oracle"] = "user",
        visibility: Literal["public", "private"] = "private",
    ) -> StoredMemory:
        """Put a memory in the store directly."""
        memory = StoredMemory(str(uuid_lib.uuid4()), name, content, visibility)
        self.memories.setdefault((owner, scope), []).append(memory)
        return memory

    def user_memories(self, user: str) -> list[StoredMemory]:
        """The user's own memories."""
        return list(self.memories.get((user, "user"), []))

    # --- auth ----------------------------------------------------------------------

    async def authenticate(self, headers: Any, path: str) -> Caller | None:
        """The caller of a request with these headers, or ``None`` (the request gets 401)."""
        result = await self.gate.check(headers)
        if not result.ok:
            return None
        assert result.invoker is not None
        caller = Caller(user=result.proof_chain[0], oracle=result.invoker)
        self.requests.append(RecordedRequest(path, caller, headers.get("x-room-id")))
        return caller

    def _authenticated(self, endpoint: Any) -> Any:
        async def handle(request: Request) -> Response:
            caller = await self.authenticate(request.headers, request.url.path)
            if caller is None:
                return JSONResponse({"detail": "unauthorized"}, status_code=401)
            response: Response = await endpoint(request, caller)
            return response

        return handle

    # --- REST ----------------------------------------------------------------------

    async def _did_document(self, request: Request) -> Response:
        return JSONResponse(did_web_document(self.did))

    async def _batch(self, request: Request, caller: Caller) -> Response:
        body = await request.json()
        self.batch_bodies.append(body)
        if self.batch_delay:
            await asyncio.sleep(self.batch_delay)
        if self.batch_status is not None:
            return JSONResponse({"detail": "failure"}, status_code=self.batch_status)
        results = []
        for index, query in enumerate(body.get("queries", [])):
            if index in self.error_slots:
                results.append(
                    {
                        "error": {"status_code": 500, "detail": "slot failed"},
                        "query": query.get("query", ""),
                        "strategy_used": query.get("strategy", "balanced"),
                    }
                )
                continue
            hits = self._search(caller, str(query.get("query", "")), "both")
            results.append(
                {
                    "strategy_used": query.get("strategy", "balanced"),
                    "query": query.get("query", ""),
                    "total_results": {
                        "facts": len(hits),
                        "entities": len(hits),
                        "episodes": 0,
                        "communities": 0,
                    },
                    "facts": [{"fact": m.content, "uuid": m.fact_uuid} for m in hits],
                    "entities": [{"name": m.name} for m in hits],
                    "episodes": [],
                    "communities": [],
                }
            )
        return JSONResponse({"results": results})

    async def _messages(self, request: Request, caller: Caller) -> Response:
        body = await request.json()
        self.ingested.append({"caller": caller, **body})
        self.ingested_event.set()
        return JSONResponse({"accepted": len(body.get("messages", []))}, status_code=202)

    # --- search --------------------------------------------------------------------

    def _visible(self, caller: Caller, level: str) -> list[StoredMemory]:
        found: list[StoredMemory] = []
        if level in ("user", "both"):
            found += self.memories.get((caller.user, "user"), [])
        if level in ("oracle", "both"):
            owner = caller.user in self.oracle_owners
            found += [
                m
                for m in self.memories.get((caller.oracle, "oracle"), [])
                if m.visibility == "public" or owner
            ]
        return found

    def _search(self, caller: Caller, query: str, level: str) -> list[StoredMemory]:
        wanted = _words(query)
        scored = [
            (len(wanted & (_words(m.content) | _words(m.name))), i, m)
            for i, m in enumerate(self._visible(caller, level))
        ]
        return [m for score, _, m in sorted(scored, key=lambda s: (-s[0], s[1])) if score > 0]

    # --- MCP tools -------------------------------------------------------------------

    def _register_tools(self) -> None:
        mcp = self.mcp

        def caller_of(ctx: Context[Any, Any]) -> Caller:
            request = ctx.request_context.request
            caller = getattr(getattr(request, "state", None), "memory_caller", None)
            if not isinstance(caller, Caller):
                raise ToolError("unauthenticated")
            return caller

        def find(caller: Caller, uuid: str, attr: str) -> tuple[list[StoredMemory], int] | None:
            for (owner, scope), items in self.memories.items():
                mine = owner == caller.user if scope == "user" else (
                    owner == caller.oracle and caller.user in self.oracle_owners
                )  # fmt: skip
                for index, memory in enumerate(items):
                    if mine and getattr(memory, attr) == uuid:
                        return items, index
            return None

        @mcp.tool(
            description="Search the user's memories and the oracle's knowledge.",
            annotations=ToolAnnotations(read_only_hint=True),
        )
        def search_memory_engine(
            query: str,
            ctx: Context[Any, Any],
            strategy: Literal[
                "balanced",
                "diverse",
                "precise",
                "contextual",
                "recent_memory",
                "facts_only",
                "entities_only",
                "topics_only",
            ] = "balanced",
            knowledge_level: Literal["user", "oracle", "both"] = "both",
            node_labels: list[str] | None = None,
        ) -> dict[str, Any]:
            caller = caller_of(ctx)
            self.tool_calls.append(("search_memory_engine", {"query": query}))
            hits = self._search(caller, query, knowledge_level)
            return {
                "facts": [{"uuid": m.fact_uuid, "fact": m.content} for m in hits],
                "episodes": [{"uuid": m.uuid, "name": m.name} for m in hits],
            }

        @mcp.tool(description="Store a memory about the user.")
        def add_memory(
            name: str,
            content: str,
            ctx: Context[Any, Any],
            source: str = "text",
            source_description: str = "",
        ) -> dict[str, Any]:
            caller = caller_of(ctx)
            self.tool_calls.append(("add_memory", {"name": name, "content": content}))
            memory = self.seed(caller.user, content, name=name)
            return {"episode_uuid": memory.uuid}

        @mcp.tool(description="Store knowledge shared by every user of this oracle.")
        def add_oracle_knowledge(
            name: str,
            content: str,
            confirmed_insertion_from_user: bool,
            ctx: Context[Any, Any],
            knowledge_space_type: Literal["public", "private"] = "public",
            source: str = "text",
            source_description: str = "",
        ) -> dict[str, Any]:
            caller = caller_of(ctx)
            self.tool_calls.append(("add_oracle_knowledge", {"name": name}))
            if confirmed_insertion_from_user is not True:
                raise ToolError("confirmed_insertion_from_user must be true")
            if caller.user not in self.oracle_owners:
                raise ToolError("only the oracle's owners may add oracle knowledge")
            memory = self.seed(
                caller.oracle, content, name=name, scope="oracle", visibility=knowledge_space_type
            )
            return {"episode_uuid": memory.uuid}

        @mcp.tool(description="Delete one episode.")
        def delete_episode(
            episode_uuid: str, confirmed_deletion_from_user: bool, ctx: Context[Any, Any]
        ) -> dict[str, Any]:
            caller = caller_of(ctx)
            self.tool_calls.append(("delete_episode", {"episode_uuid": episode_uuid}))
            if confirmed_deletion_from_user is not True:
                raise ToolError("confirmed_deletion_from_user must be true")
            found = find(caller, episode_uuid, "uuid")
            if found is None:
                raise ToolError("episode not found")
            del found[0][found[1]]
            return {"deleted": episode_uuid}

        @mcp.tool(description="Delete one fact (edge).")
        def delete_edge(
            edge_uuid: str, confirmed_deletion_from_user: bool, ctx: Context[Any, Any]
        ) -> dict[str, Any]:
            caller = caller_of(ctx)
            self.tool_calls.append(("delete_edge", {"edge_uuid": edge_uuid}))
            if confirmed_deletion_from_user is not True:
                raise ToolError("confirmed_deletion_from_user must be true")
            found = find(caller, edge_uuid, "fact_uuid")
            if found is None:
                raise ToolError("edge not found")
            del found[0][found[1]]
            return {"deleted": edge_uuid}

        @mcp.tool(description="Erase all of the user's memories.")
        def clear(confirmed_deletion_from_user: bool, ctx: Context[Any, Any]) -> str:
            caller = caller_of(ctx)
            self.tool_calls.append(("clear", {}))
            if confirmed_deletion_from_user is not True:
                raise ToolError("confirmed_deletion_from_user must be true")
            removed = len(self.memories.pop((caller.user, "user"), []))
            return f"cleared {removed} memories"

    async def tool_names(self) -> Sequence[str]:
        """The MCP tools the double serves, as its ``tools/list`` answers."""
        return [t.name for t in await self.mcp.list_tools()]


class _AuthenticatedMcp:
    """Pure ASGI: checks the invocation before the MCP app sees the request."""

    def __init__(self, double: MemoryEngineDouble, app: ASGIApp) -> None:
        self._double = double
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        caller = await self._double.authenticate(request.headers, "/mcp")
        if caller is None:
            await JSONResponse({"detail": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        scope.setdefault("state", {})["memory_caller"] = caller
        await self._app(scope, receive, send)
