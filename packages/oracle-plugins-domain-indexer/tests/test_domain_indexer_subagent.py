"""The sub-agent path: the main model calls ``call_domain_indexer_agent``, the sub-agent
model calls the tools, and the tools talk HTTP to the loopback Domain Indexer double."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from langchain_core.messages import BaseMessage, ToolMessage
from pydantic import ValidationError

from oracle_core import InMemoryCheckpointers, MainAgentHooks
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    create_test_runtime,
    reply,
)
from oracle_plugins.domain_indexer import (
    DomainIndexerPlugin,
    DomainIndexerSearchArgs,
    GetDomainCardArgs,
)
from oracle_plugins.domain_indexer.testing import ERROR_DID, DomainIndexerDouble

WATER = "did:ixo:entity:1a2b3c4d5e6f708192a3b4c5d6e7f801"
COOKSTOVES = "did:ixo:entity:2b3c4d5e6f708192a3b4c5d6e7f80912"
TASK = "Find IXO entities about clean water and summarise them."


@pytest.fixture
async def indexer() -> AsyncIterator[DomainIndexerDouble]:
    async with DomainIndexerDouble() as double:
        yield double


async def run_sub_agent(
    url: str, inner_calls: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[ToolMessage]:
    """One turn: main → call_domain_indexer_agent → the sub-agent makes ``inner_calls``
    in sequence, then answers; returns the ToolMessages the sub-agent model read."""
    main = ScriptedChatModel(
        [call_tool("call_domain_indexer_agent", {"task": TASK}), reply("Here is what I found.")],
        strict=True,
    )
    sub = ScriptedChatModel(
        [*(call_tool(name, dict(args)) for name, args in inner_calls), reply("Sub-agent done.")],
        strict=True,
    )
    runtime = await create_test_runtime(
        plugins=[DomainIndexerPlugin()],
        config={"DOMAIN_INDEXER_URL": url},
        models={"main": main, "subagent": sub},
    )
    async with runtime:
        result = await runtime.run_turn("What do you know about clean water projects?")
    [parent] = result.tool_messages("call_domain_indexer_agent")
    assert parent.content == "Sub-agent done."
    assert result.text == "Here is what I found."
    seen = [m for m in sub.calls[-1].messages if isinstance(m, ToolMessage)]
    assert len(seen) == len(inner_calls)
    return seen


@pytest.fixture
async def runtime(indexer: DomainIndexerDouble) -> AsyncIterator[TestRuntime]:
    """The plugin on the double, for calling the sub-agent's tools directly."""
    async with await create_test_runtime(
        plugins=[DomainIndexerPlugin()], config={"DOMAIN_INDEXER_URL": indexer.base_url}
    ) as rt:
        yield rt


async def answer(runtime: TestRuntime, tool: str, args: Mapping[str, Any]) -> Any:
    """A sub-agent tool's answer, decoded, as the sub-agent model would read it."""
    raw = await runtime.invoke_tool(tool, dict(args), sub_agent="call_domain_indexer_agent")
    return json.loads(raw)


def payload(message: BaseMessage) -> Any:
    assert isinstance(message.content, str)
    return json.loads(message.content)


async def test_the_sub_agent_runs_on_the_subagent_role_in_its_own_thread(
    indexer: DomainIndexerDouble,
) -> None:
    main = ScriptedChatModel(
        [call_tool("call_domain_indexer_agent", {"task": TASK}), reply("ok")], strict=True
    )
    sub = ScriptedChatModel(
        [call_tool("domain_indexer_search", {"query": "water"}), reply("Two hits.")], strict=True
    )
    checkpointers = InMemoryCheckpointers()
    runtime = await create_test_runtime(
        plugins=[DomainIndexerPlugin()],
        config={"DOMAIN_INDEXER_URL": indexer.base_url},
        models={"main": main, "subagent": sub},
        hooks=MainAgentHooks(checkpointer_for_user=checkpointers),
    )
    async with runtime:
        assert "call_domain_indexer_agent" in await runtime.list_tools()
        await runtime.run_turn("water?")
        saver = await checkpointers(runtime.user.did)
        inner = await saver.aget_tuple(
            {"configurable": {"thread_id": "test-thread_domain_indexer_agent"}}
        )
    # The main model saw the sub-agent tool, never the inner tools.
    assert "call_domain_indexer_agent" in main.calls[0].tool_names
    assert "domain_indexer_search" not in main.calls[0].tool_names
    # The sub-agent model got the task alone and exactly the two inner tools.
    assert sorted(sub.calls[0].tool_names) == ["domain_indexer_search", "get_domain_card"]
    assert sub.calls[0].system_prompt is not None
    assert "Domain Indexer Agent" in sub.calls[0].system_prompt
    assert [m.content for m in sub.calls[0].conversation] == [TASK]
    assert inner is not None
    assert len(inner.checkpoint["channel_values"]["messages"]) == 4


