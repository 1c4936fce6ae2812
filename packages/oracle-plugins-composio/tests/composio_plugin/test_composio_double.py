"""The worker double on the wire: auth, sessions, connections, catalog, envelope."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from oracle_core import UcanAccessor
from oracle_plugins.composio.testing import ComposioWorkerDouble
from oracle_ucan import Ed25519Signer

from .conftest import API_KEY, MinterFactory

SESSION = "/api/v3/tool_router/session"
Mint = Callable[[], Awaitable[str]]


@pytest.fixture
async def http(worker: ComposioWorkerDouble) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=worker.base_url) as client:
        yield client


@pytest.fixture
def mint(make_minter: MinterFactory, worker: ComposioWorkerDouble) -> Mint:
    ucan: UcanAccessor = make_minter()

    async def fresh() -> str:
        token = await ucan.mint_invocation(
            worker.did, "ixo:sandbox", can="sandbox/*", skip_cache=True
        )
        assert token
        return token

    return fresh


async def _headers(mint: Mint) -> dict[str, str]:
    return {"x-api-key": API_KEY, "x-ucan-invocation": await mint(), "x-ixo-network": "devnet"}


async def _session(http: httpx.AsyncClient, mint: Mint, user: str) -> str:
    created = await http.post(SESSION, json={"user_id": user}, headers=await _headers(mint))
    assert created.status_code == 201, created.text
    session_id: str = created.json()["session_id"]
    return session_id


async def _execute(
    http: httpx.AsyncClient, mint: Mint, session_id: str, slug: str, arguments: Any
) -> httpx.Response:
    return await http.post(
        f"{SESSION}/{session_id}/execute_meta",
        json={"slug": slug, "arguments": arguments},
        headers=await _headers(mint),
    )


async def test_the_did_document_names_the_worker(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble
) -> None:
    document = (await http.get("/.well-known/did.json")).json()
    assert document["id"] == worker.did


async def test_requests_need_the_api_key_and_an_invocation(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    body = {"user_id": user_key.did()}
    no_key = await http.post(SESSION, json=body, headers={"x-ucan-invocation": await mint()})
    wrong_key = await http.post(
        SESSION, json=body, headers={"x-api-key": "nope", "x-ucan-invocation": await mint()}
    )
    no_invocation = await http.post(SESSION, json=body, headers={"x-api-key": API_KEY})
    assert [no_key.status_code, wrong_key.status_code, no_invocation.status_code] == [401] * 3
    assert worker.rejected == ["api_key", "api_key", "missing invocation"]
    assert worker.requests == []


async def test_an_invocation_for_another_audience_is_refused(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, make_minter: MinterFactory
) -> None:
    token = await make_minter().mint_invocation(
        "did:web:elsewhere.test", "ixo:sandbox", can="sandbox/*", skip_cache=True
    )
    assert token
    answer = await http.post(
        SESSION, json={"user_id": "x"}, headers={"x-api-key": API_KEY, "x-ucan-invocation": token}
    )
    assert answer.status_code == 401
    assert worker.rejected == ["UNAUTHORIZED"]


async def test_an_invocation_is_single_use(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    headers = await _headers(mint)
    first = await http.post(SESSION, json={"user_id": user_key.did()}, headers=headers)
    again = await http.post(SESSION, json={"user_id": user_key.did()}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 401)
    assert worker.rejected == ["REPLAY"]


async def test_a_session_is_the_invocations_user(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, oracle_key: Ed25519Signer
) -> None:
    other = await http.post(SESSION, json={"user_id": "did:key:z6MkSomeoneElse"},
                            headers=await _headers(mint))  # fmt: skip
    assert other.status_code == 403
    [request] = worker.requests
    assert request.audience == worker.did
    assert request.capability == {"with": "ixo:sandbox", "can": "sandbox/*"}
    assert request.caller.oracle == oracle_key.did()
    assert request.network == "devnet"


async def test_the_session_lists_its_tools_with_schemas(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    session_id = await _session(http, mint, user_key.did())
    listed = await http.get(f"{SESSION}/{session_id}/tools", headers=await _headers(mint))
    items = listed.json()["items"]
    assert [i["slug"] for i in items] == [
        "COMPOSIO_MANAGE_CONNECTIONS",
        "COMPOSIO_SEARCH_TOOLS",
        "COMPOSIO_GET_TOOL_SCHEMAS",
        "COMPOSIO_MULTI_EXECUTE_TOOL",
        "COMPOSIO_REMOTE_WORKBENCH",
    ]
    assert all(i["input_parameters"]["type"] == "object" for i in items)
    unknown = await http.get(f"{SESSION}/trs_unknown/tools", headers=await _headers(mint))
    assert unknown.status_code == 404


async def test_first_connection_gives_a_redirect_url_until_connected(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    session_id = await _session(http, mint, user_key.did())
    args = {"toolkits": ["gmail"]}
    first = (await _execute(http, mint, session_id, "COMPOSIO_MANAGE_CONNECTIONS", args)).json()
    gmail = first["data"]["results"]["gmail"]
    assert gmail["status"] == "initiated"
    assert gmail["redirect_url"].startswith(f"{worker.base_url}/connect/")
    again = (await _execute(http, mint, session_id, "COMPOSIO_MANAGE_CONNECTIONS", args)).json()
    assert again["data"]["results"]["gmail"]["redirect_url"] == gmail["redirect_url"]
    worker.mark_connected(user_key.did(), "gmail")
    done = (await _execute(http, mint, session_id, "COMPOSIO_MANAGE_CONNECTIONS", args)).json()
    assert done["data"]["results"]["gmail"] == {"toolkit": "gmail", "status": "active"}


async def test_search_and_schemas_cover_the_fixture_catalog(
    http: httpx.AsyncClient, mint: Mint, user_key: Ed25519Signer
) -> None:
    session_id = await _session(http, mint, user_key.did())
    found = await _execute(
        http, mint, session_id, "COMPOSIO_SEARCH_TOOLS", {"queries": [{"use_case": "send email"}]}
    )
    [result] = found.json()["data"]["results"]
    assert result["primary_tool_slugs"] == ["GMAIL_SEND_EMAIL"]
    assert result["tools"][0]["connected"] is False
    schemas = await _execute(
        http, mint, session_id, "COMPOSIO_GET_TOOL_SCHEMAS",
        {"tool_slugs": ["GMAIL_SEND_EMAIL", "NOPE_TOOL"]},
    )  # fmt: skip
    data = schemas.json()["data"]
    assert set(data["tool_schemas"]) == {"GMAIL_SEND_EMAIL"}
    assert data["not_found"] == ["NOPE_TOOL"]


async def test_multi_execute_echoes_and_needs_connections(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    session_id = await _session(http, mint, user_key.did())
    envelope = {
        "tools": [
            {"tool_slug": "COMPOSIO_SEARCH_WEB", "arguments": {"query": "ixo"}},
            {"tool_slug": "GMAIL_SEND_EMAIL", "arguments": {"subject": "Hi"}},
        ],
        "sync_response_to_workbench": False,
    }
    ran = (await _execute(http, mint, session_id, "COMPOSIO_MULTI_EXECUTE_TOOL", envelope)).json()
    search, gmail = ran["data"]["results"]
    assert search == {
        "tool_slug": "COMPOSIO_SEARCH_WEB",
        "successful": True,
        "response": {"echo": {"query": "ixo"}},
    }
    assert gmail["successful"] is False
    assert "COMPOSIO_MANAGE_CONNECTIONS" in gmail["error"]
    worker.mark_connected(user_key.did(), "gmail")
    ran = (await _execute(http, mint, session_id, "COMPOSIO_MULTI_EXECUTE_TOOL", envelope)).json()
    assert ran["data"]["success_count"] == 2


@pytest.mark.parametrize(
    "arguments",
    [
        {"GMAIL_SEND_EMAIL": {"subject": "Hi"}},
        {"tools": [{"tool_slug": "GMAIL_SEND_EMAIL", "arguments": {}}]},
        {"tools": [{"tool_slug": "GMAIL_SEND_EMAIL"}], "sync_response_to_workbench": False},
        {"tools": [], "sync_response_to_workbench": False, "session": "x"},
    ],
)
async def test_a_malformed_envelope_gets_400(
    http: httpx.AsyncClient,
    worker: ComposioWorkerDouble,
    mint: Mint,
    user_key: Ed25519Signer,
    arguments: dict[str, Any],
) -> None:
    session_id = await _session(http, mint, user_key.did())
    answer = await _execute(http, mint, session_id, "COMPOSIO_MULTI_EXECUTE_TOOL", arguments)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_envelope"
    assert worker.executions == []


async def test_an_app_tool_is_not_a_meta_tool(
    http: httpx.AsyncClient, worker: ComposioWorkerDouble, mint: Mint, user_key: Ed25519Signer
) -> None:
    session_id = await _session(http, mint, user_key.did())
    answer = await _execute(http, mint, session_id, "GMAIL_SEND_EMAIL", {"subject": "Hi"})
    assert answer.status_code == 400
    assert worker.executions == []
