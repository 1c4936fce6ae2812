"""Faults: the model failing or stalling, a tool raising, a dead MCP server, PostgreSQL
restarting and Redis going away and coming back, each under a served oracle.

Every test checks the same three things: the client gets a clear error (JSON with a stable
``code``, or an SSE ``error`` frame before ``done``), the server stays up (the next request
is answered as usual), and nothing stored before the fault is lost. PostgreSQL and Redis
are the real services behind a `TcpProxy`: cutting every relayed connection and refusing
new ones is what the oracle sees of a restart, without disturbing the service itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy.exc
from pydantic import BaseModel
from reliability.app import SlowLookupPlugin
from sqlalchemy import text

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server import OracleApp, create_oracle_app
from oracle_server._turns.failures import failure_of
from oracle_server.testing import (
    LoopbackServer,
    OpenAIDouble,
    Paced,
    TcpProxy,
    ToolCalls,
    auth_headers,
    redis_url_or_skip,
    serving,
)
from oracle_ucan import ChainVerifier, Ed25519Signer, LocalResolver, delegate, invoke

ORACLE_DID = "did:ixo:ixo1faultsoracle"
MNEMONIC = "faults suite oracle signing mnemonic"

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


class FailingArgs(BaseModel):
    """Arguments of ``failing_tool``."""

    item: str


class FailingToolPlugin(OraclePlugin):
    """``failing_tool``: always raises."""

    name = "failing-tool"
    version = "1.0.0"
    manifest = {
        "title": "Failing tool",
        "summary": "A tool whose backend is broken.",
        "when_to_use": ["The user asks about an item"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """The one tool."""

        @plugin_tool(name="failing_tool", description="Fetch an item.", args_schema=FailingArgs)
        async def failing_tool(args: FailingArgs, rt_ctx: RuntimeContext[Any]) -> str:
            raise RuntimeError("the item backend is broken")

        return [failing_tool]


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


@pytest.fixture
def serve(tmp_path: Path, llm: OpenAIDouble) -> Serve:
    """``async with serve(plugins, **env) as (app, base_url)``: a served local oracle."""

    @asynccontextmanager
    async def run(
        plugins: list[OraclePlugin] | None = None, **env: str
    ) -> AsyncIterator[tuple[OracleApp, str]]:
        app = await create_oracle_app(
            {"name": "Faults"},
            plugins=plugins if plugins is not None else [SlowLookupPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                **llm.env(),
                **env,
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app) as base_url:
            yield app, base_url

    return run


async def frames(
    client: httpx.AsyncClient, headers: dict[str, str], session_id: str, text: str
) -> list[tuple[str, dict[str, Any]]]:
    """A streamed turn's frames, as ``(event, data)``."""
    found: list[tuple[str, dict[str, Any]]] = []
    body = {"message": text, "stream": True}
    async with client.stream(
        "POST", f"/messages/{session_id}", headers=headers, json=body
    ) as response:
        assert response.status_code == 200, await response.aread()
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                found.append((event, json.loads(line.removeprefix("data: "))))
    return found


def contents(history: httpx.Response) -> list[str]:
    """The message texts of a ``GET /messages/{sessionId}`` answer."""
    assert history.status_code == 200, history.text
    return [m["content"] for m in history.json()["messages"]]


async def stored_first_turn(
    client: httpx.AsyncClient, headers: dict[str, str], llm: OpenAIDouble
) -> str:
    """A session with one finished turn (``remember this`` → ``Noted.``); its id."""
    session_id = str((await client.post("/sessions", headers=headers)).json()["sessionId"])
    llm.add_steps("Noted.")
    reply = await client.post(
        f"/messages/{session_id}", headers=headers, json={"message": "remember this"}
    )
    assert reply.status_code == 200, reply.text
    return session_id


def ucan_headers(user: Ed25519Signer) -> dict[str, str]:
    """The user's auth headers for the ixo-mode oracle."""
    auth = invoke(
        user,
        audience=ORACLE_DID,
        capability={"with": user.did(), "can": "*"},
        expiration=int(time.time()) + 600,
    ).to_base64()
    return {"Authorization": f"Bearer {auth}", "X-Auth-Type": "ucan"}


def memory_grant(user: Ed25519Signer) -> str:
    """The user's delegation of ``memory/*`` to the oracle."""
    return delegate(
        user,
        audience=ORACLE_DID,
        capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
        expiration=int(time.time()) + 3600,
    ).to_base64()


