"""One turn through the real server in ixo mode: the user's stored delegation lets the
oracle mint invocations for the Memory Engine double, whose memories fill the prompt and
whose MCP tool the model calls; the finished turn is ingested."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server.testing import (
    IxoIdentity,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    serving_ixo_oracle,
)
from oracle_ucan import Ed25519Signer

IDENTITY = IxoIdentity("memory")
ORACLE_DID, ENTITY_DID = IDENTITY.oracle_did, IDENTITY.entity_did


async def test_a_turn_recalls_and_remembers_through_the_engine(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    engine = MemoryEngineDouble(trusted_users=[user.did()], verifier=IDENTITY.verifier())
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
        env = {
            "MEMORY_MCP_URL": engine.mcp_url,
            "MEMORY_ENGINE_URL": engine.engine_url,
            **llm.env(),
        }
        async with serving_ixo_oracle(
            IDENTITY,
            [MemoryPlugin()],
            data_dir=tmp_path / "data",
            env=env,
            grants=[{"with": "ixo:memory", "can": "memory/*"}],
            user=user,
        ) as oracle:
            answer = await oracle.send(await oracle.new_session(), "I'm vegetarian")
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
