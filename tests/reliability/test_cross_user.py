"""Cross-user: user B calls every route of the OpenAPI document with user A's ids.

The calls are generated from the document the oracle serves, so a route added later is
covered without a new test: each path and query parameter and each body field is filled
with A's value of that name (A's session, run, delegation…), the request is sent with B's
credentials, and no answer may hold anything of A's, nor change it. The oracle runs the
bundled plugins in local mode, so their routes are in the document too. Socket.io is
tried the same way: B may not join A's session's room.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_core import UserInfo
from oracle_server import OracleApp, create_oracle_app
from oracle_server._socket.protocol import CLIENT_EVENTS
from oracle_server.testing import (
    HandshakeRefusedError,
    OpenAIDouble,
    RunningOracle,
    SocketClient,
    auth_headers,
    serving,
)
from oracle_ucan import Ed25519Signer, delegate

A_MESSAGE = "A's private question about her own affairs"
A_REPLY = "A private answer meant for A alone"
B_MESSAGE = "B tries to post into A's session"
A_SECRET_NAME = "A_PRIVATE_TOKEN"
A_SECRET = "a-secret-token-value-0042"


@pytest.fixture
async def oracle(tmp_path: Path) -> AsyncIterator[tuple[OracleApp, str, OpenAIDouble]]:
    async with OpenAIDouble() as llm:
        app = await create_oracle_app(
            {"name": "Cross User"},
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "THROTTLE_LIMIT": "100000",
                "MEMORY_BACKEND": "embedded",
                **llm.env(),
            },
            skip_graceful_shutdown=True,
        )
        async with serving(app) as base_url:
            yield app, base_url, llm


class World:
    """What user A has on the oracle, and the values B will pass as A's."""

    def __init__(self, session_id: str, run_id: str, delegation: str) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.delegation = delegation

    def value_for(self, name: str) -> Any:
        """A's value of a parameter or body field, by its name."""
        by_name: dict[str, Any] = {
            "sessionId": self.session_id,
            "runId": self.run_id,
            "raw": self.delegation,
            "message": B_MESSAGE,
            "path": "swagger-ui.css",
            "multitaskStrategy": "rollback",
            "name": A_SECRET_NAME,
            "value": "B overwrites A's secret",
        }
        return by_name.get(name, "x")


async def a_world(client: httpx.AsyncClient, a: dict[str, str], oracle_did: str) -> World:
    session_id = (await client.post("/sessions", headers=a)).json()["sessionId"]
    body = {"message": A_MESSAGE, "stream": True}
    async with client.stream("POST", f"/messages/{session_id}", headers=a, json=body) as sent:
        run_id = sent.headers["x-run-id"]
        _ = [chunk async for chunk in sent.aiter_bytes()]
    return World(session_id, run_id, delegation="")


