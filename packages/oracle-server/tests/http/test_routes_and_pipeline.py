"""Routes and pipeline stages driven through the ASGI app (no network).

Readiness, subscription gate, plugin and host routes with exclusions, body validation of
every ``SendMessageDto`` rule, the delegation endpoints, graceful shutdown, and an idle
connection kept open.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_core import (
    AuthExcludedRoute,
    EnvValidationError,
    OraclePlugin,
    PluginContext,
    RouteError,
    route_context,
)
from oracle_server import AuthData, HTTPError, OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, auth_headers, serving
from oracle_ucan import Delegation, Ed25519Signer, cid_for, dag_cbor, delegate, encode_car

ENV_MODEL = {
    "THROTTLE_LIMIT": "1000",
    "LLM_PROVIDER": "openai-compatible",
    "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
    "OPENAI_COMPATIBLE_MODEL": "m",
}


async def plugin_ping(request: Request) -> Response:
    """A plugin's protected route."""
    return JSONResponse({"pong": True})


async def plugin_public(request: Request) -> Response:
    """A plugin's public route."""
    return JSONResponse({"public": True})


async def plugin_whoami(request: Request) -> Response:
    """A plugin's protected route that needs the caller's runtime context."""
    ctx = route_context(request)
    return JSONResponse(
        {"did": ctx.user.did, "plugin": ctx.plugin_name, "request_id": ctx.session.request_id}
    )


async def plugin_refuse(request: Request) -> Response:
    """A plugin's public route that refuses what it does not have."""
    if request.path_params["item"] == "anonymous":
        route_context(request)  # no user on an auth-excluded route: the host answers 401
    raise RouteError(
        410, "gone for good", code="plugin.gone", headers={"Cache-Control": "no-store"}
    )


async def host_hello(request: Request) -> Response:
    """A host route."""
    return JSONResponse({"hello": "host"})


class RoutesPlugin(OraclePlugin):
    name = "routes-plugin"
    version = "1.0.0"
    manifest = {"title": "Routes", "summary": "Adds routes.", "visibility": "silent"}

    def get_routes(self, ctx: PluginContext[Any]) -> list[BaseRoute]:
        return [
            Route("/plugin/ping", plugin_ping, methods=["GET"]),
            Route("/plugin/whoami", plugin_whoami, methods=["GET"]),
            Route("/plugin/public/{item}", plugin_public, methods=["GET"]),
            Route("/plugin/refuse/{item}", plugin_refuse, methods=["GET"]),
        ]

    def get_auth_excluded_routes(self) -> list[AuthExcludedRoute]:
        return [
            AuthExcludedRoute("plugin/public/:item", "GET"),
            AuthExcludedRoute("plugin/refuse/:item", "GET"),
        ]


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[OracleApp]:
    oracle = await create_oracle_app(
        {"name": "Routes Oracle"},
        plugins=[RoutesPlugin()],
        routes=[Route("/host/hello", host_hello, methods=["GET"])],
        auth_excluded_routes=[AuthExcludedRoute("/host/hello")],
        env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path), **ENV_MODEL},
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    try:
        yield oracle
    finally:
        await oracle.aclose()


def client_for(app: OracleApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app.asgi), base_url="http://test")


async def test_plugin_and_host_routes_honour_exclusions(app: OracleApp) -> None:
    headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with client_for(app) as client:
        assert (await client.get("/plugin/ping")).status_code == 401
        assert (await client.get("/plugin/ping", headers=headers)).json() == {"pong": True}
        assert (await client.get("/plugin/public/x")).json() == {"public": True}
        assert (await client.get("/host/hello")).json() == {"hello": "host"}
        wrong_method = await client.post("/plugin/public/x")
        assert wrong_method.status_code == 401  # only GET is excluded


async def test_plugin_routes_get_the_authenticated_callers_context(app: OracleApp) -> None:
    user = Ed25519Signer.generate()
    headers = {**auth_headers(user, app.state.oracle_did), "x-request-id": "req-42"}
    async with client_for(app) as client:
        answer = await client.get("/plugin/whoami", headers=headers)
    assert answer.json() == {"did": user.did(), "plugin": "routes-plugin", "request_id": "req-42"}


