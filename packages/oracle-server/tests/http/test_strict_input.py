"""Bad input and failures answered in the client's JSON shape, through the real ASGI app.

An exception no handler takes, numbers that are not bounded ASCII integers or finite
floats, ``null`` in optional fields, bodies over their route's cap (declared, or streamed
in chunks), and the request id in every error body.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from oracle_core import OraclePlugin, PluginContext
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, auth_headers, serving
from oracle_ucan import Ed25519Signer, delegate

FAILURE_DETAIL = "the ledger at /srv/private/ledger.db is locked"


async def plugin_failing(request: Request) -> Response:
    """A plugin route with a bug."""
    raise RuntimeError(FAILURE_DETAIL)


class FailingPlugin(OraclePlugin):
    name = "failing-plugin"
    version = "1.0.0"
    manifest = {"title": "Failing", "summary": "A route that raises.", "visibility": "silent"}

    def get_routes(self, ctx: PluginContext[Any]) -> list[BaseRoute]:
        return [Route("/plugin/fail", plugin_failing, methods=["GET"])]


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[OracleApp]:
    async with OpenAIDouble(auto_reply=lambda chat: "ok") as llm:
        oracle = await create_oracle_app(
            {"name": "Strict Oracle"},
            plugins=[FailingPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path),
                "THROTTLE_LIMIT": "1000",
                "CORS_ORIGIN": "https://portal.example",
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        try:
            yield oracle
        finally:
            await oracle.aclose()


@pytest.fixture
async def client(app: OracleApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app.asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as c:
        yield c


@pytest.fixture
def user(app: OracleApp) -> dict[str, str]:
    return auth_headers(Ed25519Signer.generate(), app.state.oracle_did)


async def new_session(client: httpx.AsyncClient, user: dict[str, str]) -> str:
    created = await client.post("/sessions", headers=user)
    assert created.status_code == 201
    return str(created.json()["sessionId"])


def assert_error_shape(answer: httpx.Response, status: int) -> dict[str, Any]:
    """The SRV-1 body, ``statusCode`` the status, ``requestId`` the header's id."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    body: dict[str, Any] = answer.json()
    assert body["statusCode"] == status
    assert body["requestId"] == answer.headers["x-request-id"]
    assert isinstance(body["error"], str)
    return body


# --- the catch-all ---------------------------------------------------------------------------


async def test_an_unhandled_error_answers_json_500_with_the_request_id(
    client: httpx.AsyncClient, user: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    headers = {**user, "x-request-id": "req-fail-1", "origin": "https://portal.example"}
    with caplog.at_level(logging.ERROR, logger="oracle_server.http"):
        answer = await client.get("/plugin/fail", headers=headers)

    assert answer.headers["x-request-id"] == "req-fail-1"
    assert answer.json() == {
        "statusCode": 500,
        "message": "Internal server error",
        "error": "Internal Server Error",
        "requestId": "req-fail-1",
        "code": "http.unhandled",
    }
    # The pipeline's other headers are there too: the 500 is answered inside them.
    assert answer.headers["access-control-allow-origin"] == "https://portal.example"
    assert answer.headers["x-content-type-options"] == "nosniff"
    # The details are in the log only.
    assert FAILURE_DETAIL not in answer.text
    [record] = [r for r in caplog.records if r.getMessage().startswith("http.unhandled")]
    assert "req-fail-1" in record.getMessage()
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == FAILURE_DETAIL


async def test_every_error_body_names_its_request(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    unknown = await client.get("/no/such/route")
    assert_error_shape(unknown, 404)
    unauthenticated = await client.get("/sessions", headers={"x-request-id": "req-401"})
    assert assert_error_shape(unauthenticated, 401)["requestId"] == "req-401"
    invalid = await client.post("/messages/abort", headers=user, json={})
    assert isinstance(assert_error_shape(invalid, 400)["message"], list)


# --- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "/runs/{run}?after=%C2%B2",  # ²: str.isdigit() says yes, int() raises
        "/runs/{run}?after=-1",
        "/runs/{run}?after=" + "9" * 5000,
        "/sessions?offset=" + "9" * 4000,  # converts, then overflows the database
        "/sessions?offset=" + "9" * 5000,
        "/sessions?offset=%EF%BC%92",  # a fullwidth 2, which int() reads as 2
        "/sessions?limit=1e3",
        "/sessions/{session}/messages?limit=%C2%B2",
        "/sessions/{session}/messages?before=m%C2%B2",
        "/sessions/{session}/messages?after=m" + "9" * 30,
    ],
)
async def test_numbers_in_queries_are_bounded_ascii_integers(
    client: httpx.AsyncClient, user: dict[str, str], query: str
) -> None:
    session_id = await new_session(client, user)
    answer = await client.get(query.format(run="r-1", session=session_id), headers=user)
    body = assert_error_shape(answer, 400)
    assert body["code"] == "request.bad_number"
    assert body["message"] == [body["message"][0]]