async def test_search_sends_query_limit_scopes_and_filters(indexer: DomainIndexerDouble) -> None:
    seen = await run_sub_agent(
        indexer.base_url,
        [
            (
                "domain_indexer_search",
                {
                    "query": "water",
                    "limit": 1,
                    "scopes": "domain_cards, events",
                    "filters": {"dc.entity_verified": "true"},
                },
            )
        ],
    )
    [search] = indexer.searches()
    assert search.params == [
        ("q", "water"),
        ("limit", "1"),
        ("scopes", "domain_cards,events"),
        ("dc.entity_verified", "true"),
    ]
    assert search.headers["accept"] == "application/json"
    body = payload(seen[0])
    # The indexer's JSON reaches the sub-agent unchanged: total before the limit.
    assert body["total"] == 3
    assert [hit["id"] for hit in body["results"]] == [WATER]
    assert body["results"][0]["record"]["faq"][0]["question"] == "Who runs the water points?"


async def test_search_defaults_to_ten_results_of_domain_cards(
    indexer: DomainIndexerDouble, runtime: TestRuntime
) -> None:
    body = await answer(runtime, "domain_indexer_search", {"query": "carbon credits"})
    assert indexer.searches()[0].params == [("q", "carbon credits"), ("limit", "10")]
    assert {hit["scope"] for hit in body["results"]} == {"domain_cards"}
    # Both words match both cards: equal scores, ordered by id.
    assert [hit["record"]["name"] for hit in body["results"]] == [
        "Kenya Cookstoves Project",
        "Carbon Registry Protocol",
    ]


async def test_filters_of_other_scopes_reach_the_indexer(runtime: TestRuntime) -> None:
    body = await answer(
        runtime,
        "domain_indexer_search",
        {
            "query": "summit workshops",
            "scopes": "events",
            "filters": {"event.location": "cape town", "event.from": "2026-01-01"},
        },
    )
    assert [hit["id"] for hit in body["results"]] == ["event:carbon-week-2026"]


async def test_card_is_trimmed_to_the_essential_fields(
    indexer: DomainIndexerDouble, runtime: TestRuntime
) -> None:
    water = await answer(runtime, "get_domain_card", {"did": WATER})
    cookstoves = await answer(runtime, "get_domain_card", {"did": COOKSTOVES})
    full = indexer.card(WATER)
    assert water == {
        "id": WATER,
        "name": "Clean Water Collective",
        "description": full["description"],
        "summary": full["summary"],
        "overview": full["overview"],
        "faq": full["faq"],
        "url": "https://cleanwater.example.org",
        "keywords": ["water", "sanitation", "climate"],
        "entity_type": ["dao"],
    }
    assert "raw_credential" in full  # the double served more than the tool kept
    # A lone entity type becomes a list.
    assert cookstoves["entity_type"] == ["project"]
    assert indexer.requests[0].path == f"/domain-cards/{WATER}"


async def test_unknown_card_is_a_value_and_a_server_error_is_a_tool_error(
    indexer: DomainIndexerDouble,
) -> None:
    seen = await run_sub_agent(
        indexer.base_url,
        [
            ("get_domain_card", {"did": "did:ixo:entity:unknown"}),
            ("get_domain_card", {"did": ERROR_DID}),
        ],
    )
    assert payload(seen[0]) == {"error": "Domain card not found"}
    assert seen[0].status == "success"
    assert seen[1].status == "error"
    assert seen[1].content == ("Error: Failed to fetch domain card: HTTP 500 Internal Server Error")


async def test_search_failure_is_a_tool_error_with_the_status_text(
    indexer: DomainIndexerDouble,
) -> None:
    indexer.search_status = 503
    seen = await run_sub_agent(indexer.base_url, [("domain_indexer_search", {"query": "water"})])
    assert seen[0].status == "error"
    assert seen[0].content == "Error: Search failed: HTTP 503 Service Unavailable"