def _resolve(document: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def body_for(document: Mapping[str, Any], operation: Mapping[str, Any], world: World) -> Any:
    """A JSON body with every required field of the operation's schema set to A's value."""
    content = operation.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        return None
    resolved = _resolve(document, schema)
    return {name: world.value_for(name) for name in resolved.get("required", [])}


def request_for(
    document: Mapping[str, Any], path: str, operation: Mapping[str, Any], world: World
) -> tuple[str, dict[str, str], Any]:
    url, query = path, {}
    for parameter in operation.get("parameters", []):
        if "$ref" in parameter:
            continue
        value = str(world.value_for(parameter["name"]))
        if parameter["in"] == "path":
            url = url.replace("{" + parameter["name"] + "}", value)
        elif parameter["in"] == "query" and parameter.get("required"):
            # Optional filters only narrow the answer; the ids are what B could misuse.
            query[parameter["name"]] = value
    return url, query, body_for(document, operation, world)


async def a_snapshot(client: httpx.AsyncClient, a: dict[str, str], world: World) -> Any:
    """Everything A can read of her own data."""
    return {
        "sessions": (await client.get("/sessions", headers=a)).json(),
        "history": (await client.get(f"/messages/{world.session_id}", headers=a)).json(),
        "delegation": (await client.get("/delegation", headers=a)).json(),
        "preferences": (await client.get("/user-preferences", headers=a)).json(),
        "secrets": (await client.get("/secrets", headers=a)).json(),
    }


async def test_user_b_reaches_nothing_of_user_a_on_any_route(
    oracle: tuple[OracleApp, str, OpenAIDouble],
) -> None:
    app, base_url, llm = oracle
    llm.add_steps(A_REPLY)
    user_a, user_b = Ed25519Signer.generate(), Ed25519Signer.generate()
    a, b = auth_headers(user_a, app.state.oracle_did), auth_headers(user_b, app.state.oracle_did)
    a_delegation = delegate(
        user_a,
        audience=app.state.oracle_did,
        capabilities=[{"with": user_a.did(), "can": "*"}],
        expiration=int(time.time()) + 3600,
    ).to_base64()
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        world = await a_world(client, a, app.state.oracle_did)
        stored = await client.post("/delegation", headers=a, json={"raw": a_delegation})
        assert stored.is_success, stored.text
        world.delegation = a_delegation
        kept = await client.put(f"/secrets/{A_SECRET_NAME}", headers=a, json={"value": A_SECRET})
        assert kept.is_success, kept.text
        secrets = app.state.runtime.ambient.secrets.for_user(UserInfo(did=user_a.did()))
        before = await a_snapshot(client, a, world)
        assert A_MESSAGE in json.dumps(before["history"])  # there is something to leak
        document = (await client.get("/openapi.json")).json()

        called: list[str] = []
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                if method == "parameters":
                    continue
                url, query, body = request_for(document, path, operation, world)
                response = await client.request(
                    method.upper(), url, headers=b, params=query, json=body
                )
                label = f"{method.upper()} {path}"
                called.append(label)
                assert response.status_code < 500, (label, response.status_code, response.text)
                text = response.text
                for secret in (A_MESSAGE, A_REPLY, a_delegation, A_SECRET):
                    assert secret not in text, (label, "leaked A's data")
                if "{sessionId}" in path or "{runId}" in path:
                    assert response.status_code in (403, 404), (label, response.status_code)

        after = await a_snapshot(client, a, world)
        a_values = await secrets.get_values([A_SECRET_NAME])
    assert after == before  # B changed nothing of A's
    assert a_values == {A_SECRET_NAME: A_SECRET}
    # The generated calls covered the document, A's ids included.
    assert "DELETE /sessions/{sessionId}" in called
    assert "GET /runs/{runId}" in called
    assert len(called) == sum(
        1 for ops in document["paths"].values() for m in ops if m != "parameters"
    )
    # B's own model calls never carried A's words.
    assert all(A_MESSAGE not in json.dumps(r.messages) for r in llm.requests[1:])


async def test_user_b_cannot_join_user_a_sessions_sockets(
    oracle: tuple[OracleApp, str, OpenAIDouble],
) -> None:
    app, base_url, _ = oracle
    user_a, user_b = Ed25519Signer.generate(), Ed25519Signer.generate()
    a = auth_headers(user_a, app.state.oracle_did)
    b_token = auth_headers(user_b, app.state.oracle_did)["Authorization"].removeprefix("Bearer ")
    async with httpx.AsyncClient(base_url=base_url) as client:
        session_id = (await client.post("/sessions", headers=a)).json()["sessionId"]

    with pytest.raises(HandshakeRefusedError):
        await SocketClient.connect(base_url, {"sessionId": session_id}, {"invocation": b_token})
    assert app.gateway.sockets_of(session_id) == 0


async def test_user_b_s_socket_events_never_settle_or_see_a_s_calls(tmp_path: Path) -> None:
    """Every event a client may send (`CLIENT_EVENTS`), sent by B on B's own socket with
    A's session id and the id of A's pending browser-tool call (the worst case: B learnt
    it), changes nothing of A's: the call is still A's to answer, and B sees none of it."""
    oracle = await RunningOracle.start(data_dir=tmp_path / "data")
    try:
        a, b = oracle.new_user(), oracle.new_user()
        a_session, b_session = await oracle.create_session(a), await oracle.create_session(b)
        a_tab = await oracle.connect(a, a_session)
        b_tab = await oracle.connect(b, b_session)
        await a_tab.wait_for("connected")
        await b_tab.wait_for("connected")

        call = asyncio.create_task(oracle.gateway.call_browser_tool(a_session, "read_page", {}))
        [request] = await a_tab.wait_for("browser_tool_call")
        forged = {
            "sessionId": a_session,
            "toolCallId": request["toolCallId"],
            "requestId": request["toolCallId"],
            "result": "forged by B",
            "success": True,
        }
        for event in CLIENT_EVENTS:
            await b_tab.emit(event, forged)
        await b_tab.emit("ping")
        await b_tab.wait_for("pong")  # B's events were all handled before the ping

        assert not call.done()
        assert oracle.gateway.sockets_of(a_session) == 1  # B did not join A's room
        assert b_tab.records.named("browser_tool_call") == []
        await a_tab.emit("tool_result", {**forged, "result": "A's page"})
        assert await call == "A's page"
    finally:
        await oracle.aclose()
