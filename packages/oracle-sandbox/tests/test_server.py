"""The sandbox's MCP server, called as the oracle calls a hosted sandbox: over
streamable HTTP with the oracle's own MCP client, the runs isolated per user."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from oracle_mcp import McpClient, McpUnavailableError, render_result
from oracle_sandbox import USER_HEADER, BubblewrapSandbox, serve_sandbox

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def served(sandbox: BubblewrapSandbox) -> AsyncIterator[tuple[str, str]]:
    """The server on loopback: its ``/mcp`` URL and its token."""
    token = secrets.token_urlsafe(24)
    port = _free_port()
    stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(
        serve_sandbox(sandbox, token=token, port=port, shutdown_trigger=stop.wait)
    )
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp/", token
    finally:
        stop.set()
        await task


def headers(token: str, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", USER_HEADER: user}


async def call(url: str, token: str, user: str, name: str, args: dict[str, Any]) -> Any:
    client = McpClient(url, name="sandbox")
    try:
        result = await client.call_tool(name, args, headers(token, user), seconds=30)
    finally:
        await client.aclose()
    return result


async def test_the_tools_are_listed_and_a_run_comes_back_as_json(
    served: tuple[str, str],
) -> None:
    url, token = served
    client = McpClient(url, name="sandbox")
    try:
        tools = {t.name for t in await client.list_tools(headers(token, ALICE))}
    finally:
        await client.aclose()
    assert {"sandbox_run", "sandbox_write_file"} <= tools
    result = await call(url, token, ALICE, "sandbox_run", {"code": "echo hello; id -u"})
    assert not result.is_error
    body = json.loads(render_result(result))
    assert body["exitCode"] == 0
    assert body["stdout"].split()[0] == "hello"
    assert body["timedOut"] is False


async def test_files_written_over_mcp_are_the_users_own(served: tuple[str, str]) -> None:
    url, token = served
    wrote = await call(
        url,
        token,
        ALICE,
        "sandbox_write_file",
        {"path": "/workspace/data/in/a.bin", "content": base64.b64encode(b"\x00\x01").decode(),
         "encoding": "base64"},
    )  # fmt: skip
    assert json.loads(render_result(wrote)) == {
        "success": True, "path": "/workspace/data/in/a.bin", "bytesWritten": 2,
    }  # fmt: skip
    mine = await call(url, token, ALICE, "sandbox_run", {"code": "wc -c < in/a.bin"})
    assert json.loads(render_result(mine))["stdout"].strip() == "2"
    theirs = await call(url, token, BOB, "sandbox_run", {"code": "ls in 2>&1 || true"})
    assert "a.bin" not in json.loads(render_result(theirs))["stdout"]
    refused = await call(
        url, token, ALICE, "sandbox_write_file", {"path": "/etc/x", "content": "x"}
    )
    assert refused.is_error
    assert "/workspace/data/" in render_result(refused)


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"Authorization": "Bearer wrong-token-of-some-length"},
        {USER_HEADER: ALICE},
        {"Authorization": "Bearer {token}"},  # the token without a user
    ],
)
async def test_a_caller_without_the_token_and_a_user_runs_nothing(
    served: tuple[str, str], sandbox: BubblewrapSandbox, given: dict[str, str]
) -> None:
    url, token = served
    sent = {k: v.replace("{token}", token) for k, v in given.items()}
    client = McpClient(url, name="sandbox", reconnect_attempts=0)
    try:
        with pytest.raises(McpUnavailableError):
            await client.call_tool(
                "sandbox_run", {"code": "touch /workspace/data/ran"}, sent, seconds=10
            )
    finally:
        await client.aclose()
    async with httpx.AsyncClient() as http:
        raw = await http.post(
            url, headers=sent, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
    assert raw.status_code == 401
    assert raw.json()["code"] == "sandbox.unauthorized"
    assert not await asyncio.to_thread((sandbox.workspace(ALICE) / "ran").exists)