def assert_failed_clearly(turn: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The turn ended with an ``error`` frame, then ``done``; the error frame's data."""
    names = [name for name, _ in turn]
    assert names[-1] == "done", names
    assert "error" in names, names
    return next(data for name, data in turn if name == "error")


async def test_model_answering_5xx_fails_the_turn_and_the_session_goes_on(
    serve: Serve, llm: OpenAIDouble
) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve() as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await stored_first_turn(client, headers, llm)
        # The script is empty: every request (and the client's retries) answers 500.
        turn = await frames(client, headers, session_id, "and now?")
        error = assert_failed_clearly(turn)
        assert error["code"] == "turn.model_unavailable"
        assert error["retryable"] is True
        assert "OpenAIDouble" not in error["error"]  # the provider's text stays in the log
        assert llm.errors  # the model did answer 5xx

        llm.add_steps("Back again.")
        after = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "still there?"}
        )
        assert after.json()["message"]["content"] == "Back again."
        history = await client.get(f"/messages/{session_id}", headers=headers)
        assert contents(history)[:2] == ["remember this", "Noted."]
        assert contents(history)[-1] == "Back again."


async def test_a_model_stalled_mid_stream_ends_the_turn_and_the_session_goes_on(
    serve: Serve, llm: OpenAIDouble
) -> None:
    """The stream starts, then nothing more comes. (A stall before the first byte and a
    trickle past the turn deadline are in ``tests/server/test_turn_faults.py``.)"""
    user = Ed25519Signer.generate()
    async with (
        serve(TURN_IDLE_TIMEOUT_SECONDS="1") as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await stored_first_turn(client, headers, llm)
        llm.add_steps(Paced("The first words, then silence for minutes", between_chunks=120))
        turn = await frames(client, headers, session_id, "and now?")
        error = assert_failed_clearly(turn)
        assert error["code"] == "turn.model_timeout"
        assert turn[-1][1]["status"] == "failed"

        app.state.runner.idle_timeout = 60  # a loaded machine must not end the next turn
        llm.add_steps("Back again.")
        after = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "still there?"}
        )
        assert after.json()["message"]["content"] == "Back again."
        history = contents(await client.get(f"/messages/{session_id}", headers=headers))
        assert history[:2] == ["remember this", "Noted."]


