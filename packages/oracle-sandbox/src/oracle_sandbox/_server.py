"""The sandbox's MCP server: the hosted sandbox's tools, each run isolated locally.

``sandbox_app`` serves, at ``/mcp``, the tools a hosted sandbox lists (MCP over stateless
streamable HTTP, built with the ``mcp`` SDK):

- ``sandbox_run {code, language?}``: shell or Python in a fresh sandbox of the caller's
  (:class:`~oracle_sandbox.BubblewrapSandbox`); the result is JSON
  ``{exitCode, stdout, stderr, timedOut, truncated, seconds}``;
- ``sandbox_write_file {path, content, encoding?}``: a file under ``/workspace/data/``,
  written inside the sandbox (``encoding`` ``utf8`` or ``base64``).

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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_sandbox._isolation import BubblewrapSandbox, SandboxFileError

__all__ = ["USER_HEADER", "sandbox_app", "serve_sandbox"]

logger = logging.getLogger("oracle.sandbox")

USER_HEADER = "x-sandbox-user"
MAX_USER_CHARS = 512
MAX_FILE_BYTES = 32 * 1024 * 1024


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


def sandbox_server(sandbox: BubblewrapSandbox) -> MCPServer[Any]:
    """The MCP server of ``sandbox``'s tools."""
    server: MCPServer[Any] = MCPServer("oracle-sandbox", log_level="WARNING")

    @server.tool(
        description=(
            "Run a shell script or Python code in the user's isolated sandbox. The working "
            "directory is /workspace/data (persistent); /tmp is scratch; there is no "
            "network. Returns exitCode, stdout, stderr, timedOut, truncated and seconds."
        ),
        annotations=ToolAnnotations(read_only_hint=False, open_world_hint=False),
    )
    async def sandbox_run(
        code: str, ctx: Context[Any, Any], language: Literal["shell", "python"] = "shell"
    ) -> str:
        result = await sandbox.run(_user(ctx), code, language=language)
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


def sandbox_app(sandbox: BubblewrapSandbox, *, token: str) -> Starlette:
    """The sandbox served over HTTP: MCP at ``/mcp``, ``GET /health``.

    Args:
        sandbox: Runs the calls.
        token: What callers present as ``Authorization: Bearer <token>``.
    """
    if len(token) < 16:
        raise ValueError("the sandbox token must be at least 16 characters")
    sandbox.check()
    server = sandbox_server(sandbox)
    mcp_app = server.streamable_http_app(streamable_http_path="/", stateless_http=True)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Mount("/mcp", app=_Authenticated(mcp_app, token)),
        ],
        lifespan=lifespan,
    )


async def serve_sandbox(
    sandbox: BubblewrapSandbox,
    *,
    token: str,
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

    app = sandbox_app(sandbox, token=token)
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logger
    await serve(app, config, shutdown_trigger=shutdown_trigger)  # type: ignore[arg-type]