async def test_plugin_route_refusals_answer_in_the_clients_error_shape(app: OracleApp) -> None:
    async with client_for(app) as client:
        gone = await client.get("/plugin/refuse/x", headers={"x-request-id": "req-7"})
        anonymous = await client.get("/plugin/refuse/anonymous")
    assert gone.status_code == 410
    assert gone.headers["cache-control"] == "no-store"
    assert gone.json() == {
        "statusCode": 410,
        "message": "gone for good",
        "error": "Gone",
        "requestId": "req-7",
        "code": "plugin.gone",
    }
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "route.unauthenticated"
    assert anonymous.json()["requestId"] == anonymous.headers["x-request-id"]


def ixo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """``ORACLE_BACKEND=ixo`` with a Matrix homeserver that nothing answers."""
    return {
        "ORACLE_BACKEND": "ixo",
        "ORACLE_NAME": "Routes Oracle",
        "NETWORK": "devnet",
        "ORACLE_DID": "did:ixo:ixo1routesoracle",
        "ORACLE_ENTITY_DID": "did:ixo:entity:routes",
        "BLOCKSYNC_GRAPHQL_URL": "http://127.0.0.1:9/graphql",
        "SECP_MNEMONIC": "unused in these tests",
        "RPC_URL": "http://127.0.0.1:9",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "MATRIX_BASE_URL": "http://127.0.0.1:9",
        "MATRIX_ORACLE_ADMIN_USER_ID": "@oracle:localhost",
        "MATRIX_ORACLE_ADMIN_PASSWORD": "unused",
        "MATRIX_ORACLE_ADMIN_ACCESS_TOKEN": "unused",
        "MATRIX_ACCOUNT_ROOM_ID": "!account:localhost",
        "MATRIX_VALUE_PIN": "1234",
        "MATRIX_RECOVERY_PHRASE": "unused",
        "MATRIX_STORE_PATH": str(tmp_path / "matrix"),
        **ENV_MODEL,
        **extra,
    }