async def test_an_unreachable_indexer_is_reported_not_raised() -> None:
    async with DomainIndexerDouble() as double:
        url = double.base_url  # nothing listens there once the double stopped
    seen = await run_sub_agent(
        url,
        [("domain_indexer_search", {"query": "water"}), ("get_domain_card", {"did": WATER})],
    )
    assert [m.status for m in seen] == ["error", "error"]
    assert all(str(m.content).startswith("Error: The Domain Indexer is unreachable") for m in seen)


async def test_a_slow_indexer_times_out_as_a_tool_error(indexer: DomainIndexerDouble) -> None:
    class Stall(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("stalled", request=request)

    plugin = DomainIndexerPlugin(transport=Stall())
    sub = ScriptedChatModel(
        [call_tool("domain_indexer_search", {"query": "water"}), reply("timed out")]
    )
    runtime = await create_test_runtime(
        plugins=[plugin], config={"DOMAIN_INDEXER_URL": indexer.base_url}, model=sub
    )
    async with runtime:
        assert await runtime.invoke_sub_agent("call_domain_indexer_agent", TASK) == "timed out"
    [message] = [m for m in sub.calls[-1].messages if isinstance(m, ToolMessage)]
    assert message.status == "error"
    assert message.content == "Error: The Domain Indexer did not answer in time"
    assert indexer.requests == []


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("domain_indexer_search", {"query": ""}, "query"),
        ("domain_indexer_search", {"query": "   "}, "query"),
        ("domain_indexer_search", {}, "query"),
        ("domain_indexer_search", {"query": "x", "limit": 11}, "limit"),
        ("domain_indexer_search", {"query": "x", "scopes": "people"}, "scopes"),
        ("domain_indexer_search", {"query": "x", "filters": {"q": "y"}}, "filters"),
        ("get_domain_card", {"did": ""}, "did"),
        ("get_domain_card", {}, "did"),
    ],
)
async def test_bad_arguments_come_back_to_the_sub_agent_as_validation_errors(
    indexer: DomainIndexerDouble, tool: str, args: dict[str, Any], field: str
) -> None:
    seen = await run_sub_agent(indexer.base_url, [(tool, args)])
    assert seen[0].status == "error"
    assert field in str(seen[0].content)
    assert indexer.requests == []  # nothing reached the indexer


def test_argument_models_explain_what_is_wrong() -> None:
    with pytest.raises(ValidationError, match="at least 1 character"):
        DomainIndexerSearchArgs.model_validate({"query": ""})
    with pytest.raises(ValidationError, match="query must not be blank"):
        DomainIndexerSearchArgs.model_validate({"query": " \t"})
    with pytest.raises(ValidationError, match="unknown scope"):
        DomainIndexerSearchArgs.model_validate({"query": "x", "scopes": "domain_cards,people"})
    with pytest.raises(ValidationError, match="not indexer filters"):
        DomainIndexerSearchArgs.model_validate({"query": "x", "filters": {"limit": "50"}})
    with pytest.raises(ValidationError, match="empty value"):
        DomainIndexerSearchArgs.model_validate({"query": "x", "filters": {"dc.issuer": " "}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        DomainIndexerSearchArgs.model_validate({"query": "x", "q": "y"})
    with pytest.raises(ValidationError, match="at least 1 character"):
        GetDomainCardArgs.model_validate({"did": ""})
    with pytest.raises(ValidationError, match="did must not be blank"):
        GetDomainCardArgs.model_validate({"did": "  "})
    args = DomainIndexerSearchArgs.model_validate(
        {"query": "  water ", "scopes": "events, events,agents", "filters": {}}
    )
    assert (args.query, args.limit, args.scopes, args.filters) == (
        "water",
        10,
        "events,agents",
        None,
    )


async def test_a_did_cannot_reach_another_route(
    indexer: DomainIndexerDouble, runtime: TestRuntime
) -> None:
    card = await answer(runtime, "get_domain_card", {"did": "did:x/../../search?q=water"})
    assert card == {"error": "Domain card not found"}
    assert indexer.searches() == []
    [lookup] = indexer.requests
    assert lookup.path.startswith("/domain-cards/did:x/")
    assert lookup.params == []
