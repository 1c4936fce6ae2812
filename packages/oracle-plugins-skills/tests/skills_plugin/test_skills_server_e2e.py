"""One turn through the real server in ixo mode: the user's stored delegation lets the
oracle mint an ``ixo:skills`` invocation for the registry double, the model calls
``search_skills``, and its answer cites the user's private skill."""

from __future__ import annotations

import json
from pathlib import Path

from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import Caller, SkillsRegistryDouble
from oracle_server.testing import (
    ChatRequest,
    IxoIdentity,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    serving_ixo_oracle,
)
from oracle_ucan import Ed25519Signer

from .conftest import SANDBOX_URL, SKILLS_GRANT, stand_in_sandbox

IDENTITY = IxoIdentity("skills")
ORACLE_DID = IDENTITY.oracle_did


def cite_first_skill(request: ChatRequest) -> str:
    """The model's answer: it names the first skill the tool returned."""
    result = json.loads(str(request.messages[-1]["content"]))
    first = result["skills"][0]
    return f"Use your {first['source']} skill {first['title']} (cid {first['cid']})."


async def test_a_turn_finds_the_users_private_skill(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    registry = SkillsRegistryDouble(trusted_users=[user.did()], verifier=IDENTITY.verifier())
    private = next(c for c in registry.catalog if c.name == "invoice-builder" and c.private)
    steps: list[Step] = [ToolCalls([("search_skills", {"q": "invoice"})]), cite_first_skill]
    async with LoopbackServer(registry.routes) as registry_server, OpenAIDouble(steps) as llm:
        registry.origin = registry_server.origin
        env = {
            "SANDBOX_MCP_URL": SANDBOX_URL,
            "SKILLS_CAPSULES_BASE_URL": registry.base_url,
            **llm.env(),
        }
        async with serving_ixo_oracle(
            IDENTITY,
            [stand_in_sandbox(), SkillsPlugin()],
            data_dir=tmp_path / "data",
            env=env,
            grants=[SKILLS_GRANT],
            user=user,
        ) as oracle:
            answer = await oracle.send(await oracle.new_session(), "Is there a skill for invoices?")
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