async def test_protected_routes_answer_503_until_matrix_is_ready(tmp_path: Path) -> None:
    # The ASGI transport runs no lifespan, so the Matrix layer never starts: it stays
    # pending, as it does while a real homeserver is slow to answer.
    app = await create_oracle_app(
        {"name": "Routes Oracle"},
        plugins=[RoutesPlugin()],
        env=ixo_env(tmp_path),
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    try:
        async with client_for(app) as client:
            # 503, not 401: the client renews its credentials on a 401.
            for request in (
                client.build_request("GET", "/sessions", headers=headers),
                client.build_request("GET", "/sessions"),
                client.build_request("POST", "/messages/s", headers=headers, json={"message": "x"}),
                client.build_request("GET", "/plugin/ping", headers=headers),
            ):
                refused = await client.send(request)
                assert refused.status_code == 503, request.url
                assert refused.json()["message"].startswith("Oracle not ready")
                assert refused.json()["code"] == "server.not_ready"
                assert refused.json()["requestId"] == refused.headers["x-request-id"]
                assert refused.headers["retry-after"] == "5"
            assert (await client.get("/health")).status_code == 200
            ready = await client.get("/ready")
            assert ready.status_code == 503
            assert ready.json()["status"] == "starting"
            assert ready.json()["matrix"] == "pending"
            assert ready.json()["signingKey"] is False
    finally:
        await app.aclose()


@pytest.mark.parametrize("how", ["MATRIX_ENABLED=false", "skip_matrix_init"])
async def test_matrix_disabled_or_skipped_is_ready_at_once(tmp_path: Path, how: str) -> None:
    env = ixo_env(tmp_path)
    if how == "MATRIX_ENABLED=false":
        # The MATRIX_* variables become optional.
        env = {k: v for k, v in env.items() if not k.startswith("MATRIX_")}
        env["MATRIX_ENABLED"] = "false"
    app = await create_oracle_app(
        {"name": "Routes Oracle"},
        env=env,
        discover_entry_points=False,
        skip_graceful_shutdown=True,
        skip_matrix_init=how == "skip_matrix_init",
    )
    try:
        async with client_for(app) as client:
            ready = await client.get("/ready")
            assert ready.status_code == 200
            assert ready.json()["matrix"] == "disabled"
    finally:
        await app.aclose()


async def test_matrix_settings_are_checked_at_boot(tmp_path: Path) -> None:
    env = ixo_env(tmp_path, MATRIX_ENABLED="yes")
    with pytest.raises(EnvValidationError, match="MATRIX_ENABLED"):
        await create_oracle_app({"name": "x"}, env=env, discover_entry_points=False)
    env = ixo_env(tmp_path)
    del env["MATRIX_ORACLE_ADMIN_PASSWORD"], env["MATRIX_ORACLE_ADMIN_ACCESS_TOKEN"]
    with pytest.raises(EnvValidationError, match="MATRIX_ORACLE_ADMIN_ACCESS_TOKEN"):
        await create_oracle_app({"name": "x"}, env=env, discover_entry_points=False)


async def test_subscription_gate_answers_402_with_claims(tmp_path: Path) -> None:
    async def check(auth: AuthData) -> None:
        if auth.did.endswith("x"):
            return
        raise HTTPError(
            402,
            "No subscription found, please subscribe to continue",
            claims=["claim-1"],
            outstandingClaims=["claim-1"],
        )

    oracle = await create_oracle_app(
        {"name": "Paid Oracle"},
        env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path), **ENV_MODEL},
        discover_entry_points=False,
        skip_graceful_shutdown=True,
        subscription_check=check,
    )
    try:
        user = Ed25519Signer.generate()
        while user.did().endswith("x"):
            user = Ed25519Signer.generate()
        async with client_for(oracle) as client:
            paid = await client.get(
                "/sessions", headers=auth_headers(user, oracle.state.oracle_did)
            )
            assert paid.status_code == 402
            assert paid.json()["claims"] == ["claim-1"]
            assert paid.json()["outstandingClaims"] == ["claim-1"]
            assert (await client.get("/health")).status_code == 200
    finally:
        await oracle.aclose()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "message"),
        ({"message": "   "}, "message should not be empty"),
        ({"message": "x", "unknown": 1}, "unknown"),
        ({"message": "x", "stream": "yes"}, "stream"),
        (
            {
                "message": "x",
                "tools": [{"name": "", "schema": {"type": "object"}, "description": "d"}],
            },
            "name",
        ),
        (
            {"message": "x", "tools": [{"name": "t", "schema": {}, "description": "d"}]},
            "schema should not be empty",
        ),
        (
            {"message": "x", "attachments": [{"filename": "a.txt", "mimetype": "text/plain"}]},
            "Either mxcUri or eventId must be provided",
        ),
        (
            {
                "message": "x",
                "attachments": [{"mxcUri": "ftp://x", "filename": "a", "mimetype": "t"}],
            },
            "mxcUri must start with mxc://, http://, or https://",
        ),
        (
            {"message": "x", "attachments": [{"eventId": "x", "filename": "a", "mimetype": "t"}]},
            "eventId must start with $",
        ),
        (
            {
                "message": "x",
                "attachments": [{"eventId": "$e", "filename": "a" * 256, "mimetype": "t"}],
            },
            "filename",
        ),
        (
            {
                "message": "x",
                "attachments": [{"eventId": "$e", "filename": "a", "mimetype": "t"}] * 11,
            },
            "attachments",
        ),
        ({"message": "x", "agActions": [{"name": "a", "description": "d"}]}, "schema"),
    ],
)
async def test_send_message_body_rules(app: OracleApp, body: dict[str, Any], fragment: str) -> None:
    headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with client_for(app) as client:
        session_id = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        refused = await client.post(f"/messages/{session_id}", headers=headers, json=body)
    assert refused.status_code == 400
    messages = refused.json()["message"]
    assert isinstance(messages, list)
    assert any(fragment in m for m in messages), messages


async def test_unknown_session_is_404_before_any_stream(app: OracleApp) -> None:
    headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
    async with client_for(app) as client:
        missing = await client.post(
            "/messages/no-such-session", headers=headers, json={"message": "x", "stream": True}
        )
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/json")
    assert missing.json()["message"] == "Session not found"


