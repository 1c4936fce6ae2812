"""A hosted sandbox's double: the sandbox MCP tools over streamable HTTP, plumbing only.

``SandboxDouble`` serves, at ``/mcp/``, the tools a hosted sandbox lists —
``sandbox_run``, ``sandbox_write_file``, ``load_skill``, ``read_skill``,
``artifact_get_presigned_url`` and the operator tool ``oracle_list`` — and
``/.well-known/did.json``. Every MCP request needs an ``ixo:sandbox`` invocation
(``sandbox/*``) addressed to the double's DID, rooted at a trusted user, checked with
``oracle_ucan.validate_invocation``; anything else is answered 401.

``sandbox_run`` is **not a sandbox**: it runs a whitelisted mini-language (``cat F``,
``ls [D]``, ``echo TEXT``, ``echo TEXT > F``, joined by ``;``) against a temporary
folder per user, enough to test what the plugin sends. Each call records its headers
(the invocation's audience, ``x-os-*``, ``x-us-*``, ``X-Skills-Invocation``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shlex
import tempfile
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

__all__ = ["RecordedCall", "SandboxDouble"]

_SANDBOX = CapabilityDef(can="sandbox/*", protocol="ixo:")
_DATA = "/workspace/data/"


@dataclass(frozen=True)
class RecordedCall:
    """One tool call as the double saw it.

    Attributes:
        tool: The tool's name.
        arguments: What it was called with.
        user: The user at the root of the invocation's chain.
        audience: The invocation's audience (the double's DID when correct).
        oracle_secrets: ``x-os-*`` headers, name → value.
        user_secrets: ``x-us-*`` headers, name → value.
        skills_invocation: ``X-Skills-Invocation``, when sent.
    """

    tool: str
    arguments: dict[str, Any]
    user: str
    audience: str
    oracle_secrets: dict[str, str] = field(default_factory=dict)
    user_secrets: dict[str, str] = field(default_factory=dict)
    skills_invocation: str | None = None


@dataclass(frozen=True)
class _Caller:
    user: str
    audience: str
    headers: dict[str, str]


class SandboxDouble:
    """The double's app, its users' folders and what it was sent.

    Args:
        trusted_users: User DIDs whose delegations are accepted at the root of the chain.
        did: The double's DID (served at ``/.well-known/did.json``).
        verifier: Verifies the chain's signatures (give it a resolver for ``did:ixo``).
    """

    def __init__(
        self,
        *,
        trusted_users: Collection[str],
        did: str = "did:web:sandbox.test",
        verifier: ChainVerifier | None = None,
    ) -> None:
        self.did = did
        self.origin: str | None = None
        """Base URL of the served app; set by whoever serves it."""
        self.trusted_users = list(trusted_users)
        self.gate = InvocationGate(did, "ixo:sandbox", _SANDBOX, self.trusted_users, verifier)
        self.calls: list[RecordedCall] = []
        self.rejected = self.gate.rejected
        self.skills: dict[str, dict[str, str]] = {}
        """Skills ``load_skill`` / ``read_skill`` know, by cid: file name → text."""
        self._folders = tempfile.TemporaryDirectory(prefix="sandbox-double-")
        self.mcp: MCPServer[Any] = MCPServer("sandbox-double", log_level="WARNING")
        self._register_tools()
        self._mcp_app = _Authenticated(self, mounted_app(self.mcp))

    @property
    def mcp_url(self) -> str:
        """``SANDBOX_MCP_URL`` for the served double."""
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return f"{self.origin}/mcp/"

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes (MCP at ``/mcp/``)."""
        return [
            Route("/.well-known/did.json", self._did_document, methods=["GET"]),
            Route("/artifacts/{key}/{path:path}", self._artifact, methods=["GET"]),
            Mount("/mcp", app=self._mcp_app),
        ]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the MCP session manager; the users' folders are removed afterwards."""
        try:
            async with running(self.mcp):
                yield
        finally:
            self._folders.cleanup()

    def folder(self, user: str) -> Path:
        """The user's ``/workspace/data`` in the double."""
        path = Path(self._folders.name) / hashlib.sha256(user.encode()).hexdigest()[:16]
        path.mkdir(exist_ok=True)
        return path

    def calls_of(self, tool: str) -> list[RecordedCall]:
        """The recorded calls of ``tool``."""
        return [c for c in self.calls if c.tool == tool]

    # --- auth ----------------------------------------------------------------------

    async def authenticate(self, headers: Any) -> _Caller | None:
        """The caller of a request with these headers, or ``None`` (answered 401)."""
        result = await self.gate.check(headers)
        if not result.ok:
            return None
        return _Caller(result.proof_chain[0], self.did, {k.lower(): v for k, v in headers.items()})

    async def _artifact(self, request: Request) -> Response:
        found = Path(self._folders.name) / request.path_params["key"] / request.path_params["path"]
        if ".." in request.path_params["path"].split("/") or not found.is_file():
            return JSONResponse({"error": "not found"}, status_code=404)
        return Response(found.read_bytes(), media_type="application/octet-stream")

    async def _did_document(self, request: Request) -> Response:
        return JSONResponse(did_web_document(self.did))

    # --- tools ---------------------------------------------------------------------

    def _record(self, ctx: Context[Any, Any], tool: str, arguments: dict[str, Any]) -> _Caller:
        request = ctx.request_context.request
        caller = getattr(request, "scope", {}).get("state", {}).get("sandbox_caller")
        if not isinstance(caller, _Caller):
            raise ToolError("unauthenticated")
        headers = caller.headers
        self.calls.append(
            RecordedCall(
                tool=tool,
                arguments=arguments,
                user=caller.user,
                audience=caller.audience,
                oracle_secrets={
                    k.removeprefix("x-os-"): v for k, v in headers.items() if k.startswith("x-os-")
                },
                user_secrets={
                    k.removeprefix("x-us-"): v for k, v in headers.items() if k.startswith("x-us-")
                },
                skills_invocation=headers.get("x-skills-invocation"),
            )
        )
        return caller

    def _path(self, user: str, path: str) -> Path:
        if path.rstrip("/") == _DATA.rstrip("/"):
            return self.folder(user)
        if not path.startswith(_DATA) or ".." in path.split("/"):
            raise ToolError(f"only paths under {_DATA} exist in this double")
        return self.folder(user) / path.removeprefix(_DATA)

    def _register_tools(self) -> None:
        server = self.mcp
        write = ToolAnnotations(read_only_hint=False)
        read = ToolAnnotations(read_only_hint=True)

        @server.tool(description="Run a (mini-language) command in the sandbox.", annotations=write)
        def sandbox_run(code: str, ctx: Context[Any, Any], cid: str | None = None) -> str:
            caller = self._record(ctx, "sandbox_run", {"code": code, "cid": cid})
            output = [self._command(caller.user, part.strip()) for part in code.split(";")]
            return json.dumps({"success": True, "exitCode": 0, "output": "\n".join(output)})

        @server.tool(description="Write a file under /workspace/data/.", annotations=write)
        def sandbox_write_file(
            path: str, content: str, ctx: Context[Any, Any], encoding: str = "utf8"
        ) -> str:
            caller = self._record(
                ctx, "sandbox_write_file", {"path": path, "content": content, "encoding": encoding}
            )
            target = self._path(caller.user, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = base64.b64decode(content) if encoding == "base64" else content.encode()
            target.write_bytes(data)
            return json.dumps({"success": True, "path": path, "bytesWritten": len(data)})

        @server.tool(description="Load a skill by cid.", annotations=read)
        def load_skill(cid: str, ctx: Context[Any, Any]) -> str:
            self._record(ctx, "load_skill", {"cid": cid})
            files = self.skills.get(cid)
            if files is None:
                raise ToolError(f"no skill {cid}")
            return json.dumps({"cid": cid, "skillFiles": sorted(files)})

        @server.tool(description="Read a skill's file.", annotations=read)
        def read_skill(cid: str, file: str, ctx: Context[Any, Any]) -> str:
            self._record(ctx, "read_skill", {"cid": cid, "file": file})
            text = self.skills.get(cid, {}).get(file)
            if text is None:
                raise ToolError(f"no file {file} in skill {cid}")
            return text

        @server.tool(description="Links to a workspace file.", annotations=read)
        def artifact_get_presigned_url(path: str, ctx: Context[Any, Any]) -> str:
            caller = self._record(ctx, "artifact_get_presigned_url", {"path": path})
            if not self._path(caller.user, path).is_file():
                raise ToolError(f"no file {path}")
            key = hashlib.sha256(caller.user.encode()).hexdigest()[:16]
            url = f"{self.origin}/artifacts/{key}/{path.removeprefix(_DATA)}"
            return json.dumps(
                {"previewUrl": url, "downloadUrl": url, "path": path, "expiresIn": 3600}
            )

        @server.tool(description="List the operator's oracles.", annotations=read)
        def oracle_list(ctx: Context[Any, Any]) -> str:
            self._record(ctx, "oracle_list", {})
            return "[]"

    def _command(self, user: str, command: str) -> str:
        redirect = None
        if ">" in command:
            command, _, target = command.partition(">")
            redirect = target.strip()
        words = shlex.split(command)
        if not words:
            return ""
        verb, args = words[0], words[1:]
        if verb == "echo":
            text = " ".join(args)
            if redirect is None:
                return text
            target_path = self._path(user, redirect)
            target_path.parent.mkdir(parents=True, exist_ok=True)
            target_path.write_text(text + "\n")
            return ""
        if redirect is not None:
            raise ToolError("only echo may redirect in this double")
        if verb == "cat" and len(args) == 1:
            found = self._path(user, args[0])
            if not found.is_file():
                raise ToolError(f"cat: {args[0]}: no such file")
            return found.read_text()
        if verb == "ls" and len(args) <= 1:
            folder = self._path(user, args[0]) if args else self.folder(user)
            return "\n".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else ""
        raise ToolError(f"this double runs only cat, ls and echo (not {verb})")


class _Authenticated:
    """Pure ASGI: checks the invocation before the MCP app sees the request."""

    def __init__(self, double: SandboxDouble, app: ASGIApp) -> None:
        self._double = double
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        caller = await self._double.authenticate(Request(scope).headers)
        if caller is None:
            await JSONResponse({"detail": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        scope.setdefault("state", {})["sandbox_caller"] = caller
        await self._app(scope, receive, send)
