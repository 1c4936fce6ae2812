"""``list_skills`` and ``search_skills`` against the registry double, with and without the
caller's ``ixo:skills`` invocation."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langchain_core.messages import ToolMessage
from pydantic import ValidationError

from oracle_core import UcanAccessor
from oracle_core.testing import ScriptedChatModel, TestRuntime, call_tool, reply
from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import Caller, SkillsRegistryDouble, capsule
from oracle_ucan import Ed25519Signer

from .conftest import MinterFactory, RuntimeFactory


async def answer(runtime: TestRuntime, tool: str, args: dict[str, Any]) -> Any:
    """The tool's result: parsed JSON, or the error ToolMessage."""
    result = await runtime.invoke_tool(tool, args)
    return result if isinstance(result, ToolMessage) else json.loads(result)


def titles(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["title"], s["source"]) for s in result["skills"]]


def cid_of(registry: SkillsRegistryDouble, name: str, *, private: bool) -> str:
    return next(c.cid for c in registry.catalog if c.name == name and c.private == private)


async def test_list_puts_the_callers_private_skills_first(
    registry: SkillsRegistryDouble,
    skills_runtime: RuntimeFactory,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    async with skills_runtime(config={"NETWORK": "devnet"}) as rt:
        result = await answer(rt, "list_skills", {})
    # The registry answers newest first; the tool moves the caller's own rows up.
    assert titles(result) == [
        ("meeting-notes", "private"),
        ("invoice-builder", "private"),
        ("slide-deck", "public"),
        ("invoice-builder", "public"),
        ("kyc-check", "public"),
        ("slide-deck", "public"),
    ]
    assert result["privateSkillCount"] == 2
    assert result["pagination"] == {"total": 6, "limit": 20, "offset": 0, "hasMore": False}
    assert result["skills"][1] == {
        "title": "invoice-builder",
        "description": "Builds invoices on my company letterhead.",
        "path": "/workspace/skills/invoice-builder",
        "source": "private",
        "cid": cid_of(registry, "invoice-builder", private=True),
        "createdAt": "2025-01-15T09:00:00.000Z",
    }
    [request] = registry.requests
    assert (request.path, request.params) == ("/capsules", {"limit": "20", "offset": "0"})
    assert request.network == "devnet"
    assert request.caller == Caller(user=user_key.did(), oracle=oracle_key.did())
    assert registry.rejected == []


async def test_list_pages_with_limit_and_offset(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory
) -> None:
    async with skills_runtime() as rt:
        first = await answer(rt, "list_skills", {"limit": 2})
        second = await answer(rt, "list_skills", {"limit": 2, "offset": 2})
        beyond = await answer(rt, "list_skills", {"limit": 100, "offset": 6})
    # Pages follow the registry's order (newest first); each page puts private rows first.
    assert titles(first) == [("slide-deck", "public"), ("invoice-builder", "public")]
    assert first["pagination"] == {"total": 6, "limit": 2, "offset": 0, "hasMore": True}
    assert first["privateSkillCount"] == 0
    assert titles(second) == [("meeting-notes", "private"), ("kyc-check", "public")]
    assert second["pagination"] == {"total": 6, "limit": 2, "offset": 2, "hasMore": True}
    assert second["privateSkillCount"] == 1
    assert beyond == {
        "skills": [],
        "pagination": {"total": 6, "limit": 100, "offset": 6, "hasMore": False},
        "privateSkillCount": 0,
    }
    assert [r.params for r in registry.requests] == [
        {"limit": "2", "offset": "0"},
        {"limit": "2", "offset": "2"},
        {"limit": "100", "offset": "6"},
    ]


async def test_search_dedupes_by_name_private_first_then_newest(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory
) -> None:
    async with skills_runtime() as rt:
        invoices = await answer(rt, "search_skills", {"q": "  invoice "})
        decks = await answer(rt, "search_skills", {"q": "deck", "limit": 5})
    # The private invoice-builder is older than the public one and still wins;
    # another user's private tax-helper (it mentions invoices) never shows.
    assert invoices["query"] == "invoice"
    assert titles(invoices) == [("invoice-builder", "private")]
    assert invoices["skills"][0]["cid"] == cid_of(registry, "invoice-builder", private=True)
    assert (invoices["count"], invoices["privateSkillCount"]) == (1, 1)
    newest = next(c for c in registry.catalog if c.created_at.startswith("2025-04-02"))
    assert decks == {
        "query": "deck",
        "count": 1,
        "privateSkillCount": 0,
        "skills": [
            {
                "title": "slide-deck",
                "description": newest.description,
                "path": "/workspace/skills/slide-deck",
                "source": "public",
                "cid": newest.cid,
                "createdAt": "2025-04-02T12:00:00.000Z",
            }
        ],
    }
    assert [r.params for r in registry.requests] == [
        {"q": "invoice", "limit": "10"},
        {"q": "deck", "limit": "5"},
    ]


async def test_search_orders_private_rows_first_whatever_the_registry_order(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    registry.add(
        capsule("notes-to-pdf", created_at="2025-06-01T00:00:00Z", description="Notes to PDF."),
        capsule(
            "notes-archive",
            private_owner=user_key.did(),
            created_at="2024-01-01T00:00:00+02:00",
            description="Archives my notes.",
        ),
    )
    async with skills_runtime() as rt:
        result = await answer(rt, "search_skills", {"q": "notes"})
    assert titles(result) == [
        ("meeting-notes", "private"),
        ("notes-archive", "private"),
        ("notes-to-pdf", "public"),
    ]
    # createdAt is normalised to UTC with milliseconds.
    assert [s["createdAt"] for s in result["skills"]] == [
        "2025-02-01T10:00:00.000Z",
        "2023-12-31T22:00:00.000Z",
        "2025-06-01T00:00:00.000Z",
    ]
    assert result["privateSkillCount"] == 2


@pytest.mark.parametrize(
    "ucan",
    [
        pytest.param("no grant", id="delegation-without-skills"),
        pytest.param("no delegation", id="no-delegation"),
        pytest.param("no key", id="no-signing-key"),
        pytest.param("local", id="local-oracle"),
    ],
)
async def test_without_an_invocation_only_public_skills_come_back(
    registry: SkillsRegistryDouble,
    skills_runtime: RuntimeFactory,
    make_minter: MinterFactory,
    ucan: str,
) -> None:
    minter: UcanAccessor | None = None  # "local": the oracle cannot mint at all
    if ucan == "no grant":
        minter = make_minter(grant={"with": "ixo:memory", "can": "memory/*"})
    elif ucan == "no delegation":
        minter = make_minter(delegation=None)
    elif ucan == "no key":
        minter = make_minter(signer=False)
    async with skills_runtime(ucan=minter) as rt:
        listed = await answer(rt, "list_skills", {})
        found = await answer(rt, "search_skills", {"q": "invoice"})
    assert {s["source"] for s in listed["skills"]} == {"public"}
    assert listed["privateSkillCount"] == 0
    assert listed["pagination"]["total"] == 4
    assert titles(found) == [("invoice-builder", "public")]
    assert found["skills"][0]["cid"] == cid_of(registry, "invoice-builder", private=False)
    assert {r.authorization for r in registry.requests} == {False}
    assert registry.rejected == []


async def test_a_registry_without_a_did_document_means_public_only(
    user_key: Ed25519Signer, skills_runtime: RuntimeFactory, registry: SkillsRegistryDouble
) -> None:
    registry.serve_did_document = False
    async with skills_runtime() as rt:
        result = await answer(rt, "search_skills", {"q": "notes"})
    assert result["skills"] == []  # meeting-notes is private
    assert result["privateSkillCount"] == 0
    assert {r.authorization for r in registry.requests} == {False}


@pytest.mark.parametrize(
    ("status", "text"),
    [(503, "HTTP 503 Service Unavailable"), (500, "HTTP 500 Internal Server Error")],
)
async def test_a_non_2xx_answer_is_a_tool_error(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory, status: int, text: str
) -> None:
    registry.fail_status = status
    async with skills_runtime() as rt:
        listed = await answer(rt, "list_skills", {})
        found = await answer(rt, "search_skills", {"q": "invoice"})
    assert isinstance(listed, ToolMessage)
    assert isinstance(found, ToolMessage)
    assert (listed.status, listed.content) == ("error", f"Error: List skills failed: {text}")
    assert (found.status, found.content) == ("error", f"Error: Search skills failed: {text}")


async def test_an_invocation_the_registry_refuses_is_a_tool_error_not_a_downgrade(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory
) -> None:
    registry.trusted_users.clear()  # the chain's root is no longer trusted
    async with skills_runtime() as rt:
        result = await answer(rt, "list_skills", {})
    assert isinstance(result, ToolMessage)
    assert result.content == "Error: List skills failed: HTTP 401 Unauthorized"
    assert registry.rejected == ["UNAUTHORIZED"]


async def test_an_unreachable_registry_is_a_tool_error(skills_runtime: RuntimeFactory) -> None:
    async with skills_runtime(
        ucan=None, config={"SKILLS_CAPSULES_BASE_URL": "http://127.0.0.1:9"}
    ) as rt:
        result = await answer(rt, "search_skills", {"q": "invoice"})
    assert isinstance(result, ToolMessage)
    assert result.status == "error"
    assert result.content == (
        "Error: Search skills failed: the registry is unreachable (ConnectError)"
    )


def _registry_answering(body: bytes) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("body", "tool", "args", "error"),
    [
        (b"<html>", "list_skills", {}, "List skills failed: the registry's answer is not JSON"),
        (b"[]", "list_skills", {}, "List skills failed: the registry's answer is not an object"),
        (
            b'{"capsules": []}',
            "list_skills",
            {},
            "List skills failed: the registry sent no valid pagination",
        ),
        (
            b'{"query": "x", "count": 0}',
            "search_skills",
            {"q": "x"},
            "Search skills failed: the registry's answer has no capsules",
        ),
    ],
)
async def test_a_malformed_answer_is_a_tool_error(
    skills_runtime: RuntimeFactory, body: bytes, tool: str, args: dict[str, Any], error: str
) -> None:
    plugin = SkillsPlugin(transport=_registry_answering(body))
    async with skills_runtime(ucan=None, plugin=plugin) as rt:
        result = await answer(rt, tool, args)
    assert isinstance(result, ToolMessage)
    assert result.status == "error"
    assert result.content == f"Error: {error}"


async def test_malformed_rows_are_dropped_and_loose_fields_tolerated(
    skills_runtime: RuntimeFactory,
) -> None:
    body = {
        "query": "x",
        "count": 4,
        "capsules": [
            {"name": "no-cid"},
            {"cid": "bafy1", "name": "plain"},
            {"cid": "bafy2", "name": "odd", "description": 7, "createdAt": "last tuesday"},
            {"cid": "bafy3", "name": "mine", "visibility": "private", "createdAt": "2025-01-02"},
        ],
    }
    plugin = SkillsPlugin(transport=_registry_answering(json.dumps(body).encode()))
    async with skills_runtime(ucan=None, plugin=plugin) as rt:
        result = await answer(rt, "search_skills", {"q": "x"})
    assert result["skills"] == [
        {
            "title": "mine",
            "description": "",
            "path": "/workspace/skills/mine",
            "source": "private",
            "cid": "bafy3",
            "createdAt": "2025-01-02T00:00:00.000Z",
        },
        {
            "title": "plain",
            "description": "",
            "path": "/workspace/skills/plain",
            "source": "public",
            "cid": "bafy1",
        },
        {
            "title": "odd",
            "description": "",
            "path": "/workspace/skills/odd",
            "source": "public",
            "cid": "bafy2",
            "createdAt": "last tuesday",
        },
    ]
    assert (result["count"], result["privateSkillCount"]) == (3, 1)


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("search_skills", {}, "q"),
        ("search_skills", {"q": ""}, "q"),
        ("search_skills", {"q": "   "}, "q"),
        ("search_skills", {"q": "x", "limit": 0}, "limit"),
        ("search_skills", {"q": "x", "limit": 51}, "limit"),
        ("search_skills", {"q": "x", "query": "y"}, "query"),
        ("list_skills", {"limit": 0}, "limit"),
        ("list_skills", {"limit": 101}, "limit"),
        ("list_skills", {"offset": -1}, "offset"),
        ("list_skills", {"limit": "many"}, "limit"),
    ],
)
async def test_bad_arguments_are_refused_before_the_registry_is_asked(
    registry: SkillsRegistryDouble,
    skills_runtime: RuntimeFactory,
    tool: str,
    args: dict[str, Any],
    field: str,
) -> None:
    async with skills_runtime() as rt:
        with pytest.raises(ValidationError) as refused:
            await rt.invoke_tool(tool, args)
    assert field in str(refused.value)
    assert registry.requests == []


async def test_a_turn_reads_the_tool_result_and_bad_arguments_as_errors(
    registry: SkillsRegistryDouble, skills_runtime: RuntimeFactory
) -> None:
    model = ScriptedChatModel(
        [
            call_tool("search_skills", {"q": ""}),
            call_tool("search_skills", {"q": "invoice"}),
            reply("You have your own invoice-builder."),
        ]
    )
    async with skills_runtime(model=model) as rt:
        turn = await rt.run_turn("Is there a skill for invoices?")
    refused, found = turn.tool_messages("search_skills")
    assert refused.status == "error"
    assert "q" in str(refused.content)
    assert "the tool was not run" in str(refused.content)
    assert json.loads(str(found.content))["skills"][0]["source"] == "private"
    assert turn.text == "You have your own invoice-builder."
    assert len(registry.requests) == 1