async def test_delegation_store_inspect_and_revoke(app: OracleApp) -> None:
    user, other = Ed25519Signer.generate(), Ed25519Signer.generate()
    headers = auth_headers(user, app.state.oracle_did)
    expiry = int(time.time()) + 3600
    delegation = delegate(
        user,
        audience=app.state.oracle_did,
        capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
        expiration=expiry,
    ).to_base64()
    strangers = delegate(
        other,
        audience=app.state.oracle_did,
        capabilities=[{"with": "ixo:memory", "can": "*"}],
        expiration=expiry,
    ).to_base64()
    misaddressed = delegate(
        user,
        audience=Ed25519Signer.generate().did(),
        capabilities=[{"with": "ixo:memory", "can": "*"}],
        expiration=expiry,
    ).to_base64()
    async with client_for(app) as client:
        assert (await client.get("/delegation", headers=headers)).json() == {"authorized": False}
        stored = await client.post("/delegation", headers=headers, json={"raw": delegation})
        assert stored.json() == {"ok": True, "expiration": expiry}
        status = await client.get("/delegation", headers=headers)
        assert status.json() == {"authorized": True, "expiration": expiry}
        foreign = await client.post("/delegation", headers=headers, json={"raw": strangers})
        assert foreign.status_code == 403
        wrong = await client.post("/delegation", headers=headers, json={"raw": misaddressed})
        assert wrong.status_code == 400
        assert wrong.json()["message"] == "Invalid UCAN delegation: UNAUTHORIZED"
        mismatch = await client.post(
            "/delegation", headers=headers, json={"raw": delegation, "expiration": expiry + 1}
        )
        assert mismatch.status_code == 400
        # The migration fallback: a delegation header alone authenticates its issuer.
        fallback = await client.post("/sessions", headers={"x-ucan-delegation": delegation})
        assert fallback.status_code == 201
        listed = await client.get("/sessions", headers=headers)
        assert [s["sessionId"] for s in listed.json()["sessions"]] == [fallback.json()["sessionId"]]
        bad = await client.get("/sessions", headers={"x-ucan-delegation": misaddressed})
        assert bad.json()["message"] == "Invalid UCAN delegation"
        assert (await client.delete("/delegation", headers=headers)).json() == {"ok": True}
        assert (await client.get("/delegation", headers=headers)).json() == {"authorized": False}
        # A revoked delegation is never adopted again, from the body or from headers.
        again = await client.post("/delegation", headers=headers, json={"raw": delegation})
        assert again.status_code == 400
        by_header = await client.get("/sessions", headers={"x-ucan-delegation": delegation})
        assert by_header.status_code == 401


def _with_empty_nonce(token: Delegation) -> str:
    """``token`` re-encoded with ``nnc: ""`` in its block: another CID, the same signature
    (the signed payload omits an empty nonce)."""
    data = dag_cbor.decode(token.ucan.block)
    data["nnc"] = ""
    block = dag_cbor.encode(data)
    variant = dag_cbor.encode({"ucan@0.9.1": cid_for(block)})
    car = encode_car([cid_for(variant)], [(cid_for(block), block), (cid_for(variant), variant)])
    return base64.b64encode(car).decode()


async def test_a_revoked_delegation_re_encoded_stays_revoked(app: OracleApp) -> None:
    user = Ed25519Signer.generate()
    headers = auth_headers(user, app.state.oracle_did)
    token = delegate(
        user,
        audience=app.state.oracle_did,
        capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
        expiration=int(time.time()) + 3600,
    )
    variant = _with_empty_nonce(token)
    async with client_for(app) as client:
        # The variant is a valid delegation of its own (before the revocation)...
        assert (
            await client.get("/sessions", headers={"x-ucan-delegation": variant})
        ).status_code == 200
        stored = await client.post("/delegation", headers=headers, json={"raw": token.to_base64()})
        assert stored.status_code == 200
        assert (await client.delete("/delegation", headers=headers)).json() == {"ok": True}
        # ...and once the user revoked the original, no re-encoding of it is adopted.
        again = await client.post("/delegation", headers=headers, json={"raw": variant})
        assert again.status_code == 400
        assert again.json()["message"] == "Invalid UCAN delegation: REVOKED"
        by_header = await client.get("/sessions", headers={"x-ucan-delegation": variant})
        assert by_header.status_code == 401


