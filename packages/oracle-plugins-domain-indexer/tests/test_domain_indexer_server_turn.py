"""One turn through the real server: HTTP in, the model double over HTTP for the main agent
and the sub-agent, and the Domain Indexer double over HTTP for the card."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from oracle_plugins.domain_indexer import DomainIndexerPlugin
from oracle_plugins.domain_indexer.testing import DomainIndexerDouble
from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, Step, ToolCalls, auth_headers, serving
from oracle_ucan import Ed25519Signer

WATER = "did:ixo:entity:1a2b3c4d5e6f708192a3b4c5d6e7f801"
TASK = f"Summarise the IXO entity {WATER}: its overview and FAQ."
SUB_ANSWER = "Clean Water Collective: funds and verifies community water points."
MAIN_ANSWER = "This is the Clean Water Collective; it funds and verifies water points."


async def test_an_entity_question_is_answered_through_the_sub_agent(tmp_path: Path) -> None:
    steps: list[Step] = [
        ToolCalls([("call_domain_indexer_agent", {"task": TASK})]),  # main agent
        ToolCalls([("get_domain_card", {"did": WATER})]),  # sub-agent
        SUB_ANSWER,  # sub-agent
        MAIN_ANSWER,  # main agent
    ]
    async with OpenAIDouble(steps) as llm, DomainIndexerDouble() as indexer:
        app = await create_oracle_app(
            {"name": "Entity Oracle"},
            plugins=[DomainIndexerPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "DOMAIN_INDEXER_URL": indexer.base_url,
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        user = Ed25519Signer.generate()
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            headers = auth_headers(user, app.state.oracle_did)
            created = await client.post("/sessions", headers=headers)
            session_id = created.json()["sessionId"]
            response = await client.post(
                f"/messages/{session_id}",
                headers=headers,
                json={"message": "What is this?", "metadata": {"currentEntityDid": WATER}},
            )
    assert response.status_code == 200
    assert response.json()["message"]["content"] == MAIN_ANSWER

    main_first, sub_first, sub_second, main_second = llm.requests
    # The main agent was in the entity context and saw the sub-agent tool only.
    assert "Entity context: the user is working in the IXO entity" in (
        main_first.system_prompt or ""
    )
    assert "call_domain_indexer_agent" in main_first.tool_names
    assert "get_domain_card" not in main_first.tool_names
    # The sub-agent got the task alone, with its two tools.
    assert sub_first.tool_names == ["domain_indexer_search", "get_domain_card"]
    assert sub_first.last_user_text == TASK
    assert "Domain Indexer Agent" in (sub_first.system_prompt or "")
    # The card reached the sub-agent trimmed, over HTTP from the indexer double.
    assert [r.path for r in indexer.requests] == [f"/domain-cards/{WATER}"]
    tool_result = sub_second.messages[-1]
    assert tool_result["role"] == "tool"
    card = json.loads(tool_result["content"])
    assert card["name"] == "Clean Water Collective"
    assert "raw_credential" not in card
    # The sub-agent's answer is the main agent's tool result.
    assert main_second.messages[-1]["role"] == "tool"
    assert main_second.messages[-1]["content"] == SUB_ANSWER
