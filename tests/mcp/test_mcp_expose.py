"""``/mcp`` (plugins spec §20.4): the oracle's tools for outside MCP clients, tested with
the Python SDK's client on both protocol revisions and the official JavaScript client."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from oracle_server import AuthData, HTTPError
from oracle_server.testing import auth_headers
from oracle_ucan import Ed25519Signer

if TYPE_CHECKING:
    from tests.mcp.conftest import LedgerPlugin, Serve

JS_CLIENT = Path(__file__).parents[2] / "packages/oracle-mcp/tests/mcp_client/js/mcp_client.mjs"
LISTED = {"ledger_balance", "ledger_transfer", "ledger_statement", "get_weather"}


@asynccontextmanager
async def mcp_client(
    url: str, headers: dict[str, str], mode: str = "auto"
) -> AsyncIterator[Client]:
    """The SDK's client on ``url`` with ``headers`` on every request (``legacy``: the
    2025-11-25 handshake)."""
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def text_of(result: Any) -> str:
    [block] = result.content
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_python_client_lists_and_calls_the_users_tools(
    serve: Serve, ledger: LedgerPlugin, mode: str
) -> None:
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with mcp_client(f"{base_url}/mcp", headers, mode) as client:
            version = client.protocol_version
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            statement = await client.call_tool("ledger_statement", {"account": "rent"})
            weather = await client.call_tool("get_weather", {"city": "Lisbon"})
            bad = await client.call_tool("ledger_balance", {"account": 7, "extra": 1})

    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert set(listed) == LISTED
    balance = listed["ledger_balance"]
    assert balance.description == "[Ledger] The ledger_balance tool."
    assert balance.input_schema["required"] == ["account"]
    assert balance.annotations is not None
    assert balance.annotations.read_only_hint is True
    transfer = listed["ledger_transfer"].annotations
    assert transfer is not None
    assert (transfer.read_only_hint, transfer.destructive_hint) == (False, False)
    assert not statement.is_error
    assert json.loads(text_of(statement)) == {
        "tool": "ledger_statement",
        "account": "rent",
        "user": user.did(),
    }
    assert not weather.is_error
    assert json.loads(text_of(weather)) == {"city": "Lisbon", "celsius": 21}
    # Validated at the edge, as the model's calls are: the handler never ran.
    assert bad.is_error
    assert "Invalid arguments for tool 'ledger_balance'" in text_of(bad)
    assert [run[0] for run in ledger.runs] == ["ledger_statement"]


async def test_approval_denied_sub_agent_and_made_up_tools_never_run(
    serve: Serve, ledger: LedgerPlugin
) -> None:
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with mcp_client(f"{base_url}/mcp", headers) as client:
            wipe = await client.call_tool("ledger_wipe", {"account": "all"})
            refused = []
            for name in ("ledger_secret", "call_auditor_agent", "load_capability", "nope"):
                with pytest.raises(MCPError) as caught:
                    await client.call_tool(name, {"account": "x"})
                refused.append((caught.value.error.message, caught.value.error.data))

    assert wipe.is_error
    assert wipe.meta is not None
    assert wipe.meta["code"] == "tool.approval_required"
    assert "needs the user's approval (effect destructive)" in text_of(wipe)
    assert refused == [
        (f"Unknown tool: {name}", {"code": "mcp.unknown_tool"})
        for name in ("ledger_secret", "call_auditor_agent", "load_capability", "nope")
    ]
    assert ledger.runs == []


async def test_each_user_is_who_authenticated_and_strangers_are_refused(
    serve: Serve,
) -> None:
    alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
    async with serve() as (app, base_url):
        oracle = app.state.oracle_did
        seen = {}
        for user in (alice, bob):
            async with mcp_client(f"{base_url}/mcp", auth_headers(user, oracle)) as client:
                result = await client.call_tool("ledger_balance", {"account": "a"})
                seen[user.did()] = json.loads(text_of(result))["user"]
        async with httpx.AsyncClient() as http:
            stranger = await http.post(
                f"{base_url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"},
            )

    assert seen == {alice.did(): alice.did(), bob.did(): bob.did()}
    assert stranger.status_code == 401


async def test_each_call_spends_from_the_users_turn_budget(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with serve(THROTTLE_TURN_LIMIT="2") as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with mcp_client(f"{base_url}/mcp", headers) as client:
            results = [
                await client.call_tool("ledger_balance", {"account": str(n)}) for n in range(3)
            ]
            listed = await client.list_tools()  # listing is a read, not a turn

    assert [r.is_error for r in results] == [False, False, True]
    assert results[2].meta is not None
    assert results[2].meta["code"] == "mcp.rate_limited"
    assert results[2].meta["retryAfter"] > 0
    assert {tool.name for tool in listed.tools} == LISTED


async def test_the_subscription_gate_holds_every_mcp_request(
    serve: Serve, ledger: LedgerPlugin
) -> None:
    paying = Ed25519Signer.generate()
    unpaid = Ed25519Signer.generate()

    async def check(auth: AuthData) -> None:
        if auth.did != paying.did():
            raise HTTPError(402, "No subscription found, please subscribe to continue")

    async with serve(subscription_check=check) as (app, base_url):
        oracle = app.state.oracle_did
        async with mcp_client(f"{base_url}/mcp", auth_headers(paying, oracle)) as client:
            paid = await client.call_tool("ledger_balance", {"account": "a"})
        async with httpx.AsyncClient() as http:
            refused = await http.post(
                f"{base_url}/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "ledger_balance", "arguments": {"account": "a"}},
                },
                headers={
                    **auth_headers(unpaid, oracle),
                    "Accept": "application/json, text/event-stream",
                },
            )

    assert not paid.is_error
    assert refused.status_code == 402
    assert [run[2] for run in ledger.runs] == [paying.did()]


async def test_sub_agents_are_listed_when_enabled(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with serve(ORACLE_MCP_EXPOSE_SUB_AGENTS="true") as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with mcp_client(f"{base_url}/mcp", headers) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}

    assert listed == {*LISTED, "call_auditor_agent"}


async def test_off_unless_enabled(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with serve(ORACLE_MCP_EXPOSE="false") as (app, base_url), httpx.AsyncClient() as http:
        response = await http.post(
            f"{base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers=auth_headers(user, app.state.oracle_did),
        )

    assert response.status_code == 404


async def test_the_javascript_client_lists_and_calls_the_tools(
    serve: Serve, ledger: LedgerPlugin, node: str, tmp_path: Path
) -> None:
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "headers": auth_headers(user, app.state.oracle_did),
                    "calls": [
                        {"name": "ledger_transfer", "arguments": {"account": "a", "cents": 5}},
                        {"name": "ledger_wipe", "arguments": {"account": "a"}},
                        {"name": "nope", "arguments": {}},
                    ],
                }
            )
        )
        done = await asyncio.to_thread(
            subprocess.run,
            [node, str(JS_CLIENT), f"{base_url}/mcp", str(plan)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["protocolVersion"] == "2025-11-25"
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert set(tools) == LISTED
    assert tools["ledger_balance"]["annotations"]["readOnlyHint"] is True
    transfer, wipe, unknown = report["calls"]
    assert transfer.get("isError") in (None, False)
    assert json.loads(transfer["content"][0]["text"])["user"] == user.did()
    assert wipe["isError"] is True
    assert wipe["_meta"]["code"] == "tool.approval_required"
    assert unknown["error"]["data"] == {"code": "mcp.unknown_tool"}
    assert [run[:2] for run in ledger.runs] == [("ledger_transfer", {"account": "a", "cents": 5})]
