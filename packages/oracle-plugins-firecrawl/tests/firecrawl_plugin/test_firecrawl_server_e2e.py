"""One turn through the real server: HTTP in, the model double over HTTP for the main agent
and the Firecrawl Agent, and the Firecrawl MCP double over streamable HTTP for the search."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from oracle_plugins.firecrawl import SUB_AGENT_NAME, SUB_AGENT_TOOL, FirecrawlPlugin
from oracle_plugins.firecrawl.testing import (
    EXTRA_TOOL,
    FirecrawlDouble,
    RecordedCall,
    untrusted_block,
)
from oracle_server import create_oracle_app
from oracle_server.testing import (
    LoopbackServer,
    OpenAIDouble,
    ToolCalls,
    auth_headers,
    delegating,
    serving,
)
from oracle_ucan import Ed25519Signer

TASK = "Search the web for the Pebble 2.0 release and list what changed, with URLs."
SUB_ANSWER = "Pebble 2.0 adds transactions and compaction three times faster (release notes)."
MAIN_ANSWER = "Pebble 2.0 adds transactions and three times faster compaction."


async def test_a_web_question_is_answered_through_the_firecrawl_agent(tmp_path: Path) -> None:
    firecrawl = FirecrawlDouble()
    steps = delegating(
        "firecrawl",
        SUB_AGENT_TOOL,
        ToolCalls([("firecrawl_search", {"query": "pebble 2.0 release", "limit": 3})]),
        SUB_ANSWER,
        MAIN_ANSWER,
        task=TASK,
    )
    async with (
        firecrawl.running(),
        LoopbackServer(firecrawl.routes) as site,
        OpenAIDouble(steps) as llm,
    ):
        firecrawl.origin = site.origin
        app = await create_oracle_app(
            {"name": "Web Oracle"},
            plugins=[FirecrawlPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "FIRECRAWL_MCP_URL": firecrawl.mcp_url,
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
                json={"message": "What changed in Pebble 2.0? Look it up on the web."},
            )
        release = firecrawl.site_url("blog/pebble-2-0.html")

    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == MAIN_ANSWER
    # The double ran exactly the search the sub-agent's model asked for.
    assert firecrawl.calls == [
        RecordedCall("firecrawl_search", {"query": "pebble 2.0 release", "limit": 3})
    ]

    _load, delegate, sub_first, sub_second, main_last = llm.requests
    # The main agent saw the sub-agent, never the Firecrawl tools.
    assert SUB_AGENT_TOOL in delegate.tool_names
    assert not [n for n in delegate.tool_names if n.startswith("firecrawl_")]
    # The sub-agent got the task alone, its prompt, and search and scrape only.
    assert sub_first.tool_names == ["firecrawl_search", "firecrawl_scrape"]
    assert EXTRA_TOOL not in sub_first.tool_names
    assert sub_first.last_user_text == TASK
    assert "You are the Firecrawl Agent" in (sub_first.system_prompt or "")
    # The search results reached its model over HTTP, marked as web content.
    result = sub_second.messages[-1]
    assert result["role"] == "tool"
    block = untrusted_block(result["content"])
    assert block.source == "firecrawl_search"
    hits = json.loads(block.content)["web"]
    assert hits[0]["url"] == release
    assert hits[0]["title"] == "Pebble 2.0 released"
    # Its answer is the main agent's tool result, marked as drawn from web pages.
    answered = main_last.messages[-1]
    assert answered["role"] == "tool"
    assert untrusted_block(answered["content"]).source == SUB_AGENT_NAME
    assert untrusted_block(answered["content"]).content == SUB_ANSWER
