"""The sandbox's MCP server: the hosted sandbox's tools, each run isolated locally.

``sandbox_app`` serves, at ``/mcp``, the tools a hosted sandbox lists (MCP over stateless
streamable HTTP, built with the ``mcp`` SDK):

- ``sandbox_run {code, language?}``: shell or Python in a fresh sandbox of the caller's
  (:class:`~oracle_sandbox.BubblewrapSandbox`); the result is JSON
  ``{exitCode, stdout, stderr, timedOut, truncated, seconds}``;
- ``sandbox_write_file {path, content, encoding?}``: a file under ``/workspace/data/``,
  written inside the sandbox (``encoding`` ``utf8`` or ``base64``);
- ``load_skill {cid}``: the skill's capsule fetched from the registry and unpacked
  (:class:`~oracle_sandbox.SkillCache`); answers its folder and files. ``sandbox_run``
  with a ``cid`` mounts it read-only at ``/workspace/skills/<name>/`` and gives that run
  the secrets the caller sent: ``x-os-<name>`` headers as ``<NAME>`` and ``x-us-<name>``
  as ``_USER_SECRET_<NAME>`` (runs without a ``cid`` get none);
- ``artifact_get_presigned_url {path}``: short-lived links to a workspace file,
  ``{previewUrl, downloadUrl, path, expiresIn}``, served at ``/artifacts/<token>``.

Callers authenticate with the token the oracle was given when it started this server
(``Authorization: Bearer <token>``, compared in constant time) and name the user the call
is for (``X-Sandbox-User: <did>``): the server runs on loopback beside one oracle, which
has already authenticated its users. A request without both is answered 401 and runs
nothing.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import logging
import mimetypes
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_sandbox._isolation import BubblewrapSandbox, SandboxFileError
from oracle_sandbox._skills import SkillCache, SkillError

__all__ = ["USER_HEADER", "sandbox_app", "serve_sandbox"]

logger = logging.getLogger("oracle.sandbox")

USER_HEADER = "x-sandbox-user"
MAX_USER_CHARS = 512
MAX_FILE_BYTES = 32 * 1024 * 1024
ARTIFACT_SECONDS = 3600
SKILLS_HEADER = "x-skills-invocation"
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")


class _Authenticated:
    """Refuses (401) any request without the token and a user; passes the user on."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"")
        user = headers.get(USER_HEADER.encode(), b"").decode("utf-8", "replace").strip()
        if not hmac.compare_digest(given, self._token) or not 0 < len(user) <= MAX_USER_CHARS:
            response = JSONResponse(
                {"error": "unauthorized", "code": "sandbox.unauthorized"}, status_code=401
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["sandbox_user"] = user
        await self._app(scope, receive, send)


def _user(ctx: Context[Any, Any]) -> str:
    request = ctx.request_context.request
    user = getattr(request, "scope", {}).get("state", {}).get("sandbox_user")
    if not isinstance(user, str) or not user:
        raise ToolError("unauthenticated")
    return user


def _headers(ctx: Context[Any, Any]) -> Mapping[str, str]:
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return headers if headers is not None else {}


def secrets_env(headers: Mapping[str, str]) -> dict[str, str]:
    """The variables a skill run gets from the caller's secret headers.

    ``x-os-<name>`` (the oracle's secrets) become ``<NAME>``; ``x-us-<name>`` (the
    user's) become ``_USER_SECRET_<NAME>``. Names that are not variable names are left
    out.
    """
    env: dict[str, str] = {}
    for key, value in headers.items():
        lowered = key.lower()
        if lowered.startswith("x-os-"):
            name = lowered.removeprefix("x-os-").upper()
        elif lowered.startswith("x-us-"):
            name = "_USER_SECRET_" + lowered.removeprefix("x-us-").upper()
        else:
            continue
        if _ENV_NAME.match(name):
            env[name] = value
    return env


@dataclass(frozen=True)
class _Artifact:
    user: str
    path: str
    expires: float


class _Artifacts:
    """Links to workspace files: a random token per link, forgotten when it expires."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._links: dict[str, _Artifact] = {}
        self._clock = clock

    def issue(self, user: str, path: str, seconds: int) -> str:
        now = self._clock()
        for token in [t for t, a in self._links.items() if a.expires <= now]:
            del self._links[token]
        token = secrets.token_urlsafe(24)
        self._links[token] = _Artifact(user, path, now + seconds)
        return token

    def get(self, token: str) -> _Artifact | None:
        artifact = self._links.get(token)
        if artifact is None or artifact.expires <= self._clock():
            return None
        return artifact


def sandbox_server(
    sandbox: BubblewrapSandbox,
    skills: SkillCache | None = None,
    artifacts: _Artifacts | None = None,
) -> MCPServer[Any]:
    """The MCP server of ``sandbox``'s tools (``skills`` loads the runs' skills)."""
    server: MCPServer[Any] = MCPServer("oracle-sandbox", log_level="WARNING")
    links = artifacts if artifacts is not None else _Artifacts()

    async def load(ctx: Context[Any, Any], cid: str) -> Any:
        if skills is None:
            raise ToolError("this sandbox runs no skills (it has no skills registry)")
        try:
            return await skills.load(cid, _headers(ctx).get(SKILLS_HEADER) or None)
        except SkillError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool(
        description=(
            "Run a shell script or Python code in the user's isolated sandbox. The working "
            "directory is /workspace/data (persistent); /workspace/data/output "
            "(also /workspace/output) holds deliverables; /tmp is scratch; there is no "
            "network. With a skill's cid the skill is mounted read-only at "
            "/workspace/skills/<name>/ and the run gets the user's secrets as "
            "_USER_SECRET_<NAME> variables. Returns exitCode, stdout, stderr, timedOut, "
            "truncated and seconds."
        ),
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False),
    )
    async def sandbox_run(
        code: str,
        ctx: Context[Any, Any],
        language: Literal["shell", "python"] = "shell",
        cid: str | None = None,
    ) -> str:
        mounts: dict[str, Path] = {}
        env: dict[str, str] = {}
        if cid:
            skill = await load(ctx, cid)
            mounts[skill.name] = skill.path
            env = secrets_env(_headers(ctx))
        result = await sandbox.run(_user(ctx), code, language=language, env=env, skills=mounts)
        return json.dumps(
            {
                "exitCode": result.exit_code,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "timedOut": result.timed_out,
                "truncated": result.truncated,
                "seconds": round(result.seconds, 3),
            }
        )

    @server.tool(
        description=(
            "Load a skill by its cid (from list_skills / search_skills): fetches it and "
            "answers where it is mounted in runs that pass the same cid, and its files. "
            "Read SKILL.md first, with sandbox_run and the cid."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    async def load_skill(cid: str, ctx: Context[Any, Any]) -> str:
        skill = await load(ctx, cid)
        return json.dumps(
            {
                "cid": skill.cid,
                "name": skill.name,
                "path": skill.mount,
                "skillFiles": [f"{skill.mount}/{f}" for f in skill.files],
            }
        )

    @server.tool(
        description=(
            "Short-lived links to a file in the user's workspace (under /workspace/data/ "
            "or /workspace/output/) to give the user: previewUrl opens it, downloadUrl "
            "downloads it. Returns previewUrl, downloadUrl, path and expiresIn (seconds)."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def artifact_get_presigned_url(path: str, ctx: Context[Any, Any]) -> str:
        user = _user(ctx)
        try:
            # Checked now, so the model learns of a missing file at once.
            await sandbox.read_file(user, path, max_bytes=MAX_FILE_BYTES)
        except SandboxFileError as exc:
            raise ToolError(str(exc)) from exc
        token = links.issue(user, path, ARTIFACT_SECONDS)
        request = ctx.request_context.request
        base = str(getattr(request, "base_url", "")).rstrip("/")
        url = f"{base}/artifacts/{token}"
        return json.dumps(
            {
                "previewUrl": url,
                "downloadUrl": f"{url}?download=1",
                "path": path,
                "expiresIn": ARTIFACT_SECONDS,
            }
        )

    @server.tool(
        description=(
            "Write a file in the user's sandbox, only under /workspace/data/ (folders are "
            "made). content is text (encoding utf8) or base64 (encoding base64)."
        ),
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False),
    )
    async def sandbox_write_file(
        path: str,
        content: str,
        ctx: Context[Any, Any],
        encoding: Literal["utf8", "base64"] = "utf8",
    ) -> str:
        try:
            data = (
                content.encode() if encoding == "utf8" else base64.b64decode(content, validate=True)
            )
        except (binascii.Error, ValueError) as exc:
            raise ToolError("content is not valid base64") from exc
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"a file is at most {MAX_FILE_BYTES} bytes")
        try:
            written = await sandbox.write_file(_user(ctx), path, data)
        except SandboxFileError as exc:
            raise ToolError(str(exc)) from exc
        return json.dumps({"success": True, "path": path, "bytesWritten": written})

    return server


def sandbox_app(
    sandbox: BubblewrapSandbox, *, token: str, skills: SkillCache | None = None
) -> Starlette:
    """The sandbox served over HTTP: MCP at ``/mcp``, ``GET /health``, and the artifact
    links at ``GET /artifacts/<token>`` (the link is the credential).

    Args:
        sandbox: Runs the calls.
        token: What callers present as ``Authorization: Bearer <token>``.
        skills: Loads skills for ``load_skill`` and runs with a ``cid``.
    """
    if len(token) < 16:
        raise ValueError("the sandbox token must be at least 16 characters")
    sandbox.check()
    links = _Artifacts()
    server = sandbox_server(sandbox, skills, links)
    mcp_app = server.streamable_http_app(streamable_http_path="/", stateless_http=True)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def artifact(request: Request) -> Response:
        found = links.get(request.path_params["token"])
        if found is None:
            return JSONResponse(
                {"error": "this link is unknown or expired", "code": "sandbox.link_expired"},
                status_code=404,
            )
        try:
            data = await sandbox.read_file(found.user, found.path, max_bytes=MAX_FILE_BYTES)
        except SandboxFileError:
            return JSONResponse(
                {"error": "the file is gone", "code": "sandbox.not_found"}, status_code=404
            )
        name = found.path.rsplit("/", 1)[-1]
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        disposition = "attachment" if request.query_params.get("download") else "inline"
        return Response(
            data,
            media_type=kind,
            headers={
                "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(name, safe='')}",
                # Whatever the file holds, it runs no script with this origin.
                "Content-Security-Policy": "sandbox",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, no-store",
            },
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/artifacts/{token}", artifact, methods=["GET"]),
            Mount("/mcp", app=_Authenticated(mcp_app, token)),
        ],
        lifespan=lifespan,
    )


async def serve_sandbox(
    sandbox: BubblewrapSandbox,
    *,
    token: str,
    skills: SkillCache | None = None,
    host: str = "127.0.0.1",
    port: int,
    shutdown_trigger: Callable[[], Awaitable[object]],
) -> None:
    """Serve :func:`sandbox_app` with Hypercorn until ``shutdown_trigger`` returns.

    Raises:
        SandboxUnavailableError: the machine cannot isolate runs (checked first).
    """
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    app = sandbox_app(sandbox, token=token, skills=skills)
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logger
    await serve(app, config, shutdown_trigger=shutdown_trigger)  # type: ignore[arg-type]
