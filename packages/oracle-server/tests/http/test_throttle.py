"""The throttle as clients meet it: per route class (turns, reads), per oracle, per user.

Each test runs against both rate-limit backends: in this process, and in the Redis at
``ORACLE_TEST_REDIS_URL`` (its cases skip, naming the variable, without it).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
import pytest

from oracle_core import EnvValidationError
from oracle_server import OracleApp, create_oracle_app
from oracle_server._settings import load_settings
from oracle_server.testing import OpenAIDouble, auth_headers, redis_url_or_skip, serving
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, httpx.AsyncClient]]]


@pytest.fixture(params=["memory", "redis"])
async def serve(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Serve]:
    """``async with serve(**env) as (app, client)``: an oracle on loopback, its rate
    limits in memory or in Redis, and a client of it; each oracle has a DID of its own."""
    backend = {"REDIS_URL": redis_url_or_skip()} if request.param == "redis" else {}
    async with OpenAIDouble(auto_reply=lambda chat: "ok") as llm:

        @asynccontextmanager
        async def run(**env: str) -> AsyncIterator[tuple[OracleApp, httpx.AsyncClient]]:
            name = uuid.uuid4().hex[:8]
            app = await create_oracle_app(
                {"name": f"Throttle {name}"},
                env={
                    "ORACLE_BACKEND": "local",
                    "SQLITE_DATABASE_PATH": str(tmp_path / name),
                    "ORACLE_SIGNING_MNEMONIC": f"throttle test {uuid.uuid4()}",
                    **llm.env(),
                    **backend,
                    **env,
                },
                discover_entry_points=False,
                skip_graceful_shutdown=True,
            )
            async with (
                serving(app) as base_url,
                httpx.AsyncClient(base_url=base_url, timeout=30) as client,
            ):
                yield app, client

        yield run


async def test_the_published_clients_first_minute_is_never_throttled(serve: Serve) -> None:
    # What the JavaScript client sends while a person opens the oracle, chats and tidies
    # up, with the default limits.
    async with serve() as (app, client):
        user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        statuses = [(await client.get("/models")).status_code]
        statuses.append((await client.get("/delegation", headers=user)).status_code)
        statuses.append((await client.get("/sessions", headers=user)).status_code)
        created = await client.post("/sessions", headers=user)
        statuses.append(created.status_code)
        session_id = created.json()["sessionId"]
        for path in (f"/sessions/{session_id}/run", f"/sessions/{session_id}/messages"):
            statuses.append((await client.get(path, headers=user)).status_code)
        for text in ("Hello", "Tell me more", "Thanks"):
            sent = await client.post(
                f"/messages/{session_id}", headers=user, json={"message": text}
            )
            statuses.append(sent.status_code)
            statuses.append((await client.get("/sessions", headers=user)).status_code)
            statuses.append((await client.get(f"/messages/{session_id}", headers=user)).status_code)
        statuses.append((await client.delete(f"/sessions/{session_id}", headers=user)).status_code)
        statuses.append((await client.get("/sessions", headers=user)).status_code)

    assert len(statuses) == 17
    assert 429 not in statuses, statuses
    assert set(statuses) <= {200, 201}, statuses


async def test_reads_do_not_spend_the_turn_budget(serve: Serve) -> None:
    async with serve(THROTTLE_TURN_LIMIT="2", THROTTLE_READ_LIMIT="4") as (app, client):
        user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        session_id = (await client.post("/sessions", headers=user)).json()["sessionId"]
        reads = [(await client.get("/sessions", headers=user)).status_code for _ in range(4)]
        # The read budget is spent (the session's creation counted as a read) ...
        assert reads == [200, 200, 200, 429]
        # ... and the turn budget is whole.
        turns = [
            (
                await client.post(f"/messages/{session_id}", headers=user, json={"message": "hi"})
            ).status_code
            for _ in range(3)
        ]
        assert turns == [200, 200, 429]
        refused = await client.post(f"/messages/{session_id}", headers=user, json={"message": "x"})
        assert refused.json()["message"] == "ThrottlerException: Too Many Requests"
        assert int(refused.headers["retry-after"]) >= 1


async def test_turns_do_not_spend_the_read_budget(serve: Serve) -> None:
    async with serve(THROTTLE_TURN_LIMIT="3", THROTTLE_READ_LIMIT="2") as (app, client):
        user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        session_id = (await client.post("/sessions", headers=user)).json()["sessionId"]
        for _ in range(3):
            sent = await client.post(
                f"/messages/{session_id}", headers=user, json={"message": "hi"}
            )
            assert sent.status_code == 200
        assert (await client.get("/sessions", headers=user)).status_code == 200
        assert (await client.get("/sessions", headers=user)).status_code == 429


async def test_two_oracles_never_share_a_users_budget(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve(THROTTLE_READ_LIMIT="2") as (first, first_client),
        serve(THROTTLE_READ_LIMIT="2") as (second, second_client),
    ):
        assert first.state.oracle_did != second.state.oracle_did
        on_first = auth_headers(user, first.state.oracle_did)
        on_second = auth_headers(user, second.state.oracle_did)
        spent = [(await first_client.get("/sessions", headers=on_first)).status_code for _ in "abc"]
        assert spent == [200, 200, 429]
        # The same user on the other oracle (the same Redis, for the Redis backend).
        fresh = [
            (await second_client.get("/sessions", headers=on_second)).status_code for _ in "abc"
        ]
        assert fresh == [200, 200, 429]


async def test_one_limit_still_sets_both_classes(serve: Serve) -> None:
    # THROTTLE_LIMIT, as deployments set it before the classes existed, applies to each.
    async with serve(THROTTLE_LIMIT="1") as (app, client):
        user = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        session_id = (await client.post("/sessions", headers=user)).json()["sessionId"]
        assert (await client.get("/sessions", headers=user)).status_code == 429
        sent = await client.post(f"/messages/{session_id}", headers=user, json={"message": "hi"})
        assert sent.status_code == 200


@pytest.mark.parametrize(
    ("env", "turns", "reads"),
    [
        ({}, 20, 300),
        ({"THROTTLE_LIMIT": "50"}, 50, 50),
        ({"THROTTLE_LIMIT": "50", "THROTTLE_TURN_LIMIT": "5"}, 5, 50),
        ({"THROTTLE_READ_LIMIT": "1000"}, 20, 1000),
    ],
)
def test_the_class_limits_and_their_defaults(env: dict[str, str], turns: int, reads: int) -> None:
    settings = load_settings({"ORACLE_BACKEND": "local", **env})
    assert (settings.turn_limit, settings.read_limit) == (turns, reads)


@pytest.mark.parametrize("variable", ["THROTTLE_TURN_LIMIT", "THROTTLE_READ_LIMIT"])
def test_a_class_limit_below_one_is_refused(variable: str) -> None:
    with pytest.raises(EnvValidationError, match=variable):
        load_settings({"ORACLE_BACKEND": "local", variable: "0"})
