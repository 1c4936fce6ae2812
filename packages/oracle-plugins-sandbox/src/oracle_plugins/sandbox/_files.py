"""Files in the user's sandbox, for other plugins: bytes moved by the oracle, never by
the model.

Published as the shared-state key ``sandboxFiles`` (``rt_ctx.shared.get("sandboxFiles")``,
``None`` when the sandbox is not loaded): a :class:`SandboxFiles` for the request's user.
The vfs plugin's bridge tools copy between the user's files and the sandbox with it.

- ``write(path, data)``: ``sandbox_write_file`` with base64 content (under
  ``/workspace/data/``).
- ``read(path, max_bytes)``: through ``artifact_get_presigned_url`` and its download link
  when the sandbox lists it (any size up to ``max_bytes``), else ``sandbox_run`` printing
  the file as base64 (what a hosted sandbox without artifacts offers).
- ``delete(path)``: ``sandbox_run`` ``rm -f``.

Every failure is a :class:`SandboxFileError` whose message is fit for the model.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import httpx

from oracle_core import RuntimeContext
from oracle_mcp import McpClient, McpUnavailableError, render_result
from oracle_plugins.sandbox._headers import RequestHeaders

__all__ = ["SandboxFileError", "SandboxFiles"]

_WORKSPACE = "/workspace/"
_NO_FILE = "__SANDBOX_NO_FILE__"


class SandboxFileError(RuntimeError):
    """A sandbox file could not be moved; the message says why."""


def _checked(path: str) -> str:
    if not path.startswith(_WORKSPACE) or "\x00" in path or "\n" in path or "'" in path:
        raise SandboxFileError(
            f"sandbox paths are absolute under {_WORKSPACE}, without quotes or newlines "
            f"(got {path[:200]!r})"
        )
    if any(part in (".", "..") for part in path.split("/")):
        raise SandboxFileError("sandbox paths must not hold '.' or '..' segments")
    return path


@dataclass
class SandboxFiles:
    """The sandbox's files for one request's user.

    Args:
        client: The sandbox's MCP client.
        headers: The request's headers.
        rt_ctx: The request.
    """

    client: McpClient
    headers: RequestHeaders
    rt_ctx: RuntimeContext[Any]

    async def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        sent = await self.headers.for_tools(self.rt_ctx)
        try:
            result = await self.client.call_tool(tool, arguments, sent)
        except McpUnavailableError as exc:
            raise SandboxFileError(f"the sandbox is unavailable ({exc})") from exc
        text = render_result(result)
        if result.is_error:
            raise SandboxFileError(f"the sandbox refused: {text[:300]}")
        try:
            return json.loads(text)
        except ValueError:
            return text

    async def _tools(self) -> set[str]:
        try:
            listed = await self.client.list_tools(await self.headers.for_tools(self.rt_ctx))
        except McpUnavailableError as exc:
            raise SandboxFileError(f"the sandbox is unavailable ({exc})") from exc
        return {t.name for t in listed}

    async def write(self, path: str, data: bytes) -> int:
        """Write ``data`` at ``path`` (under ``/workspace/data/``); the bytes written."""
        if not _checked(path).startswith(_WORKSPACE + "data/"):
            raise SandboxFileError("files are written in the sandbox only under /workspace/data/")
        content = base64.b64encode(data).decode()
        answer = await self._call(
            "sandbox_write_file", {"path": path, "content": content, "encoding": "base64"}
        )
        if isinstance(answer, dict) and answer.get("success") is False:
            raise SandboxFileError(f"the sandbox did not write {path}: {answer.get('error')}")
        return len(data)

    async def read(self, path: str, *, max_bytes: int) -> bytes:
        """The bytes of ``path``, at most ``max_bytes``."""
        _checked(path)
        if "artifact_get_presigned_url" in await self._tools():
            links = await self._call("artifact_get_presigned_url", {"path": path})
            url = links.get("downloadUrl") if isinstance(links, dict) else None
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise SandboxFileError("the sandbox gave no download link for the file")
            return await _download(url, max_bytes)
        answer = await self._call(
            "sandbox_run",
            {"code": f"test -f '{path}' && base64 -w0 '{path}' || echo {_NO_FILE}"},
        )
        output = (
            str(answer.get("output", answer.get("stdout", "")))
            if isinstance(answer, dict)
            else str(answer)
        )
        if output.strip() == _NO_FILE:
            raise SandboxFileError(f"no file at {path} in the sandbox")
        try:
            data = base64.b64decode(output.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SandboxFileError(f"the sandbox did not return {path} whole") from exc
        if len(data) > max_bytes:
            raise SandboxFileError(f"{path} is larger than {max_bytes} bytes")
        return data

    async def delete(self, path: str) -> bool:
        """Remove ``path`` from the sandbox; whether the command succeeded."""
        answer = await self._call("sandbox_run", {"code": f"rm -f -- '{_checked(path)}'"})
        if isinstance(answer, dict):
            return answer.get("success") is not False and answer.get("exitCode", 0) == 0
        return True


async def _download(url: str, max_bytes: int) -> bytes:
    try:
        async with (
            httpx.AsyncClient(timeout=60) as http,
            http.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise SandboxFileError(f"the file's link answered {response.status_code}")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    raise SandboxFileError(f"the file is larger than {max_bytes} bytes")
            return bytes(data)
    except httpx.HTTPError as exc:
        raise SandboxFileError(f"the file's link failed ({type(exc).__name__})") from exc
