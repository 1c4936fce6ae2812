"""The oracle with ``DATABASE_URL`` on PostgreSQL: sessions, replies and checkpoints there.

Needs ``ORACLE_TEST_DATABASE_URL``. Users are fresh DIDs, so rows of earlier runs in the
same database never mix in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server.testing import OpenAIDouble, auth_headers
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


async def test_turns_and_history_on_postgresql(serve: Serve, llm: OpenAIDouble) -> None:
    url = os.environ.get("ORACLE_TEST_DATABASE_URL")
    if not url:
        pytest.skip("set ORACLE_TEST_DATABASE_URL to run the PostgreSQL tests")
    llm.add_steps("Stored in PostgreSQL.", "Still there.")
    # One replica, so no message queue (SRV-54 refuses shared mode without one otherwise).
    single_replica = {"DATABASE_URL": url, "ALLOW_SINGLE_REPLICA_POSTGRES": "true"}
    user = Ed25519Signer.generate()
    async with (
        serve(**single_replica) as (app, base_url),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        assert app.state.storage.kind == "postgresql"
        headers = auth_headers(user, app.state.oracle_did)
        session_id = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        reply = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "hello"}
        )
        assert reply.json()["message"]["content"] == "Stored in PostgreSQL."
        oracle_did = app.state.oracle_did
    async with (
        serve(**single_replica) as (app, base_url),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        headers = auth_headers(user, oracle_did)
        listed = (await client.get("/sessions", headers=headers)).json()
        assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
        history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
        assert [m["content"] for m in history["messages"]] == ["hello", "Stored in PostgreSQL."]
        deleted = await client.delete(f"/sessions/{session_id}", headers=headers)
        assert deleted.json() == {"message": "Session deleted successfully"}
        saver = await app.state.checkpointers(user.did())
        assert await saver.aget_tuple({"configurable": {"thread_id": session_id}}) is None
