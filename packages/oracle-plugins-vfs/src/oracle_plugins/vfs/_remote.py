"""``RemoteVfs``: one user's files on the IXO VFS worker, over REST with two-hop UCAN.

Every request carries ``Authorization: Bearer <invocation>`` and ``X-Auth-Type: ucan``:
an invocation minted for that request alone (fresh nonce) from the user's delegation to
the oracle (hop 1, :mod:`oracle_plugins.vfs._delegations`), addressed to the worker's
``did:web``, claiming ``ixo:filesystem`` with the route's minimum ability::

    fs/list   GET /tree, GET /glob
    fs/read   GET /search, GET /grep, GET /files/{id}/read, GET /files/{id}/content
    fs/write  POST /files, PUT /files/{id}, PATCH /files/{id}/edit, POST /batch/move,
              PATCH /files/{id}/public, PUT /folders/public
    fs/delete POST /batch/delete

Wire shapes where 03-plugins §17.4 names only the envelope (the worker double in
``oracle_plugins.vfs.testing`` follows them):

- a tree node: ``{"id", "name", "path", "type": "file" | "folder", "size"?, "mimeType"?}``;
  a path is resolved to its id through ``GET /tree?path=<parent>``;
- a file (``POST /files``, ``PUT /files/{id}``): ``{"id", "path", "size", "mimeType",
  "version"?}``;
- ``GET /glob`` files: ``{"id", "path"}`` objects or plain path strings;
- a search hit: ``{"path", "lines": [[start, end], …], "snippet"?, "score"?}``;
- a grep match: ``{"path", "line", "text"}``;
- ``POST /batch/move`` answers ``{"results": [...]}`` as ``/batch/delete`` does;
- sharing answers ``{"publicUrl": str | null}``;
- an error: ``{"error": str, "code"?: str}``; a 409's ``code`` (``exists``,
  ``not_unique``, ``occupied``, ``version_limit``, ``conflict``) or, without one, its
  words ("modified concurrently", "version", "not unique", "exists") say which conflict;
  an edit whose ``oldString`` does not occur is ``422`` (or ``{"replacements": 0}``).

Retries (§17.5): a GET once more on 429, 5xx or a network failure; any request once more
on 401 with a fresh invocation; a write once more on a 409 "modified concurrently".
Logs carry the method, the route template and the status, never a token, a path, a
query or file content.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Mapping
from typing import Any, Literal

import httpx

from oracle_core import UcanAccessor
from oracle_plugins.vfs._backend import (
    DeleteResult,
    FileInfo,
    GrepMatch,
    Node,
    ReadWindow,
    SearchHit,
    SearchResult,
    VfsError,
    VfsErrorKind,
)
from oracle_plugins.vfs._delegations import VFS_CAPABILITY, DelegationCache
from oracle_plugins.vfs._paths import parent_of

__all__ = ["INVOCATION_TTL_SECONDS", "RemoteVfs"]

INVOCATION_TTL_SECONDS = 120
"""Lifetime of each per-request invocation (it is used once, right away)."""

Ability = Literal["fs/read", "fs/list", "fs/write", "fs/delete"]
Operation = Literal["read", "create", "update", "edit", "move", "delete", "share"]

_RETRY_PAUSE = 0.2
_MAX_RETRY_AFTER = 2.0
_CONFLICT_CODES: frozenset[str] = frozenset(
    {"exists", "not_unique", "occupied", "version_limit", "conflict"}
)
_STATUS_KINDS: Mapping[int, VfsErrorKind] = {
    403: "denied",
    404: "not_found",
    413: "too_large",
    415: "unsupported",
    429: "busy",
}
_DEFAULT_CONFLICT: Mapping[Operation, VfsErrorKind] = {
    "create": "exists",
    "edit": "not_unique",
    "move": "occupied",
}


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _conflict_kind(body: Mapping[str, Any], operation: Operation) -> VfsErrorKind:
    code = str(body.get("code") or "")
    if code in _CONFLICT_CODES:
        return code  # type: ignore[return-value]
    words = str(body.get("error") or body.get("message") or "").lower()
    if "concurrent" in words:
        return "conflict"
    if "version" in words:
        return "version_limit"
    if "unique" in words or "more than once" in words:
        return "not_unique"
    if "exists" in words or "occupied" in words:
        return "occupied" if operation == "move" else "exists"
    return _DEFAULT_CONFLICT.get(operation, "conflict")


def _error_text(body: Mapping[str, Any]) -> str:
    # The worker's message, bounded: it names the problem, never file content.
    return str(body.get("error") or body.get("message") or "")[:300]


def _node(raw: Any) -> Node | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
        return None
    kind: Literal["file", "folder"] = (
        "folder" if raw.get("type") in ("folder", "directory") else "file"
    )
    size = raw.get("size")
    return Node(
        path=raw["path"],
        kind=kind,
        id=str(raw["id"]) if raw.get("id") is not None else None,
        size=int(size) if isinstance(size, int | float) else None,
        mime_type=str(raw["mimeType"]) if raw.get("mimeType") else None,
    )


def _deleted(path: str, result: Mapping[str, Any] | None, resolved: bool) -> DeleteResult:
    if not resolved:
        return DeleteResult(path, "missing")
    if result is None:
        return DeleteResult(path, "failed", "not reported by the file store")
    if result.get("ok"):
        return DeleteResult(path, "trashed")
    if result.get("status") == 404:
        return DeleteResult(path, "missing")
    return DeleteResult(
        path, "failed", str(result.get("error") or f"status {result.get('status')}")[:200]
    )


def _file_info(raw: Mapping[str, Any], path: str, size: int, mime_type: str) -> FileInfo:
    version = raw.get("version")
    return FileInfo(
        path=str(raw.get("path") or path),
        id=str(raw.get("id") or ""),
        size=int(raw["size"]) if isinstance(raw.get("size"), int | float) else size,
        mime_type=str(raw.get("mimeType") or mime_type),
        version=int(version) if isinstance(version, int | float) else None,
    )


class RemoteVfs:
    """One user's files on the VFS worker (a :class:`~oracle_plugins.vfs.VfsBackend`).

    Cheap to build: one per request. Nothing is fetched until a method is called.

    Args:
        http: The plugin's shared client.
        ucan: The request's ``rt_ctx.ucan``.
        user_did: The request's user.
        vfs_url: The worker's base URL (``https://vfs.ixo.earth``); routes are under
            ``{vfs_url}/api/fs`` and its ``did:web`` is served at the origin.
        delegations: Hop 1: the user's delegation to the oracle.
        timeout_seconds: Per-request timeout.
        logger: Where retries and failures are logged.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        ucan: UcanAccessor,
        *,
        user_did: str,
        vfs_url: str,
        delegations: DelegationCache,
        timeout_seconds: float,
        logger: logging.Logger | None = None,
    ) -> None:
        self._http = http
        self._ucan = ucan
        self.user_did = user_did
        self.vfs_url = vfs_url.rstrip("/")
        self._api = f"{self.vfs_url}/api/fs"
        self._delegations = delegations
        self._timeout = timeout_seconds
        self._logger = logger or logging.getLogger("oracle.plugin.vfs")

    # --- the protocol ---------------------------------------------------------------------

    async def search(self, q: str, path: str = "/") -> SearchResult:
        """``GET /search?q&path`` → ``{hits, semantic}``."""
        body = await self._json("GET", "/search", "fs/read", params={"q": q, "path": path})
        hits = []
        for raw in body.get("hits") or []:
            if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
                continue
            lines = tuple(
                (int(r[0]), int(r[1]))
                for r in raw.get("lines") or []
                if isinstance(r, list | tuple) and len(r) == 2
            )
            score = raw.get("score")
            hits.append(
                SearchHit(
                    path=raw["path"],
                    lines=lines,
                    snippet=str(raw.get("snippet") or ""),
                    score=float(score) if isinstance(score, int | float) else None,
                )
            )
        return SearchResult(hits=tuple(hits), semantic=bool(body.get("semantic")))

    async def grep(self, q: str, path: str = "/") -> list[GrepMatch]:
        """``GET /grep?q&path`` → ``{matches}``."""
        body = await self._json("GET", "/grep", "fs/read", params={"q": q, "path": path})
        return [
            GrepMatch(path=m["path"], line=int(m.get("line") or 0), text=str(m.get("text") or ""))
            for m in body.get("matches") or []
            if isinstance(m, dict) and isinstance(m.get("path"), str)
        ]

    async def glob(self, pattern: str) -> list[str]:
        """``GET /glob?pattern`` → ``{files}``."""
        body = await self._json("GET", "/glob", "fs/list", params={"pattern": pattern})
        paths: list[str] = []
        for raw in body.get("files") or []:
            if isinstance(raw, str):
                paths.append(raw)
            elif isinstance(raw, dict) and isinstance(raw.get("path"), str):
                paths.append(raw["path"])
        return paths

    async def list(self, path: str = "/") -> builtins.list[Node]:
        """``GET /tree?path`` → ``{nodes}``: the direct children."""
        body = await self._json("GET", "/tree", "fs/list", params={"path": path})
        nodes = [_node(raw) for raw in body.get("nodes") or []]
        return [n for n in nodes if n is not None]

    async def read(self, path: str, offset: int, limit: int) -> ReadWindow:
        """``GET /files/{id}/read?offset&limit``."""
        node = await self._resolve(path, want="file")
        body = await self._json(
            "GET",
            f"/files/{node.id}/read",
            "fs/read",
            params={"offset": offset, "limit": limit},
            route="/files/{id}/read",
        )
        text = str(body.get("text") or "")
        return ReadWindow(
            text=text,
            offset=int(body.get("offset") or offset),
            count=int(body.get("count") or (len(text.splitlines()) if text else 0)),
            has_more=bool(body.get("hasMore")),
            total_lines=int(body.get("totalLines") or 0),
            mime_type=str(body.get("mimeType") or node.mime_type or "text/plain"),
        )

    async def content(self, path: str, max_bytes: int) -> tuple[bytes, str]:
        """``GET /files/{id}/content``; ``too_large`` beyond ``max_bytes``."""
        node = await self._resolve(path, want="file")
        if node.size is not None and node.size > max_bytes:
            raise VfsError("too_large", f"{path} is {node.size} bytes (at most {max_bytes})")
        response = await self._send(
            "GET",
            f"/files/{node.id}/content",
            "fs/read",
            route="/files/{id}/content",
            operation="read",
        )
        if len(response.content) > max_bytes:
            raise VfsError("too_large", f"{path} is larger than {max_bytes} bytes")
        mime = response.headers.get("content-type", "").split(";")[0].strip()
        return response.content, mime or node.mime_type or "application/octet-stream"

    async def write(self, path: str, data: bytes, mime_type: str, *, overwrite: bool) -> FileInfo:
        """``POST /files?path``; an existing file is replaced (``PUT``) only with ``overwrite``."""
        headers = {"Content-Type": mime_type}
        try:
            response = await self._send(
                "POST",
                "/files",
                "fs/write",
                params={"path": path},
                content=data,
                headers=headers,
                operation="create",
            )
        except VfsError as exc:
            if exc.kind != "exists" or not overwrite:
                raise
            node = await self._resolve(path, want="file")
            response = await self._send(
                "PUT",
                f"/files/{node.id}",
                "fs/write",
                content=data,
                headers=headers,
                route="/files/{id}",
                operation="update",
            )
        return _file_info(_body(response), path, len(data), mime_type)

    async def edit(self, path: str, old: str, new: str, *, replace_all: bool) -> int:
        """``PATCH /files/{id}/edit`` → ``{replacements}``."""
        node = await self._resolve(path, want="file")
        body = await self._json(
            "PATCH",
            f"/files/{node.id}/edit",
            "fs/write",
            json={"oldString": old, "newString": new, "replaceAll": replace_all},
            route="/files/{id}/edit",
            operation="edit",
        )
        replacements = int(body.get("replacements") or 0)
        if replacements == 0:
            raise VfsError("no_match", f"oldString does not occur in {path}")
        return replacements

    async def move(self, source: str, destination: str) -> FileInfo | Node:
        """``POST /batch/move {items: [{id, destinationPath}]}``."""
        node = await self._resolve(source)
        body = await self._json(
            "POST",
            "/batch/move",
            "fs/write",
            json={"items": [{"id": node.id, "destinationPath": destination}]},
            operation="move",
        )
        results = [r for r in body.get("results") or [] if isinstance(r, dict)]
        result = next((r for r in results if str(r.get("id")) == node.id), None)
        if result is None:
            raise VfsError("unavailable", "the file store did not report the move")
        if not result.get("ok"):
            raise self._item_error(result, "move", destination)
        moved = str(result.get("path") or destination)
        if node.kind == "folder":
            return Node(path=moved, kind="folder", id=node.id)
        return FileInfo(
            path=moved,
            id=node.id or "",
            size=node.size or 0,
            mime_type=node.mime_type or "application/octet-stream",
        )

    async def delete(self, paths: builtins.list[str]) -> builtins.list[DeleteResult]:
        """``POST /batch/delete {ids}``; paths that do not resolve are ``missing``."""
        wanted = builtins.list(dict.fromkeys(paths))
        ids = await self._ids(wanted)
        by_id: dict[str, dict[str, Any]] = {}
        if ids:
            body = await self._json(
                "POST",
                "/batch/delete",
                "fs/delete",
                json={"ids": builtins.list(ids.values())},
                operation="delete",
            )
            by_id = {str(r.get("id")): r for r in body.get("results") or [] if isinstance(r, dict)}
        return [
            _deleted(path, by_id.get(ids[path]) if path in ids else None, path in ids)
            for path in wanted
        ]

    async def _ids(self, paths: builtins.list[str]) -> dict[str, str]:
        """The id of each path that exists, looked up once per parent folder."""
        children: dict[str, dict[str, Node]] = {}
        ids: dict[str, str] = {}
        for path in paths:
            parent = parent_of(path)
            if parent not in children:
                try:
                    children[parent] = {n.path: n for n in await self.list(parent)}
                except VfsError as exc:
                    if exc.kind != "not_found":
                        raise
                    children[parent] = {}
            node = children[parent].get(path)
            if node is not None and node.id is not None:
                ids[path] = node.id
        return ids

    async def share(self, path: str, *, public: bool) -> str | None:
        """``PATCH /files/{id}/public`` (a file) or ``PUT /folders/public`` (a folder)."""
        node = await self._resolve(path)
        flag = "true" if public else "false"
        if node.kind == "folder":
            body = await self._json(
                "PUT",
                "/folders/public",
                "fs/write",
                params={"path": path, "public": flag},
                operation="share",
            )
        else:
            body = await self._json(
                "PATCH",
                f"/files/{node.id}/public",
                "fs/write",
                params={"public": flag},
                route="/files/{id}/public",
                operation="share",
            )
        url = body.get("publicUrl")
        return str(url) if public and url else None

    # --- plumbing -------------------------------------------------------------------------

    async def _resolve(self, path: str, *, want: Literal["file", "folder"] | None = None) -> Node:
        """The node at ``path``, through ``GET /tree`` of its parent."""
        try:
            siblings = await self.list(parent_of(path))
        except VfsError as exc:
            if exc.kind == "not_found":
                raise VfsError("not_found", f"{path} was not found") from exc
            raise
        node = next((n for n in siblings if n.path == path), None)
        if node is None or node.id is None:
            raise VfsError("not_found", f"{path} was not found")
        if want == "file" and node.kind != "file":
            raise VfsError("unsupported", f"{path} is a folder; this needs a file")
        return node

    def _item_error(self, result: Mapping[str, Any], operation: Operation, path: str) -> VfsError:
        status = result.get("status")
        error = str(result.get("error") or "")
        if status == 409:
            return VfsError(_conflict_kind({"error": error}, operation), f"{path}: {error}")
        kind = self._kind_for(int(status) if isinstance(status, int) else 500)
        return VfsError(kind, error[:200])

    @staticmethod
    def _kind_for(status: int) -> VfsErrorKind:
        return _STATUS_KINDS.get(status, "unavailable")

    async def _json(
        self,
        method: str,
        path: str,
        ability: Ability,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        route: str | None = None,
        operation: Operation = "read",
    ) -> dict[str, Any]:
        response = await self._send(
            method, path, ability, params=params, json=json, route=route, operation=operation
        )
        return _body(response)

    async def _invocation(self, ability: Ability) -> str:
        ucan = self._ucan
        delegation = await self._delegations.get(ucan, self.user_did)
        if delegation is None:
            raise VfsError("no_delegation", "the user has not granted this oracle their files")
        minted = await ucan.create_invocation_from_delegation(
            delegation.car,
            self.vfs_url,
            VFS_CAPABILITY,
            can=ability,
            max_ttl_seconds=INVOCATION_TTL_SECONDS,
        )
        token = minted.get("invocation")
        if token:
            return token
        reason = minted.get("error", "")
        self._logger.info("vfs: invocation for %s not minted: %s", ability, reason)
        if "not found" in reason.lower():
            raise VfsError("denied", f"the user's grant does not include {ability}")
        if "expired" in reason.lower() or "audience" in reason.lower():
            self._delegations.forget(self.user_did)
            raise VfsError("no_delegation", "the user's grant expired or is not for this oracle")
        raise VfsError("unavailable", "the oracle could not authorise the request")

    async def _send(
        self,
        method: str,
        path: str,
        ability: Ability,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        route: str | None = None,
        operation: Operation = "read",
    ) -> httpx.Response:
        """Send one call with its retries; a 2xx response, or ``VfsError``."""
        route = route or path
        idempotent = method == "GET"
        retried_auth = retried_transient = retried_conflict = False
        while True:
            token = await self._invocation(ability)
            sent = {
                **(headers or {}),
                "Authorization": f"Bearer {token}",
                "X-Auth-Type": "ucan",
            }
            try:
                response = await self._http.request(
                    method,
                    f"{self._api}{path}",
                    params=params,
                    json=json,
                    content=content,
                    headers=sent,
                    timeout=self._timeout,
                )
            except httpx.TransportError as exc:
                if idempotent and not retried_transient:
                    retried_transient = True
                    self._logger.info(
                        "vfs: %s %s failed (%s), retrying", method, route, type(exc).__name__
                    )
                    await asyncio.sleep(_RETRY_PAUSE)
                    continue
                self._logger.warning("vfs: %s %s failed (%s)", method, route, type(exc).__name__)
                raise VfsError("unavailable", "the file store could not be reached") from exc
            status = response.status_code
            if status < 300:
                return response
            body = _body(response)
            if status == 401 and not retried_auth:
                retried_auth = True
                self._logger.info(
                    "vfs: %s %s answered 401, retrying with a new invocation", method, route
                )
                continue
            if idempotent and not retried_transient and (status == 429 or status >= 500):
                retried_transient = True
                self._logger.info("vfs: %s %s answered %s, retrying", method, route, status)
                await asyncio.sleep(self._pause(response))
                continue
            if (
                status == 409
                and not idempotent
                and not retried_conflict
                and _conflict_kind(body, operation) == "conflict"
            ):
                retried_conflict = True
                self._logger.info("vfs: %s %s modified concurrently, retrying", method, route)
                continue
            level = logging.WARNING if status >= 500 else logging.INFO
            self._logger.log(level, "vfs: %s %s answered %s", method, route, status)
            raise self._failure(status, body, operation)

    @staticmethod
    def _pause(response: httpx.Response) -> float:
        raw = response.headers.get("retry-after", "")
        try:
            return min(max(float(raw), 0.0), _MAX_RETRY_AFTER)
        except ValueError:
            return _RETRY_PAUSE

    def _failure(self, status: int, body: Mapping[str, Any], operation: Operation) -> VfsError:
        detail = _error_text(body)
        if status == 401:
            # Refused twice with fresh invocations: the grant no longer works.
            self._delegations.forget(self.user_did)
            return VfsError("no_delegation", "the file store did not accept the oracle's grant")
        if status == 409:
            return VfsError(_conflict_kind(body, operation), detail)
        if status == 422 and operation == "edit":
            return VfsError("no_match", detail)
        if status in (400, 422):
            return VfsError("unsupported", detail)
        return VfsError(self._kind_for(status), detail)
