"""The sandbox bridge tools: copy files between the user's files and the sandbox.

``sandbox_to_vfs`` keeps what a run produced (a report, a chart, a dataset) in the
user's files; ``vfs_to_sandbox`` puts one of the user's files where code can read it.
The oracle moves the bytes, through the sandbox plugin's shared state ``sandboxFiles``
and this plugin's backend: they never pass through the model, so binary files arrive
byte for byte and cost no tokens. Transfers are capped at 10 MiB. The sandbox side is
under ``/workspace/`` (read) and ``/workspace/data/`` (write, the persistent folder).

``deleteSource`` removes the sandbox copy after ``sandbox_to_vfs`` (a move). After
``vfs_to_sandbox`` it does not remove the user's file: deleting the user's files goes
through ``vfs_delete``, which waits for the user's approval, and a copy tool must not be
a way around it; the answer says so.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from oracle_core import PluginTool, RuntimeContext, plugin_tool
from oracle_plugins.vfs._backend import VfsBackend, VfsError
from oracle_plugins.vfs._paths import MAX_PATH, check_path
from oracle_plugins.vfs._tools import BackendFor, error_text, mime_type_for

__all__ = ["BRIDGE_TOOL_NAMES", "MAX_TRANSFER_BYTES", "bridge_tools"]

BRIDGE_TOOL_NAMES = ("sandbox_to_vfs", "vfs_to_sandbox")
MAX_TRANSFER_BYTES = 10 * 1024 * 1024
"""The most one transfer moves either way."""

_READABLE = "/workspace/"
_WRITABLE = "/workspace/data/"


class SandboxFileAccess(Protocol):
    """What the bridge uses of the sandbox plugin's ``sandboxFiles`` (``SandboxFiles``);
    its failures are ``RuntimeError``s whose message is fit for the model."""

    async def write(self, path: str, data: bytes) -> int: ...

    async def read(self, path: str, *, max_bytes: int) -> bytes: ...

    async def delete(self, path: str) -> bool: ...


class SandboxToVfsArgs(BaseModel):
    """Inputs of ``sandbox_to_vfs``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sandboxPath: str = Field(
        min_length=1, max_length=MAX_PATH, description="File in the sandbox, under /workspace/."
    )
    vfsPath: str = Field(
        min_length=1, max_length=MAX_PATH, description="Where to keep it, e.g. /reports/q3.pdf."
    )
    overwrite: bool = Field(False, description="Replace an existing file (ask the user first).")
    deleteSource: bool = Field(False, description="Remove the sandbox copy afterwards.")


class VfsToSandboxArgs(BaseModel):
    """Inputs of ``vfs_to_sandbox``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    vfsPath: str = Field(min_length=1, max_length=MAX_PATH, description="The user's file.")
    sandboxPath: str = Field(
        min_length=1, max_length=MAX_PATH, description="Destination under /workspace/data/."
    )
    deleteSource: bool = Field(
        False, description="Not honoured: remove the user's file with vfs_delete instead."
    )


def _sandbox_path(path: str, prefix: str) -> str | None:
    """Why ``path`` is no sandbox path under ``prefix``, or ``None`` when it is one."""
    if not path.startswith(prefix) or path == prefix:
        return f"sandbox paths here are files under {prefix} (got {path[:200]!r})"
    if "\x00" in path or "\n" in path or "'" in path or "//" in path:
        return "sandbox paths must not hold quotes, newlines, NUL or '//'"
    if any(part in (".", "..") for part in path.split("/")):
        return "sandbox paths must not hold '.' or '..' segments"
    return None


def _files_of(rt_ctx: RuntimeContext[Any]) -> SandboxFileAccess | None:
    """The sandbox plugin's ``sandboxFiles`` for the request; ``None`` without a sandbox."""
    shared = rt_ctx.shared
    files: SandboxFileAccess | None = shared.get("sandboxFiles") if shared is not None else None
    return files


def _answer(**fields: Any) -> str:
    return json.dumps({key: value for key, value in fields.items() if value is not None})


