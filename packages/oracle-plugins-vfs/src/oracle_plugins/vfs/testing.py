"""Protocol doubles of the vfs plugin: a VFS worker and a UCAN Store (03-plugins §17.6).

``VfsWorkerDouble`` is a Starlette app over a temporary directory serving every route of
``{vfs}/api/fs`` the plugin uses, in the wire shapes ``oracle_plugins.vfs._remote``
documents, plus ``/.well-known/did.json``. It is written independently of the embedded
backend. Every API request must carry ``Authorization: Bearer <invocation>`` and
``X-Auth-Type: ucan``: an invocation addressed to the double's DID, claiming an ability
that covers the route's minimum on ``ixo:filesystem``, with a proof chain rooted at a
trusted user; each invocation is accepted once (``InMemoryInvocationStore``). A bad
bearer gets ``401``. Calls are recorded (:class:`WorkerCall`); faults are injected with
:meth:`VfsWorkerDouble.fail` (a status for the next matching requests: 401-once,
409-concurrent-once, 429, 5xx) and :meth:`VfsWorkerDouble.slow` (a delay, to outlast the
client's timeout). Paths under ``denied_prefixes`` answer ``403``; trashed files leave the
tree; a file keeps at most 50 versions.

``UcanStoreDouble`` serves ``GET /api/delegations`` (and its DID document): the
delegations granted with :meth:`UcanStoreDouble.grant` whose issuer and audience match
the query, unless withheld. Its bearer must be the oracle's own invocation (``with`` the
oracle's DID, ``store/get``, no user proof), single use, and the query's ``audience``
must be the invoker.

Needs ``oracle-ucan`` and ``starlette`` (``pip install 'oracle-plugins-vfs[testing]'``).
Serve them with ``oracle_server.testing.LoopbackServer``::

    worker = VfsWorkerDouble(tmp_path, trusted_users=[user.did()])
    async with LoopbackServer(worker.routes) as served:
        worker.origin = served.origin
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_plugins.vfs._delegations import STORE_ABILITY, VFS_CAPABILITY
from oracle_ucan import (
    CapabilityDef,
    ChainVerifier,
    Delegation,
    InMemoryInvocationStore,
    UcanError,
    ability_covers,
    validate_invocation,
)
from oracle_ucan.testing import did_web_document

__all__ = [
    "DEFAULT_STORE_DID",
    "DEFAULT_WORKER_DID",
    "MAX_VERSIONS",
    "ROUTE_ABILITIES",
    "Fault",
    "StoreCall",
    "UcanStoreDouble",
    "VfsWorkerDouble",
    "WorkerCall",
]

DEFAULT_WORKER_DID = "did:web:vfs.test"
DEFAULT_STORE_DID = "did:web:store.ucan.test"
MAX_VERSIONS = 50

ROUTE_ABILITIES: dict[tuple[str, str], str] = {
    ("GET", "/tree"): "fs/list",
    ("GET", "/glob"): "fs/list",
    ("GET", "/search"): "fs/read",
    ("GET", "/grep"): "fs/read",
    ("GET", "/files/{id}/read"): "fs/read",
    ("GET", "/files/{id}/content"): "fs/read",
    ("POST", "/files"): "fs/write",
    ("PUT", "/files/{id}"): "fs/write",
    ("PATCH", "/files/{id}/edit"): "fs/write",
    ("POST", "/batch/move"): "fs/write",
    ("POST", "/batch/delete"): "fs/delete",
    ("PATCH", "/files/{id}/public"): "fs/write",
    ("PUT", "/folders/public"): "fs/write",
}
"""The minimum ability of each route (method, template under ``/api/fs``)."""

Handler = Callable[[Request], Awaitable[Response]]


def _error(status: int, message: str, code: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if code:
        body["code"] = code
    return JSONResponse(body, status_code=status)


@dataclass(frozen=True)
class WorkerCall:
    """One API request to the worker.

    Attributes:
        method: HTTP method.
        route: The route template under ``/api/fs`` (``/files/{id}/read``).
        params: Query parameters.
        ability: The ability the bearer claimed (``None``: none could be read).
        user: The user at the root of the proof chain, when the bearer validated.
        status: The status answered.
    """

    method: str
    route: str
    params: dict[str, str]
    ability: str | None
    user: str | None
    status: int


@dataclass
class Fault:
    """An injected failure: the next ``times`` requests matching answer ``status``.

    ``route`` and ``method`` narrow the match (``None``: any); ``delay`` seconds are
    waited first (with ``status=None`` the request is then served normally).
    """

    status: int | None
    times: int = 1
    route: str | None = None
    method: str | None = None
    body: dict[str, Any] | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def matches(self, method: str, route: str) -> bool:
        """Whether it applies to a request."""
        return (
            self.times > 0
            and (self.route is None or self.route == route)
            and (self.method is None or self.method == method)
        )


@dataclass
class _Entry:
    id: str
    path: str
    folder: bool
    version: int = 1
    public: bool = False
    mime_type: str = "application/octet-stream"


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _glob_regex(pattern: str) -> re.Pattern[str]:
    if not pattern.startswith("/"):
        pattern = "/" + pattern
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


class VfsWorkerDouble:
    """The VFS worker double: one namespace of files under ``root``.

    Args:
        root: A temporary directory for the files (``files/``) and the trash (``trash/``).
        trusted_users: User DIDs accepted at the root of an invocation's proof chain.
        did: The worker's DID (its ``/.well-known/did.json``).
        verifier: Verifies signatures; give it a resolver for ``did:ixo`` oracles.
        semantic: What ``/search`` answers as ``semantic`` (its matching is lexical).
    """

    def __init__(
        self,
        root: Path,
        *,
        trusted_users: Collection[str] = (),
        did: str = DEFAULT_WORKER_DID,
        verifier: ChainVerifier | None = None,
        semantic: bool = False,
    ) -> None:
        self.files_root = root / "files"
        self.trash_root = root / "trash"
        self.files_root.mkdir(parents=True, exist_ok=True)
        self.trash_root.mkdir(parents=True, exist_ok=True)
        self.trusted_users = list(trusted_users)
        self.did = did
        self.verifier = verifier
        self.semantic = semantic
        self.origin: str | None = None
        """Base URL of the served app; set by whoever serves it."""
        self.denied_prefixes: list[str] = []
        self.calls: list[WorkerCall] = []
        self.rejected: list[str] = []
        self.faults: list[Fault] = []
        self.trashed: list[str] = []
        self._entries: dict[str, _Entry] = {}  # path → entry
        self._replays = InMemoryInvocationStore()

    # --- serving and set-up ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``VFS_URL`` for the served double."""
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes, for ``LoopbackServer(double.routes)``."""
        api = [
            Route("/tree", self._tree, methods=["GET"]),
            Route("/glob", self._glob, methods=["GET"]),
            Route("/search", self._search, methods=["GET"]),
            Route("/grep", self._grep, methods=["GET"]),
            Route("/files/{id}/read", self._read, methods=["GET"]),
            Route("/files/{id}/content", self._content, methods=["GET"]),
            Route("/files", self._create, methods=["POST"]),
            Route("/files/{id}", self._replace, methods=["PUT"]),
            Route("/files/{id}/edit", self._edit, methods=["PATCH"]),
            Route("/batch/move", self._move, methods=["POST"]),
            Route("/batch/delete", self._delete, methods=["POST"]),
            Route("/files/{id}/public", self._file_public, methods=["PATCH"]),
            Route("/folders/public", self._folder_public, methods=["PUT"]),
        ]
        wrapped = [
            Route(f"/api/fs{r.path}", self._guarded(r.path, r.endpoint), methods=list(r.methods))
            for r in api
            if isinstance(r, Route) and r.methods
        ]
        return [Route("/.well-known/did.json", self._did_document, methods=["GET"]), *wrapped]

    def put(self, path: str, content: str | bytes, mime_type: str = "text/plain") -> str:
        """Create or replace a file directly (test set-up); its id."""
        data = content.encode() if isinstance(content, str) else content
        entry = self._entries.get(path)
        if entry is None:
            self._ensure_folders(path.rsplit("/", 1)[0])
            entry = self._entries[path] = _Entry(self._new_id(), path, False)
        entry.mime_type = mime_type
        self._disk(path).write_bytes(data)
        return entry.id

    def text(self, path: str) -> str | None:
        """The text of a file, or ``None`` when there is none."""
        entry = self._entries.get(path)
        return None if entry is None or entry.folder else self._disk(path).read_text()

    def exists(self, path: str) -> bool:
        """Whether ``path`` is in the tree (not trashed)."""
        return path in self._entries

    def id_of(self, path: str) -> str:
        """The id of ``path``."""
        return self._entries[path].id

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        route: str | None = None,
        method: str | None = None,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Fault:
        """The next ``times`` matching requests answer ``status`` (before any check)."""
        fault = Fault(status, times, route, method, body, headers=dict(headers or {}))
        self.faults.append(fault)
        return fault

    def slow(self, seconds: float, *, times: int = 1, route: str | None = None) -> Fault:
        """The next ``times`` matching requests wait ``seconds`` first."""
        fault = Fault(None, times, route, delay=seconds)
        self.faults.append(fault)
        return fault

    def calls_to(self, route: str, method: str | None = None) -> list[WorkerCall]:
        """The recorded calls of one route."""
        return [c for c in self.calls if c.route == route and method in (None, c.method)]

    # --- auth and faults ------------------------------------------------------------------

    def _guarded(self, route: str, handler: Any) -> Handler:
        async def endpoint(request: Request) -> Response:
            method = request.method
            ability, user, response = await self._admit(request, route)
            if response is None:
                response = await handler(request)
            self.calls.append(
                WorkerCall(
                    method, route, dict(request.query_params), ability, user, response.status_code
                )
            )
            return response

        return endpoint

    async def _admit(
        self, request: Request, route: str
    ) -> tuple[str | None, str | None, Response | None]:
        method = request.method
        for fault in self.faults:
            if fault.matches(method, route):
                fault.times -= 1
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status is not None:
                    body = fault.body or {"error": f"injected {fault.status}"}
                    return None, None, JSONResponse(body, fault.status, headers=fault.headers)
                break
        try:
            ability, user = await self._authenticate(request, ROUTE_ABILITIES[(method, route)])
        except _Refused as refused:
            self.rejected.append(refused.reason)
            return None, None, _error(401, "invalid invocation")
        return ability, user, None

    async def _authenticate(self, request: Request, minimum: str) -> tuple[str, str]:
        authorization = request.headers.get("authorization", "")
        if request.headers.get("x-auth-type") != "ucan" or not authorization.startswith("Bearer "):
            raise _Refused("not a ucan bearer")
        token = authorization.removeprefix("Bearer ").strip()
        try:
            claims = Delegation.from_base64(token).capabilities
        except UcanError as exc:
            raise _Refused("INVALID_FORMAT") from exc
        abilities = [str(c.get("can")) for c in claims if c.get("with") == VFS_CAPABILITY]
        claimed = next((a for a in abilities if ability_covers(a, minimum)), None)
        if claimed is None:
            raise _Refused(f"no claim covering {minimum}")
        result = await validate_invocation(
            token,
            CapabilityDef(can=claimed, protocol="ixo:"),
            VFS_CAPABILITY,
            audience=self.did,
            root_issuers=list(self.trusted_users),
            store=self._replays,
            verifier=self.verifier,
        )
        if not result.ok or not result.proof_chain:
            raise _Refused(result.error.code if result.error else "invalid")
        return claimed, result.proof_chain[0]

    def _denied(self, path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.denied_prefixes)

    # --- the tree -------------------------------------------------------------------------

    def _disk(self, path: str) -> Path:
        return self.files_root / path.lstrip("/")

    def _new_id(self) -> str:
        return f"f_{secrets.token_hex(6)}"

    def _ensure_folders(self, folder: str) -> None:
        parts = [p for p in folder.split("/") if p]
        for i in range(len(parts)):
            path = "/" + "/".join(parts[: i + 1])
            if path not in self._entries:
                self._entries[path] = _Entry(self._new_id(), path, True)
                self._disk(path).mkdir(parents=True, exist_ok=True)

    def _by_id(self, file_id: str) -> _Entry | None:
        return next((e for e in self._entries.values() if e.id == file_id), None)

    def _children(self, folder: str) -> list[_Entry]:
        prefix = folder.rstrip("/") + "/"
        return sorted(
            (
                e
                for p, e in self._entries.items()
                if p.startswith(prefix) and "/" not in p[len(prefix) :]
            ),
            key=lambda e: e.path,
        )

    def _files_under(self, folder: str) -> list[_Entry]:
        prefix = folder.rstrip("/") + "/"
        return sorted(
            (e for p, e in self._entries.items() if not e.folder and p.startswith(prefix)),
            key=lambda e: e.path,
        )

    def _node(self, entry: _Entry) -> dict[str, Any]:
        node: dict[str, Any] = {
            "id": entry.id,
            "name": entry.path.rsplit("/", 1)[-1],
            "path": entry.path,
            "type": "folder" if entry.folder else "file",
        }
        if not entry.folder:
            node.update(size=self._disk(entry.path).stat().st_size, mimeType=entry.mime_type)
        return node

    def _file(self, entry: _Entry) -> dict[str, Any]:
        return {
            "id": entry.id,
            "path": entry.path,
            "size": self._disk(entry.path).stat().st_size,
            "mimeType": entry.mime_type,
            "version": entry.version,
        }

    def _entry(self, request: Request) -> _Entry | Response:
        entry = self._by_id(request.path_params["id"])
        if entry is None:
            return _error(404, "no such file")
        if self._denied(entry.path):
            return _error(403, "outside the granted scope")
        return entry

    def _scope(self, request: Request) -> str | Response:
        path = request.query_params.get("path", "/") or "/"
        if self._denied(path):
            return _error(403, "outside the granted scope")
        if path != "/" and (path not in self._entries or not self._entries[path].folder):
            return _error(404, "no such folder")
        return path

    def _lines(self, entry: _Entry) -> list[str]:
        return self._disk(entry.path).read_text(errors="replace").splitlines()

    # --- routes ---------------------------------------------------------------------------

    async def _did_document(self, request: Request) -> Response:
        return JSONResponse(did_web_document(self.did))

    async def _tree(self, request: Request) -> Response:
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        nodes = [self._node(e) for e in self._children(scope) if not self._denied(e.path)]
        return JSONResponse({"nodes": nodes})

    async def _glob(self, request: Request) -> Response:
        pattern = _glob_regex(request.query_params.get("pattern", ""))
        files = [
            {"id": e.id, "path": e.path}
            for e in self._files_under("/")
            if pattern.match(e.path) and not self._denied(e.path)
        ]
        return JSONResponse({"files": files})

    async def _search(self, request: Request) -> Response:
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        words = [w.lower() for w in re.findall(r"\w+", request.query_params.get("q", ""))]
        hits = []
        for entry in self._files_under(scope):
            found = [
                i + 1
                for i, line in enumerate(self._lines(entry))
                if any(w in line.lower() for w in words)
            ]
            if found and not self._denied(entry.path):
                lines = self._lines(entry)
                hits.append(
                    {
                        "path": entry.path,
                        "lines": [[n, n] for n in found[:5]],
                        "snippet": lines[found[0] - 1][:120],
                        "score": float(len(found)),
                    }
                )
        return JSONResponse({"hits": hits, "semantic": self.semantic})

    async def _grep(self, request: Request) -> Response:
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        q = request.query_params.get("q", "")
        matches = [
            {"path": e.path, "line": i + 1, "text": line}
            for e in self._files_under(scope)
            if not self._denied(e.path)
            for i, line in enumerate(self._lines(e))
            if q in line
        ]
        return JSONResponse({"matches": matches})

    async def _read(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        offset = int(request.query_params.get("offset", "1"))
        limit = int(request.query_params.get("limit", "2000"))
        lines = self._lines(entry)
        window = lines[offset - 1 : offset - 1 + limit]
        return JSONResponse(
            {
                "text": "\n".join(window) + ("\n" if window else ""),
                "offset": offset,
                "count": len(window),
                "hasMore": offset - 1 + len(window) < len(lines),
                "totalLines": len(lines),
            }
        )

    async def _content(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        return Response(self._disk(entry.path).read_bytes(), media_type=entry.mime_type)

    async def _create(self, request: Request) -> Response:
        path = request.query_params.get("path", "")
        if not path.startswith("/") or path.endswith("/"):
            return _error(400, "a file path is required")
        if self._denied(path):
            return _error(403, "outside the granted scope")
        if path in self._entries:
            return _error(409, "a file already exists at this path", "exists")
        mime = request.headers.get("content-type", "application/octet-stream")
        self.put(path, await request.body(), mime)
        return JSONResponse(self._file(self._entries[path]), status_code=201)

    async def _replace(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        if entry.version >= MAX_VERSIONS:
            return _error(409, "the file has reached its version limit", "version_limit")
        entry.version += 1
        entry.mime_type = request.headers.get("content-type", entry.mime_type)
        self._disk(entry.path).write_bytes(await request.body())
        return JSONResponse(self._file(entry))

    async def _edit(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        body = await request.json()
        old, new = str(body.get("oldString", "")), str(body.get("newString", ""))
        text = self._disk(entry.path).read_text()
        count = text.count(old) if old else 0
        if count == 0:
            return _error(422, "oldString not found", "no_match")
        if count > 1 and not body.get("replaceAll"):
            return _error(409, "oldString is not unique", "not_unique")
        if entry.version >= MAX_VERSIONS:
            return _error(409, "the file has reached its version limit", "version_limit")
        replaced = text.replace(old, new) if body.get("replaceAll") else text.replace(old, new, 1)
        entry.version += 1
        self._disk(entry.path).write_text(replaced)
        return JSONResponse({"replacements": count if body.get("replaceAll") else 1})

    async def _move(self, request: Request) -> Response:
        body = await request.json()
        results = []
        for item in body.get("items") or []:
            entry = self._by_id(str(item.get("id")))
            destination = str(item.get("destinationPath") or "")
            result: dict[str, Any] = {"id": item.get("id")}
            if entry is None:
                result.update(ok=False, status=404, error="no such file")
            elif self._denied(entry.path) or self._denied(destination):
                result.update(ok=False, status=403, error="outside the granted scope")
            elif destination in self._entries:
                result.update(ok=False, status=409, error="destination occupied")
            else:
                self._relocate(entry, destination)
                result.update(ok=True, status=200, path=destination)
            results.append(result)
        return JSONResponse({"results": results})

    def _relocate(self, entry: _Entry, destination: str) -> None:
        self._ensure_folders(destination.rsplit("/", 1)[0])
        source = entry.path
        self._disk(destination).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self._disk(source), self._disk(destination))
        moved = [e for p, e in self._entries.items() if p == source or p.startswith(source + "/")]
        for e in moved:
            del self._entries[e.path]
            e.path = destination + e.path[len(source) :]
            self._entries[e.path] = e

    async def _delete(self, request: Request) -> Response:
        body = await request.json()
        results = []
        for file_id in body.get("ids") or []:
            entry = self._by_id(str(file_id))
            if entry is None:
                results.append({"id": file_id, "ok": False, "status": 404, "error": "no such file"})
                continue
            if self._denied(entry.path):
                results.append({"id": file_id, "ok": False, "status": 403, "error": "denied"})
                continue
            path = entry.path
            shutil.move(self._disk(path), self.trash_root / entry.id)
            for p in [p for p in self._entries if p == path or p.startswith(path + "/")]:
                del self._entries[p]
            self.trashed.append(path)
            results.append({"id": file_id, "ok": True, "status": 200, "path": path})
        return JSONResponse({"results": results})

    def _public_url(self, entry: _Entry) -> str:
        return f"{self.base_url}/public/{entry.id}"

    async def _file_public(self, request: Request) -> Response:
        entry = self._entry(request)
        if isinstance(entry, Response):
            return entry
        entry.public = request.query_params.get("public") == "true"
        return JSONResponse({"publicUrl": self._public_url(entry) if entry.public else None})

    async def _folder_public(self, request: Request) -> Response:
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        if scope == "/":
            return _error(400, "the root cannot be shared")
        entry = self._entries[scope]
        entry.public = request.query_params.get("public") == "true"
        return JSONResponse({"publicUrl": self._public_url(entry) if entry.public else None})


# --- the UCAN Store ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreCall:
    """One ``GET /api/delegations``: its query and whether the bearer validated."""

    params: dict[str, str]
    ok: bool
    status: int


class UcanStoreDouble:
    """The UCAN Store double.

    Args:
        oracle_did: The only invoker it serves (its own invocation, ``with`` its DID).
        did: The store's DID.
        verifier: Verifies signatures; give it a resolver for a ``did:ixo`` oracle.
    """

    def __init__(
        self,
        oracle_did: str,
        *,
        did: str = DEFAULT_STORE_DID,
        verifier: ChainVerifier | None = None,
    ) -> None:
        self.oracle_did = oracle_did
        self.did = did
        self.verifier = verifier
        self.origin: str | None = None
        self.withheld: set[str] = set()
        """User DIDs whose delegations are not served (as if none were stored)."""
        self.fail_status: int | None = None
        self.calls: list[StoreCall] = []
        self.rejected: list[str] = []
        self._delegations: list[tuple[str, str, str, int | None]] = []
        self._replays = InMemoryInvocationStore()

    @property
    def base_url(self) -> str:
        """``UCAN_STORE_URL`` for the served double."""
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes."""
        return [
            Route("/.well-known/did.json", self._did_document, methods=["GET"]),
            Route("/api/delegations", self._list, methods=["GET"]),
        ]

    def grant(self, car: str) -> None:
        """Store a delegation (base64 CAR); issuer, audience and expiry are read from it."""
        delegation = Delegation.from_base64(car)
        self._delegations.append(
            (delegation.issuer, delegation.audience, car, delegation.expiration)
        )

    async def _did_document(self, request: Request) -> Response:
        return JSONResponse(did_web_document(self.did))

    async def _list(self, request: Request) -> Response:
        params = dict(request.query_params)
        refused = await self._check(request)
        if refused is None and self.fail_status is not None:
            response: Response = _error(self.fail_status, "store failure")
        elif refused is not None:
            self.rejected.append(refused)
            response = _error(403 if refused == "audience" else 401, "invalid invocation")
        else:
            rows = [
                {
                    "cid": str(Delegation.from_base64(car).cid),
                    "delegation": car,
                    "issuer": issuer,
                    "audience": audience,
                    "expiration": expiration,
                }
                for issuer, audience, car, expiration in self._delegations
                if issuer == params.get("issuer")
                and audience == params.get("audience")
                and issuer not in self.withheld
            ]
            response = JSONResponse({"delegations": rows})
        self.calls.append(StoreCall(params, refused is None, response.status_code))
        return response

    async def _check(self, request: Request) -> str | None:
        authorization = request.headers.get("authorization", "")
        if request.headers.get("x-auth-type") != "ucan" or not authorization.startswith("Bearer "):
            return "not a ucan bearer"
        result = await validate_invocation(
            authorization.removeprefix("Bearer ").strip(),
            CapabilityDef(can=STORE_ABILITY, protocol="did:"),
            self.oracle_did,
            audience=self.did,
            root_issuers=[self.oracle_did],
            store=self._replays,
            verifier=self.verifier,
        )
        if not result.ok:
            return result.error.code if result.error else "invalid"
        if request.query_params.get("audience") != result.invoker:
            return "audience"
        return None
