"""Protected MCP tools (UCAN-28): ``mcpInvocations`` of ``POST /messages/{id}`` checked when
the model calls a tool of a server in ``UCAN_PROTECTED_MCP_SERVERS``, single use."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, ToolCalls, auth_headers, serving
from oracle_ucan import Ed25519Signer, delegate, invoke

NO_INVOCATIONS = "Error: UCAN authorization required for vault__open. No invocations provided"
NOT_FOUND = "Error: UCAN authorization required for vault__open. No invocation found"
FAILED = "Error: UCAN authorization failed for vault__open: "


class Door(BaseModel):
    door: str


class VaultPlugin(OraclePlugin):
    """Tools named as the MCP client binds a server's: ``vault__open`` is protected,
    ``open__vault`` (another server's) is not."""

    name = "vault"
    version = "1.0.0"
    manifest = {
        "title": "Vault",
        "summary": "Opens doors.",
        "when_to_use": ["doors"],
        "visibility": "always",
    }

    def __init__(self) -> None:
        self.opened: list[str] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        def make(name: str) -> PluginTool:
            @plugin_tool(name=name, description="Open a door.", args_schema=Door)
            def handler(args: Door, rt_ctx: RuntimeContext[Any]) -> str:
                self.opened.append(f"{name}:{args.door}")
                return f"opened {args.door}"

            return handler

        return [make("vault__open"), make("open__vault")]


def invocation(user: Ed25519Signer, entity: Ed25519Signer, oracle_did: str, tool: str) -> str:
    resource = f"ixo:oracle:{entity.did()}:mcp/vault/{tool}"
    expiry = int(time.time()) + 600
    grant = delegate(
        entity,
        audience=user.did(),
        capabilities=[{"with": resource, "can": "mcp/call"}],
        expiration=expiry,
    )
    return invoke(
        user,
        audience=oracle_did,
        capability={"with": resource, "can": "mcp/call"},
        expiration=expiry,
        proofs=[grant],
    ).to_base64()


@asynccontextmanager
async def vault_oracle(
    tmp_path: Path, llm: OpenAIDouble, entity: Ed25519Signer, plugin: VaultPlugin
) -> AsyncIterator[tuple[OracleApp, httpx.AsyncClient]]:
    app = await create_oracle_app(
        {"name": "Vault Oracle"},
        plugins=[plugin],
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
            "THROTTLE_LIMIT": "1000",
            "ORACLE_ENTITY_DID": entity.did(),
            "UCAN_PROTECTED_MCP_SERVERS": "vault, ledger",
            **llm.env(),
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        yield app, client


def tool_results(llm: OpenAIDouble) -> list[str]:
    """The tool messages the model was given, in order."""
    seen: list[str] = []
    for request in llm.requests:
        for message in request.messages:
            if message.get("role") == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return seen


async def turn(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    session: str,
    invocations: dict[str, str] | None,
) -> httpx.Response:
    body: dict[str, Any] = {"message": "Open the door"}
    if invocations is not None:
        body["mcpInvocations"] = invocations
    return await client.post(f"/messages/{session}", headers=headers, json=body)


def script(llm: OpenAIDouble, turns: Sequence[str]) -> None:
    for door in turns:
        llm.add_steps(ToolCalls([("vault__open", {"door": door})]), "Done.")


async def test_a_protected_tool_runs_once_per_valid_invocation_of_its_user(
    tmp_path: Path,
) -> None:
    entity, user, stranger = (Ed25519Signer.generate() for _ in range(3))
    plugin = VaultPlugin()
    async with OpenAIDouble() as llm, vault_oracle(tmp_path, llm, entity, plugin) as (app, client):
        oracle = app.state.oracle_did
        headers = auth_headers(user, oracle)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        valid = invocation(user, entity, oracle, "open")
        script(llm, ["none", "other-key", "valid", "replayed", "strangers"])
        statuses = [
            (await turn(client, headers, session, invocations)).status_code
            for invocations in (
                None,
                {"vault__close": valid},
                {"vault__open": valid},
                {"vault__open": valid},
                {"vault__open": invocation(stranger, entity, oracle, "open")},
            )
        ]
        llm.add_steps(ToolCalls([("open__vault", {"door": "unprotected"})]), "Done.")
        await turn(client, headers, session, None)
        results = tool_results(llm)

    assert statuses == [200] * 5
    assert results[0].startswith(NO_INVOCATIONS)
    assert results[1].startswith(NOT_FOUND)
    assert results[2] == "opened valid"
    assert results[3] == f"{FAILED}Invocation has already been used"
    assert results[4] == (f"{FAILED}the invocation was not issued by the user of this request")
    assert results[5] == "opened unprotected"
    assert plugin.opened == ["vault__open:valid", "open__vault:unprotected"]


async def test_an_invocation_for_another_resource_or_audience_is_refused(
    tmp_path: Path,
) -> None:
    entity, user = Ed25519Signer.generate(), Ed25519Signer.generate()
    plugin = VaultPlugin()
    async with OpenAIDouble() as llm, vault_oracle(tmp_path, llm, entity, plugin) as (app, client):
        oracle = app.state.oracle_did
        headers = auth_headers(user, oracle)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        script(llm, ["wrong-tool", "wrong-audience"])
        for token in (
            invocation(user, entity, oracle, "close"),
            invocation(user, entity, Ed25519Signer.generate().did(), "open"),
        ):
            await turn(client, headers, session, {"vault__open": token})
        results = tool_results(llm)

    assert [r.startswith(FAILED) for r in results] == [True, True]
    assert plugin.opened == []


async def test_malformed_invocations_are_refused_before_the_turn(tmp_path: Path) -> None:
    entity, user = Ed25519Signer.generate(), Ed25519Signer.generate()
    plugin = VaultPlugin()
    async with OpenAIDouble() as llm, vault_oracle(tmp_path, llm, entity, plugin) as (app, client):
        headers = auth_headers(user, app.state.oracle_did)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        answers = [
            await turn(client, headers, session, invocations)
            for invocations in (
                {"no-separator": "AAAA"},
                {"vault__open": "not base64 !"},
                {"vault__open": ""},
            )
        ]
        history = await client.get(f"/messages/{session}", headers=headers)

    assert [a.status_code for a in answers] == [400, 400, 400]
    assert all("mcpInvocations" in json.dumps(a.json()["message"]) for a in answers)
    assert llm.requests == []
    assert history.status_code == 200
    assert plugin.opened == []


async def test_protected_servers_need_the_entity_did(tmp_path: Path) -> None:
    async with OpenAIDouble() as llm:
        try:
            await create_oracle_app(
                {"name": "Vault Oracle"},
                plugins=[VaultPlugin()],
                env={
                    "ORACLE_BACKEND": "local",
                    "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                    "UCAN_PROTECTED_MCP_SERVERS": "vault",
                    **llm.env(),
                },
                discover_entry_points=False,
                skip_graceful_shutdown=True,
            )
        except Exception as exc:
            message = str(exc)
        else:
            raise AssertionError("booted without ORACLE_ENTITY_DID")

    assert "ucan.protected_mcp_needs_entity_did" in message
