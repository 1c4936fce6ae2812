"""One turn through the real server in ixo mode: the user's stored delegation lets the
oracle mint an ``ixo:skills`` invocation for the registry double, the model calls
``search_skills``, and its answer cites the user's private skill."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import Caller, SkillsRegistryDouble
from oracle_server import create_oracle_app
from oracle_server.testing import (
    ChatRequest,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    serving,
)
from oracle_ucan import ChainVerifier, Ed25519Signer, LocalResolver, delegate, invoke

from .conftest import SANDBOX_URL, SKILLS_GRANT, stand_in_sandbox

ORACLE_DID = "did:ixo:ixo1skillspluginee2e"
ENTITY_DID = "did:ixo:entity:skills-e2e"
MNEMONIC = "skills plugin end to end test mnemonic"


def cite_first_skill(request: ChatRequest) -> str:
    """The model's answer: it names the first skill the tool returned."""
    result = json.loads(str(request.messages[-1]["content"]))
    first = result["skills"][0]
    return f"Use your {first['source']} skill {first['title']} (cid {first['cid']})."


async def test_a_turn_finds_the_users_private_skill(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    resolver = LocalResolver()
    resolver.register(
        ORACLE_DID, Ed25519Signer.from_mnemonic(MNEMONIC).did().removeprefix("did:key:")
    )
    registry = SkillsRegistryDouble(trusted_users=[user.did()], verifier=ChainVerifier(resolver))
    private = next(c for c in registry.catalog if c.name == "invoice-builder" and c.private)
    steps: list[Step] = [ToolCalls([("search_skills", {"q": "invoice"})]), cite_first_skill]
    async with LoopbackServer(registry.routes) as registry_server, OpenAIDouble(steps) as llm:
        registry.origin = registry_server.origin
        app = await create_oracle_app(
            {"name": "Skills Oracle"},
            plugins=[stand_in_sandbox(), SkillsPlugin()],
            env={
                "ORACLE_BACKEND": "ixo",
                "MATRIX_ENABLED": "false",
                "ORACLE_SIGNING_MNEMONIC": MNEMONIC,
                "ORACLE_NAME": "Skills Oracle",
                "NETWORK": "devnet",
                "ORACLE_DID": ORACLE_DID,
                "ORACLE_ENTITY_DID": ENTITY_DID,
                "BLOCKSYNC_GRAPHQL_URL": "http://127.0.0.1:9/graphql",
                "SECP_MNEMONIC": "unused",
                "RPC_URL": "http://127.0.0.1:9",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "THROTTLE_LIMIT": "1000",
                "SANDBOX_MCP_URL": SANDBOX_URL,
                "SKILLS_CAPSULES_BASE_URL": registry.base_url,
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        auth = invoke(
            user,
            audience=ORACLE_DID,
            capability={"with": user.did(), "can": "*"},
            expiration=int(time.time()) + 600,
        ).to_base64()
        headers = {"Authorization": f"Bearer {auth}", "X-Auth-Type": "ucan"}
        grant = delegate(
            user,
            audience=ORACLE_DID,
            capabilities=[SKILLS_GRANT],
            expiration=int(time.time()) + 3600,
        ).to_base64()
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
        ):
            stored = await http.post("/delegation", json={"raw": grant})
            assert stored.status_code in (200, 201), stored.text
            session = (await http.post("/sessions")).json()["sessionId"]
            answer = await http.post(
                f"/messages/{session}", json={"message": "Is there a skill for invoices?"}
            )
            assert answer.status_code == 200, answer.text

    first, second = llm.requests[0], llm.requests[1]
    assert {"list_skills", "search_skills"} <= set(first.tool_names)
    result = json.loads(str(second.messages[-1]["content"]))
    assert result["query"] == "invoice"
    assert (result["count"], result["privateSkillCount"]) == (1, 1)
    assert result["skills"][0]["source"] == "private"
    assert result["skills"][0]["cid"] == private.cid
    assert f"Use your private skill invoice-builder (cid {private.cid})." in answer.text
    [request] = registry.requests
    assert (request.path, request.params) == ("/capsules/search", {"q": "invoice", "limit": "10"})
    assert request.network == "devnet"
    assert request.caller == Caller(user=user.did(), oracle=ORACLE_DID)
    assert registry.rejected == []