async def test_a_tool_that_raises_gives_the_model_an_error_and_the_turn_ends(
    serve: Serve, llm: OpenAIDouble
) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve([FailingToolPlugin()]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await stored_first_turn(client, headers, llm)
        llm.add_steps(ToolCalls([("failing_tool", {"item": "a"})]), "The item is unavailable.")
        turn = await frames(client, headers, session_id, "fetch item a")

        assert turn[-1][0] == "done"
        assert turn[-1][1]["status"] == "finished"
        tool_results = [m for m in llm.requests[-1].messages if m.get("role") == "tool"]
        assert len(tool_results) == 1
        assert "error" in str(tool_results[0]["content"]).lower()
        history = await client.get(f"/messages/{session_id}", headers=headers)
        assert contents(history)[:2] == ["remember this", "Noted."]
        assert contents(history)[-1] == "The item is unavailable."


async def test_an_mcp_server_down_fails_its_tools_not_the_oracle(
    tmp_path: Path, llm: OpenAIDouble
) -> None:
    """The memory plugin's engine (a real MCP server) behind a relay that goes down."""
    user = Ed25519Signer.generate()
    resolver = LocalResolver()
    resolver.register(
        ORACLE_DID, Ed25519Signer.from_mnemonic(MNEMONIC).did().removeprefix("did:key:")
    )
    engine = MemoryEngineDouble(trusted_users=[user.did()], verifier=ChainVerifier(resolver))
    async with engine.running(), LoopbackServer(engine.routes) as engine_server:
        host, port = urlsplit(engine_server.origin).hostname, urlsplit(engine_server.origin).port
        async with TcpProxy(host or "127.0.0.1", port or 80) as proxy:
            engine.origin = proxy.url(engine_server.origin)
            app = await create_oracle_app(
                {"name": "Faults"},
                plugins=[MemoryPlugin()],
                env={
                    "ORACLE_BACKEND": "ixo",
                    "MATRIX_ENABLED": "false",
                    "ORACLE_SIGNING_MNEMONIC": MNEMONIC,
                    "ORACLE_NAME": "Faults",
                    "NETWORK": "devnet",
                    "ORACLE_DID": ORACLE_DID,
                    "ORACLE_ENTITY_DID": "did:ixo:entity:faults",
                    "BLOCKSYNC_GRAPHQL_URL": "http://127.0.0.1:9/graphql",
                    "SECP_MNEMONIC": "unused",
                    "RPC_URL": "http://127.0.0.1:9",
                    "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                    "MEMORY_MCP_URL": engine.mcp_url,
                    "MEMORY_ENGINE_URL": engine.engine_url,
                    **llm.env(),
                },
                discover_entry_points=False,
                skip_graceful_shutdown=True,
            )
            headers = ucan_headers(user)
            async with (
                serving(app) as base_url,
                httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client,
            ):
                stored = await client.post("/delegation", json={"raw": memory_grant(user)})
                assert stored.status_code in (200, 201), stored.text
                session_id = await stored_first_turn(client, {}, llm)
                assert "memory-engine__add_memory" in llm.requests[-1].tool_names

                async with proxy.down():
                    llm.add_steps(
                        ToolCalls([("memory-engine__add_memory", {"name": "n", "content": "c"})]),
                        "I could not save that just now.",
                    )
                    turn = await frames(client, {}, session_id, "remember that too")
                    assert turn[-1][0] == "done"
                    assert turn[-1][1]["status"] == "finished"
                    # The model was told the call failed (the tool is gone or errored).
                    [result] = [m for m in llm.requests[-1].messages[-1:] if m["role"] == "tool"]
                    assert "error" in str(result["content"]).lower()

                llm.add_steps("Saved now.")
                after = await client.post(f"/messages/{session_id}", json={"message": "and now?"})
                assert after.json()["message"]["content"] == "Saved now."
                assert "memory-engine__add_memory" in llm.requests[-1].tool_names
                history = contents(await client.get(f"/messages/{session_id}"))
                assert history[:2] == ["remember this", "Noted."]
                assert history[-1] == "Saved now."


async def test_postgresql_restarted_mid_run(serve: Serve, llm: OpenAIDouble) -> None:
    url = os.environ.get("ORACLE_TEST_DATABASE_URL")
    if not url:
        pytest.skip("set ORACLE_TEST_DATABASE_URL to run the PostgreSQL tests")
    parts = urlsplit(url)
    user = Ed25519Signer.generate()
    async with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        env = {"DATABASE_URL": proxy.url(url), "ALLOW_SINGLE_REPLICA_POSTGRES": "true"}
        async with (
            serve([SlowLookupPlugin()], RELIABILITY_TOOL_SECONDS="0.5", **env) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=60) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            session_id = await stored_first_turn(client, headers, llm)

            llm.add_steps(ToolCalls([("slow_lookup", {"topic": "t"})]), "Looked it up.")
            turn = asyncio.create_task(frames(client, headers, session_id, "look it up"))
            await asyncio.sleep(0.2)  # the turn has started; its tool is running
            async with proxy.down():
                during = await client.get("/sessions", headers=headers)
                assert during.status_code == 503
                assert during.json()["code"] == "service.database_unavailable"
                assert "retry-after" in during.headers
                await asyncio.sleep(1.0)
            ended = await turn
            assert ended[-1][0] == "done"  # finished, or failed with an error frame first
            if ended[-1][1]["status"] != "finished":
                assert_failed_clearly(ended)

            history = contents(await client.get(f"/messages/{session_id}", headers=headers))
            assert history[:2] == ["remember this", "Noted."]
            llm.add_steps("Fine again.")
            after = await client.post(
                f"/messages/{session_id}", headers=headers, json={"message": "ok?"}
            )
            assert after.status_code == 200, after.text
            assert after.json()["message"]["content"] == "Fine again."


async def test_a_database_pool_with_no_connection_free_answers_503(
    serve: Serve, llm: OpenAIDouble
) -> None:
    user = Ed25519Signer.generate()
    env = {"DATABASE_POOL_SIZE": "1", "DATABASE_POOL_TIMEOUT_SECONDS": "0.3"}
    async with (
        serve(**env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await stored_first_turn(client, headers, llm)
        engine = app.state.storage.engine
        # Both connections of the pool (one kept, one for a burst) are taken.
        async with engine.connect() as first, engine.connect() as second:
            await first.execute(text("SELECT 1"))
            await second.execute(text("SELECT 1"))
            busy = await client.get("/delegation", headers=headers)  # stored delegations
            assert busy.status_code == 503, busy.text
            assert busy.json()["code"] == "service.database_unavailable"
            assert "retry-after" in busy.headers
        history = contents(await client.get(f"/messages/{session_id}", headers=headers))
        assert history == ["remember this", "Noted."]
        llm.add_steps("Fine again.")
        after = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "ok?"}
        )
        assert after.json()["message"]["content"] == "Fine again."


def test_a_turn_failed_by_a_saturated_database_is_retryable() -> None:
    failure = failure_of(sqlalchemy.exc.TimeoutError("QueuePool limit reached"))
    assert failure.code == "turn.service_unavailable"
    assert failure.retryable
    assert "QueuePool" not in failure.message


async def test_redis_down_and_back(serve: Serve, llm: OpenAIDouble) -> None:
    url = redis_url_or_skip()
    parts = urlsplit(url)
    user = Ed25519Signer.generate()
    async with (
        TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy,
        serve(REDIS_URL=proxy.url(url)) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await stored_first_turn(client, headers, llm)
        async with proxy.down():
            for during in (
                await client.post(
                    f"/messages/{session_id}", headers=headers, json={"message": "now?"}
                ),
                await client.get(f"/messages/{session_id}", headers=headers),
            ):
                assert during.status_code == 503, during.text
                assert during.json()["code"] == "service.redis_unavailable"
                assert during.headers["retry-after"]

        llm.add_steps("Redis is back.")
        after = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "and now?"}
        )
        assert after.status_code == 200, after.text
        assert after.json()["message"]["content"] == "Redis is back."
        history = contents(await client.get(f"/messages/{session_id}", headers=headers))
        assert history == ["remember this", "Noted.", "and now?", "Redis is back."]