def valid_delegation(app: OracleApp) -> tuple[dict[str, str], str]:
    user = Ed25519Signer.generate()
    raw = delegate(
        user,
        audience=app.state.oracle_did,
        capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
        expiration=int(time.time()) + 3600,
    ).to_base64()
    return auth_headers(user, app.state.oracle_did), raw


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
async def test_numbers_in_bodies_are_finite(
    app: OracleApp, client: httpx.AsyncClient, number: str
) -> None:
    headers, raw = valid_delegation(app)
    body = f'{{"raw": "{raw}", "expiration": {number}}}'
    answer = await client.post(
        "/delegation", headers={**headers, "content-type": "application/json"}, content=body
    )
    assert assert_error_shape(answer, 400)["code"] == "request.bad_number"
    # Nothing was stored.
    assert (await client.get("/delegation", headers=headers)).json() == {"authorized": False}


async def test_integers_in_bodies_fit_in_64_bits(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    session_id = await new_session(client, user)
    for digits in (20, 4000):
        body = f'{{"message": "hi", "metadata": {{"n": {"9" * digits}}}}}'
        answer = await client.post(
            f"/messages/{session_id}",
            headers={**user, "content-type": "application/json"},
            content=body,
        )
        assert assert_error_shape(answer, 400)["code"] == "request.bad_number"


async def test_a_body_nested_beyond_reason_is_not_json(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    session_id = await new_session(client, user)
    answer = await client.post(
        f"/messages/{session_id}",
        headers={**user, "content-type": "application/json"},
        content="[" * 100_000,
    )
    assert assert_error_shape(answer, 400)["code"] == "request.bad_json"


# --- null --------------------------------------------------------------------------------------


async def test_null_means_absent_in_optional_fields(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    session_id = await new_session(client, user)
    sent = await client.post(
        f"/messages/{session_id}",
        headers=user,
        json={
            "message": "hi",
            "stream": None,
            "returnAllMessages": None,
            "tools": None,
            "agActions": None,
            "attachments": None,
            "model": None,
            "timezone": None,
        },
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["message"]["content"] == "ok"
    assert "messages" not in sent.json()  # returnAllMessages: null is its default, false


async def test_the_document_says_optional_fields_take_null(client: httpx.AsyncClient) -> None:
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    send = schemas["SendMessageDto"]["properties"]
    assert send["stream"]["anyOf"] == [{"type": "boolean"}, {"type": "null"}]
    assert send["stream"]["default"] is False
    assert "anyOf" not in send["message"]  # required: null is refused
    assert {"type": "null"} in schemas["AttachmentDto"]["properties"]["size"]["anyOf"]


async def test_null_stays_an_error_in_required_fields(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    session_id = await new_session(client, user)
    answer = await client.post(f"/messages/{session_id}", headers=user, json={"message": None})
    assert any(m.startswith("message") for m in assert_error_shape(answer, 400)["message"])
    tool = {"name": None, "schema": {"type": "object"}, "description": "d"}
    answer = await client.post(
        f"/messages/{session_id}", headers=user, json={"message": "hi", "tools": [tool]}
    )
    assert any("name" in m for m in assert_error_shape(answer, 400)["message"])


@pytest.mark.parametrize(
    ("field", "tool", "problem"),
    [
        ("tools", {"name": "open url", "schema": {"type": "object"}}, "a tool name is 1 to 64"),
        ("agActions", {"name": "pick", "schema": {"type": "array"}}, "must describe an object"),
        (
            "tools",
            {"name": "pick", "schema": {"properties": {"a": {"type": "frob"}}}},
            "invalid JSON Schema",
        ),
        (
            "agActions",
            {"name": "cfg", "schema": {"properties": {"model_config": {"type": "string"}}}},
            "'model_config' is not usable",
        ),
    ],
)
async def test_a_client_tool_the_model_could_never_call_is_refused(
    client: httpx.AsyncClient, user: dict[str, str], field: str, tool: dict[str, Any], problem: str
) -> None:
    session_id = await new_session(client, user)
    body = {"message": "hi", field: [{"description": "A tool.", **tool}]}

    answer = await client.post(f"/messages/{session_id}", headers=user, json=body)

    messages = assert_error_shape(answer, 400)["message"]
    assert any(m.startswith(f"{field}.0") and problem in m for m in messages), messages


# --- body caps ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field", "cap"),
    [
        ("/messages/abort", "sessionId", 4 * 1024),
        ("/messages/{session}", "message", 256 * 1024),
        ("/delegation", "raw", 64 * 1024),
    ],
)
async def test_each_route_caps_its_body(
    client: httpx.AsyncClient, user: dict[str, str], path: str, field: str, cap: int
) -> None:
    session_id = await new_session(client, user)
    url = path.format(session=session_id)
    oversized = f'{{"{field}": "{"x" * cap}"}}'.encode()

    declared = await client.post(
        url, headers={**user, "content-type": "application/json"}, content=oversized
    )
    body = assert_error_shape(declared, 413)
    assert body["code"] == "request.too_large"
    assert body["limitBytes"] == cap

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the cap is enforced while the body streams in.
        for start in range(0, len(oversized), 1024):
            yield oversized[start : start + 1024]

    streamed = await client.post(
        url, headers={**user, "content-type": "application/json"}, content=chunks()
    )
    assert "content-length" not in streamed.request.headers
    assert assert_error_shape(streamed, 413)["limitBytes"] == cap


async def test_a_body_under_its_cap_is_read(
    client: httpx.AsyncClient, user: dict[str, str]
) -> None:
    answer = await client.post("/messages/abort", headers=user, json={"sessionId": "s" * 3000})
    assert answer.status_code == 200
    assert answer.json() == {"success": False}


async def test_an_oversized_body_is_refused_before_it_is_sent(app: OracleApp) -> None:
    # Over loopback: the answer comes from the headers alone, the body never sent.
    user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with serving(app) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            head = [
                "POST /messages/abort HTTP/1.1",
                f"host: {host}",
                "content-type: application/json",
                "content-length: 900000",
                *(f"{name}: {value}" for name, value in user.items()),
            ]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            await writer.drain()
            async with asyncio.timeout(30):
                status_line = await reader.readline()
        finally:
            writer.close()
            await writer.wait_closed()
    assert status_line.split()[1] == b"413"


async def test_an_answer_before_the_body_is_read_closes_the_connection(app: OracleApp) -> None:
    # The server drops a keep-alive connection whose request body went unread; without
    # `Connection: close` the client's next request on it would get no answer.
    user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        for _ in range(3):
            refused = await client.post("/delegation", json={})  # 401: the body is unread
            assert refused.status_code == 401
            assert refused.headers["connection"] == "close"
            too_large = await client.post("/messages/abort", headers=user, content=b"x" * 5000)
            assert too_large.status_code == 413
            assert too_large.headers["connection"] == "close"
            read = await client.post("/messages/abort", headers=user, json={"sessionId": "s"})
            assert read.json() == {"success": False}
            assert "connection" not in read.headers  # the body was read: kept alive
