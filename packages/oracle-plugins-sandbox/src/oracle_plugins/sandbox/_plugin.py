"""``SandboxPlugin``: the user's sandbox, its tools passed through per request (03-plugins §7)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from oracle_core import (
    Accessor,
    OraclePlugin,
    PluginContext,
    PluginTool,
    ReadonlyState,
    RuntimeContext,
)
from oracle_mcp import McpClient, McpUnavailableError, mcp_plugin_tools
from oracle_plugins.sandbox._config import SandboxConfig, oracle_secrets, wants_sandbox
from oracle_plugins.sandbox._embedded import EmbeddedSandbox, EmbeddedSettings
from oracle_plugins.sandbox._files import SandboxFiles
from oracle_plugins.sandbox._headers import RequestHeaders, SandboxAuth
from oracle_plugins.sandbox._manifest import MANIFEST

__all__ = ["MANAGEMENT_PREFIX", "WORKSPACE_DATA", "SandboxPlugin"]

MANAGEMENT_PREFIX = "oracle_"
WORKSPACE_DATA = "/workspace/data/"
RUN_TOOL = "sandbox_run"
WRITE_TOOL = "sandbox_write_file"
BLOB_TOOL = "sandbox_write_blob"
TOOL_SECONDS = 180.0


class WriteBlobArgs(BaseModel):
    """Arguments of ``sandbox_write_blob``."""

    # The wire name (camelCase), as the anchor's clients and prompts use it.
    blobId: str = Field(
        description="The blobId a tool returned (e.g. mint_invocation): blob_ and 16 hex digits."
    )
    path: str = Field(
        description="Where to write it in the sandbox; must be under /workspace/data/."
    )


@dataclass
class _Running:
    client: McpClient
    auth: SandboxAuth
    embedded: EmbeddedSandbox | None = None


class SandboxPlugin(OraclePlugin):
    """Code runs, files, artifacts and skills in the user's sandbox.

    The tools are the sandbox's own, listed over MCP and passed through verbatim
    (``sandbox_run``, ``sandbox_write_file``, ``artifact_*``, ``load_skill``…), called with
    the user's headers (see ``_headers``); ``sandbox_write_blob`` is added to write a
    stored blob without the model relaying it. The sandbox is a hosted one at
    ``SANDBOX_MCP_URL``, or, with ``SANDBOX_BACKEND=embedded``, the ``oracle-sandbox``
    server this plugin starts beside the oracle (bubblewrap isolation, one machine).

    Args:
        include_oracle_management_tools: Bind the sandbox's ``oracle_*`` operator
            tools too (off: user-facing oracles should not offer them).
        tool_timeout: Seconds a sandbox call may take (180 in the anchor).
        reconnect_attempts: MCP reconnections after a failed connection.
        reconnect_delay: Seconds between them.
        tools_ttl: Seconds the sandbox's tool list is reused.
    """

    name = "sandbox"
    version = "0.1.0"
    config_schema = SandboxConfig
    auto_detect_hint = "SANDBOX_MCP_URL is set (or SANDBOX_BACKEND=embedded)"
    manifest = MANIFEST

    def __init__(
        self,
        *,
        include_oracle_management_tools: bool = False,
        tool_timeout: float = TOOL_SECONDS,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        tools_ttl: float = 300.0,
    ) -> None:
        self.include_oracle_management_tools = include_oracle_management_tools
        self.tool_timeout = tool_timeout
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.tools_ttl = tools_ttl
        self._running: _Running | None = None

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On with ``SANDBOX_MCP_URL``; ``SANDBOX_BACKEND=embedded`` is the runtime's
        choice (from the manifest's ``backends``), never made for local mode alone."""
        return wants_sandbox(env)

    @property
    def embedded(self) -> EmbeddedSandbox | None:
        """The embedded sandbox of the runtime this instance serves, when there is one."""
        return self._running.embedded if self._running is not None else None

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[SandboxConfig]) -> AsyncIterator[None]:
        """Start the embedded sandbox (embedded backend) and open the MCP client."""
        if self._running is not None:
            raise RuntimeError(
                "this SandboxPlugin instance already runs in another runtime; "
                "pass a new SandboxPlugin() to each runtime"
            )
        config = ctx.plugin_config
        skills_url = _skills_url(ctx)
        embedded: EmbeddedSandbox | None = None
        if config.SANDBOX_BACKEND == "embedded":
            embedded = EmbeddedSandbox(_settings(ctx, config, skills_url), ctx.logger)
            await embedded.start()
            url, token = embedded.url, embedded.token
        else:
            assert config.SANDBOX_MCP_URL is not None  # the config requires it
            url, token = config.SANDBOX_MCP_URL, None
            ctx.logger.info("sandbox: hosted sandbox at %s", url)
        client = McpClient(
            url,
            name="sandbox",
            tool_timeout=self.tool_timeout,
            reconnect_attempts=self.reconnect_attempts,
            reconnect_delay=self.reconnect_delay,
            tools_ttl=self.tools_ttl,
        )
        running = _Running(client, SandboxAuth(url, token, skills_url), embedded)
        self._running = running
        try:
            yield
        finally:
            self._running = None
            await client.aclose()
            if embedded is not None:
                await embedded.stop()

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """The sandbox's tools for this user (none when it is unreachable)."""
        running = self._running
        if running is None or not rt_ctx.user.did:
            return []
        headers = RequestHeaders(running.auth, oracle_secrets(rt_ctx.config.get("ORACLE_SECRETS")))
        try:
            listed = await running.client.list_tools(await headers.for_tools(rt_ctx))
        except McpUnavailableError as exc:
            rt_ctx.logger.warning("sandbox unavailable: %s", exc)
            rt_ctx.report_degraded("Sandbox")
            return []
        wanted = [
            d
            for d in listed
            if self.include_oracle_management_tools or not d.name.startswith(MANAGEMENT_PREFIX)
        ]
        tools: list[PluginTool] = []
        for definition in wanted:
            source = headers.for_runs if definition.name == RUN_TOOL else headers.for_tools
            (tool,) = mcp_plugin_tools(
                running.client, [definition], headers=source, label="the sandbox"
            )
            if definition.name == WRITE_TOOL:
                tool = _data_only(tool)
            tools.append(tool)
        if any(d.name == WRITE_TOOL for d in wanted):
            tools.append(_write_blob_tool(running.client, headers))
        return tools

    def get_shared_state(self) -> Mapping[str, Accessor]:
        """``sandboxFiles``: the user's sandbox files for other plugins (``SandboxFiles``),
        ``None`` while the sandbox is not running or the request has no user."""

        def sandbox_files(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> Any:
            running = self._running
            if running is None or not rt_ctx.user.did:
                return None
            secrets = oracle_secrets(rt_ctx.config.get("ORACLE_SECRETS"))
            return SandboxFiles(running.client, RequestHeaders(running.auth, secrets), rt_ctx)

        return {"sandboxFiles": sandbox_files}

    async def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        """The user's secrets by the names runs see (``_USER_SECRET_<NAME>``), never values."""
        if rt_ctx.secrets is None or self._running is None:
            return {}
        try:
            names = [entry.name for entry in await rt_ctx.secrets.get_index()]
        except Exception as exc:
            rt_ctx.logger.warning("sandbox: the secret index was not read (%s)", type(exc).__name__)
            return {}
        if not names:
            return {}
        lines = [
            "The user has stored these secrets. A skill run (sandbox_run with the skill's "
            "cid) gets each as an environment variable; you never see their values:",
            *(f"- _USER_SECRET_{name.upper()}" for name in names),
        ]
        return {"user_secrets": "\n".join(lines)}


def _skills_url(ctx: PluginContext[Any]) -> str | None:
    if "skills" not in ctx.available_plugins:
        return None
    url = ctx.config.get("SKILLS_CAPSULES_BASE_URL")
    return str(url).rstrip("/") if url else None


def _settings(
    ctx: PluginContext[Any], config: SandboxConfig, skills_url: str | None
) -> EmbeddedSettings:
    if config.SANDBOX_ROOT:
        root = Path(config.SANDBOX_ROOT)
    else:
        sqlite = Path(str(ctx.config.get("SQLITE_DATABASE_PATH") or "./data/sqlite"))
        root = sqlite.parent / "sandbox"
    return EmbeddedSettings(
        root=root.absolute(),
        registry=skills_url,
        wall_seconds=config.SANDBOX_WALL_SECONDS,
        cpu_seconds=config.SANDBOX_CPU_SECONDS,
        memory_mb=config.SANDBOX_MEMORY_MB,
    )


def _outside_data(path: object) -> str | None:
    """Why ``path`` may not be written by ``sandbox_write_file``, or ``None``."""
    if not isinstance(path, str) or not path.startswith(WORKSPACE_DATA):
        return f"path must be under {WORKSPACE_DATA} (got {str(path)[:200]!r})"
    if "\x00" in path or any(part in ("..", ".") for part in path.split("/")):
        return "path must not hold '.', '..' or NUL segments"
    return None


def _data_only(tool: PluginTool) -> PluginTool:
    """``sandbox_write_file`` refusing, before any request, paths outside the data folder."""
    inner = tool.handler

    async def write(args: Any, rt_ctx: RuntimeContext[Any]) -> Any:
        payload = args.model_dump() if isinstance(args, BaseModel) else dict(args)
        problem = _outside_data(payload.get("path"))
        if problem is not None:
            return {
                "ok": False,
                "error": f"{problem}. For /tmp or other scratch files use sandbox_run "
                "(e.g. a here-doc).",
            }
        return await inner(args, rt_ctx)

    return tool.model_copy(update={"handler": write})


def _write_blob_tool(client: McpClient, headers: RequestHeaders) -> PluginTool:
    async def write_blob(args: WriteBlobArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return json.dumps(await _write_blob(client, headers, args, rt_ctx))

    return PluginTool(
        name=BLOB_TOOL,
        description=(
            "Write a server-stored blob (a long value a tool returned as a blobId, such as "
            "a UCAN invocation) to a file in the sandbox, without relaying the value "
            "yourself. path must be under /workspace/data/. Returns {success, path, "
            "bytesWritten, blobName} or {success: false, error}; when the blob is not "
            "found or expired, produce it again."
        ),
        args_schema=WriteBlobArgs,
        handler=write_blob,
        effect="write",
    )


async def _write_blob(
    client: McpClient, headers: RequestHeaders, args: WriteBlobArgs, rt_ctx: RuntimeContext[Any]
) -> dict[str, Any]:
    store = rt_ctx.blob_store
    if store is None:
        return {"success": False, "error": "this oracle keeps no blobs"}
    if not store.is_valid_blob_id(args.blobId):
        return {
            "success": False,
            "error": f"invalid blobId: expected blob_ and 16 hex digits, got {args.blobId[:40]!r}",
        }
    problem = _outside_data(args.path)
    if problem is not None:
        return {"success": False, "error": problem}
    blob = await store.get(user_did=rt_ctx.user.did, blob_id=args.blobId)
    if blob is None:
        return {
            "success": False,
            "error": f"blob {args.blobId} not found (expired, never existed, or another "
            "user's); produce it again and retry",
        }
    content = {"path": args.path, "content": blob.value, "encoding": "utf8"}
    try:
        result = await client.call_tool(WRITE_TOOL, content, await headers.for_tools(rt_ctx))
    except McpUnavailableError as exc:
        return {"success": False, "error": f"sandbox_write_file failed: {exc}"}
    if result.is_error:
        text = " ".join(getattr(b, "text", "") for b in result.content).strip()
        return {"success": False, "error": f"sandbox_write_file failed: {text[:500]}"}
    return {
        "success": True,
        "path": args.path,
        "bytesWritten": len(blob.value.encode()),
        "blobName": blob.name,
    }