def bridge_tools(backend_for: BackendFor) -> list[PluginTool]:
    """``sandbox_to_vfs`` and ``vfs_to_sandbox`` over the request's backend and sandbox."""

    def oracle_did(rt_ctx: RuntimeContext[Any]) -> str | None:
        did = rt_ctx.config.get("ORACLE_DID")
        return str(did) if did else None

    def sides(
        rt_ctx: RuntimeContext[Any], sandbox_path: str, sandbox_prefix: str, vfs_path: str
    ) -> tuple[VfsBackend, SandboxFileAccess] | str:
        """Both ends of a transfer, or the model's words for why there is none."""
        problem = _sandbox_path(sandbox_path, sandbox_prefix)
        if problem is not None:
            return f"Error: {problem}."
        try:
            check_path(vfs_path)
        except VfsError as exc:
            return error_text(exc, oracle_did=oracle_did(rt_ctx), path=vfs_path)
        files = _files_of(rt_ctx)
        if files is None:
            return "Error: the sandbox is not available in this conversation."
        backend = backend_for(rt_ctx)
        if backend is None:
            return error_text(VfsError("unavailable"), oracle_did=oracle_did(rt_ctx))
        return backend, files

    @plugin_tool(
        name="sandbox_to_vfs",
        description=(
            "Save a file the sandbox produced into the user's files, so it persists and "
            "is searchable. Copies by default; deleteSource=true moves it."
        ),
        args_schema=SandboxToVfsArgs,
        effect="write",
    )
    async def sandbox_to_vfs(args: SandboxToVfsArgs, rt_ctx: RuntimeContext[Any]) -> str:
        found = sides(rt_ctx, args.sandboxPath, _READABLE, args.vfsPath)
        if isinstance(found, str):
            return found
        backend, files = found
        try:
            data = await files.read(args.sandboxPath, max_bytes=MAX_TRANSFER_BYTES)
        except RuntimeError as exc:
            return f"Error: {exc}"
        try:
            written = await backend.write(
                args.vfsPath, data, mime_type_for(args.vfsPath), overwrite=args.overwrite
            )
        except VfsError as exc:
            return error_text(exc, oracle_did=oracle_did(rt_ctx), path=args.vfsPath)
        deleted: bool | None = None
        note = None
        if args.deleteSource:
            try:
                deleted = await files.delete(args.sandboxPath)
            except RuntimeError:
                deleted = False
            if not deleted:
                note = "the file was saved, but its sandbox copy could not be removed"
        return _answer(
            ok=True,
            vfsPath=written.path,
            bytes=len(data),
            id=written.id,
            mimeType=written.mime_type,
            fromSandbox=args.sandboxPath,
            deletedSource=deleted,
            note=note,
        )

    @plugin_tool(
        name="vfs_to_sandbox",
        description=(
            "Copy one of the user's files into the sandbox (under /workspace/data/) so code "
            "can read it, byte for byte."
        ),
        args_schema=VfsToSandboxArgs,
        effect="write",
    )
    async def vfs_to_sandbox(args: VfsToSandboxArgs, rt_ctx: RuntimeContext[Any]) -> str:
        found = sides(rt_ctx, args.sandboxPath, _WRITABLE, args.vfsPath)
        if isinstance(found, str):
            return found
        backend, files = found
        try:
            data, mime_type = await backend.content(args.vfsPath, MAX_TRANSFER_BYTES)
        except VfsError as exc:
            return error_text(exc, oracle_did=oracle_did(rt_ctx), path=args.vfsPath)
        try:
            await files.write(args.sandboxPath, data)
        except RuntimeError as exc:
            return f"Error: {exc}"
        note = (
            "the user's file was kept: removing it is vfs_delete's, which asks the user first"
            if args.deleteSource
            else None
        )
        return _answer(
            ok=True,
            sandboxPath=args.sandboxPath,
            bytes=len(data),
            mimeType=mime_type,
            fromVfs=args.vfsPath,
            note=note,
        )

    return [sandbox_to_vfs, vfs_to_sandbox]
