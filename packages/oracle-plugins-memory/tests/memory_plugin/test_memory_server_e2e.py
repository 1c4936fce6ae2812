"""One turn through the real server in ixo mode: the user's stored delegation lets the
oracle mint invocations for the Memory Engine double, whose memories fill the prompt and
whose MCP tool the model calls; the finished turn is ingested."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server import create_oracle_app
from oracle_server.testing import LoopbackServer, OpenAIDouble, Step, ToolCalls, serving
from oracle_ucan import ChainVerifier, Ed25519Signer, LocalResolver, delegate, invoke

ORACLE_DID = "did:ixo:ixo1memoryplugine2e"
ENTITY_DID = "did:ixo:entity:memory-e2e"
MNEMONIC = "memory plugin end to end test mnemonic"


async def test_a_turn_recalls_and_remembers_through_the_engine(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    resolver = LocalResolver()
    resolver.register(
        ORACLE_DID, Ed25519Signer.from_mnemonic(MNEMONIC).did().removeprefix("did:key:")
    )
    engine = MemoryEngineDouble(trusted_users=[user.did()], verifier=ChainVerifier(resolver))
    engine.seed(user.did(), "Her name is Ada and she prefers to be called Countess", name="Ada")
    steps: list[Step] = [
        ToolCalls(
            [("memory-engine__add_memory", {"name": "Diet", "content": "Ada is vegetarian"})]
        ),
        "Noted: you are vegetarian.",
    ]
    async with (
        engine.running(),
        LoopbackServer(engine.routes) as engine_server,
        OpenAIDouble(steps) as llm,
    ):
        engine.origin = engine_server.origin
        app = await create_oracle_app(
            {"name": "Memory Oracle"},
            plugins=[MemoryPlugin()],
            env={
                "ORACLE_BACKEND": "ixo",
                "MATRIX_ENABLED": "false",
                "ORACLE_SIGNING_MNEMONIC": MNEMONIC,
                "ORACLE_NAME": "Memory Oracle",
                "NETWORK": "devnet",
                "ORACLE_DID": ORACLE_DID,
                "ORACLE_ENTITY_DID": ENTITY_DID,
                "BLOCKSYNC_GRAPHQL_URL": "http://127.0.0.1:9/graphql",
                "SECP_MNEMONIC": "unused",
                "RPC_URL": "http://127.0.0.1:9",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "THROTTLE_LIMIT": "1000",
                "MEMORY_MCP_URL": engine.mcp_url,
                "MEMORY_ENGINE_URL": engine.engine_url,
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
            capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
            expiration=int(time.time()) + 3600,
        ).to_base64()
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
        ):
            stored = await http.post("/delegation", json={"raw": grant})
            assert stored.status_code in (200, 201), stored.text
            session = (await http.post("/sessions")).json()["sessionId"]
            answer = await http.post(f"/messages/{session}", json={"message": "I'm vegetarian"})
            assert answer.status_code == 200, answer.text
            await asyncio.wait_for(engine.ingested_event.wait(), timeout=10)

    first, second = llm.requests[0], llm.requests[1]
    prompt = first.system_prompt or ""
    assert "## What You Know About the User\n- Who they are: Her name is Ada" in prompt
    assert "memory-engine__add_memory" in first.tool_names
    assert "memory-engine__clear" in first.tool_names
    assert "episode_uuid" in str(second.messages[-1]["content"])
    assert "Noted: you are vegetarian." in answer.text
    assert [m.content for m in engine.user_memories(user.did())][-1] == "Ada is vegetarian"
    assert {(r.caller.user, r.caller.oracle) for r in engine.requests} == {(user.did(), ORACLE_DID)}
    assert {r.room_id for r in engine.requests} == {None}  # no Matrix in this oracle
    assert engine.batch_bodies[0]["queries"][0]["oracle_dids"] == [ENTITY_DID, ORACLE_DID]
    [ingested] = engine.ingested
    assert ingested["messages"][0] == {
        "content": "I'm vegetarian",
        "role_type": "user",
        "name": user.did(),
    }
    assert ingested["messages"][-1]["content"] == "Noted: you are vegetarian."