async def test_shutdown_drains_then_aborts_running_turns(tmp_path: Path) -> None:
    async with OpenAIDouble(["word " * 300], chunk_size=3, delay_between_chunks=0.01) as double:
        oracle = await create_oracle_app(
            {"name": "Draining Oracle"},
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path),
                "SHUTDOWN_DRAIN_SECONDS": "0",
                **double.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        headers = auth_headers(Ed25519Signer.generate(), oracle.state.oracle_did)
        frames: list[str] = []
        async with (
            serving(oracle) as base_url,
            httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        ):
            session_id = (await client.post("/sessions", headers=headers)).json()["sessionId"]

            async def read() -> None:
                async with client.stream(
                    "POST",
                    f"/messages/{session_id}",
                    headers=headers,
                    json={"message": "talk", "stream": True},
                ) as response:
                    async for chunk in response.aiter_text():
                        frames.append(chunk)

            reader = asyncio.create_task(read())
            async with asyncio.timeout(10):
                while not any("event: message" in f for f in frames):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            await oracle.state.runner.drain(0)
            await reader
        body = "".join(frames)
        assert "Server shutting down" in body
        assert body.rstrip().splitlines()[-1].startswith("data: ")
        assert '"status":"aborted"' in body.rsplit("event: done", 1)[1]


async def keep_alive_oracle(tmp_path: Path) -> OracleApp:
    """A local oracle with the default HTTP keep-alive."""
    return await create_oracle_app(
        {"name": "Keep-alive Oracle"},
        env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path), **ENV_MODEL},
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )


async def test_an_idle_connection_outlives_hypercorns_five_second_default(
    tmp_path: Path,
) -> None:
    # Clients keep idle connections a few seconds; when the server closes first, a
    # request sent on the connection at that moment fails with a reset.
    oracle = await keep_alive_oracle(tmp_path)
    assert oracle.state.settings.http_keep_alive_seconds == 75
    async with serving(oracle) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        request = f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        try:
            for idle in (5.5, 0):  # idle past Hypercorn's own default, then ask again
                writer.write(request)
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                assert head.startswith(b"HTTP/1.1 200")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                await asyncio.sleep(idle)
        finally:
            writer.close()


async def test_a_connection_its_client_closed_is_closed_at_once_not_at_keep_alive(
    tmp_path: Path,
) -> None:
    # Hypercorn alone holds such a socket (CLOSE_WAIT) until the keep-alive fires, 75 s
    # here: a load of short-lived client connections piles up dead descriptors.
    oracle = await keep_alive_oracle(tmp_path)
    async with serving(oracle) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200")
            assert b"connection: close" not in head.lower()  # kept alive, then idle
            writer.write_eof()  # the client is done: its FIN, its side still reading
            # The server's own FIN comes back: the rest of the body, then the end.
            rest = await asyncio.wait_for(reader.read(), 20)
            assert reader.at_eof()
            assert b"HTTP/1.1" not in rest  # nothing but the one response's body
        finally:
            writer.close()


def test_the_current_entity_is_one_turns_only() -> None:
    from oracle_server._http.dto import SendMessageDto

    def state(metadata: dict[str, Any] | None) -> dict[str, Any]:
        return SendMessageDto.model_validate({"message": "hi", "metadata": metadata}).turn_state()

    on_page = state({"currentEntityDid": "did:ixo:entity:abc", "editorRoomId": "!r:hs"})
    assert on_page == {"current_entity_did": "did:ixo:entity:abc", "editor_room_id": "!r:hs"}
    assert state(None) == {"current_entity_did": None}
    assert state({"currentEntityDid": ""}) == {"current_entity_did": None}
    assert state({"currentEntityDid": 7}) == {"current_entity_did": None}
