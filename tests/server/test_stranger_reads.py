"""Reads by a user with no data store nothing; their first write creates their storage.

A freshly minted ``did:key`` calls every read route (and the routes that answer 404 for a
session it does not have): nothing appears under ``SQLITE_DATABASE_PATH`` — no user
database, no folder — and in PostgreSQL mode no row and no schema. The first session and
message then work as for anyone. Needs ``ORACLE_TEST_DATABASE_URL`` for the PostgreSQL
case.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from oracle_server import OracleApp
from oracle_server.testing import OpenAIDouble, auth_headers
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


def tree(root: Path) -> dict[str, int | None]:
    """Every path under ``root`` with its size (``None`` for a directory)."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.stat().st_size
        for path in sorted(root.rglob("*"))
        # The server database's own journal changes size whenever SQLite checkpoints it.
        if not path.name.endswith(("-wal", "-shm"))
    }


async def read_everything(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """Every read a client makes before it has a session, and the 404s of a guessed id."""
    missing = str(uuid.uuid4())
    listed = await client.get("/sessions", headers=headers)
    assert (listed.status_code, listed.json()) == (200, {"sessions": [], "total": 0})
    paged = await client.get("/sessions?limit=5&offset=10", headers=headers)
    assert paged.json() == {"sessions": [], "total": 0}
    for method, path in [
        ("GET", f"/messages/{missing}"),
        ("GET", f"/sessions/{missing}/messages"),
        ("GET", f"/sessions/{missing}/run"),
        ("DELETE", f"/sessions/{missing}"),
    ]:
        answer = await client.request(method, path, headers=headers)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["message"] == "Session not found"
    aborted = await client.post("/messages/abort", headers=headers, json={"sessionId": missing})
    assert aborted.json() == {"success": False}


async def first_write_works(
    client: httpx.AsyncClient, headers: dict[str, str], llm: OpenAIDouble
) -> str:
    llm.add_steps("Hello, newcomer.")
    session_id = str((await client.post("/sessions", headers=headers)).json()["sessionId"])
    reply = await client.post(f"/messages/{session_id}", headers=headers, json={"message": "hi"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"]["content"] == "Hello, newcomer."
    listed = (await client.get("/sessions", headers=headers)).json()
    assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
    history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
    assert [m["content"] for m in history["messages"]] == ["hi", "Hello, newcomer."]
    return session_id


async def test_a_strangers_reads_create_no_user_database(
    serve: Serve, llm: OpenAIDouble, base_env: dict[str, str]
) -> None:
    data = Path(base_env["SQLITE_DATABASE_PATH"])
    stranger = Ed25519Signer.generate()
    async with (
        serve() as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(stranger, app.state.oracle_did)
        before = tree(data)
        await read_everything(client, headers)
        assert tree(data) == before
        assert not (data / "user_dbs").exists()

        await first_write_works(client, headers, llm)
        files = list((data / "user_dbs").rglob("*.db"))
        assert len(files) == 1
        assert stranger.did().replace(":", "_") in str(files[0])


async def test_a_strangers_reads_store_nothing_in_postgresql(
    serve: Serve, llm: OpenAIDouble, base_env: dict[str, str]
) -> None:
    url = os.environ.get("ORACLE_TEST_DATABASE_URL")
    if not url:
        pytest.skip("set ORACLE_TEST_DATABASE_URL to run the PostgreSQL tests")
    data = Path(base_env["SQLITE_DATABASE_PATH"])
    stranger = Ed25519Signer.generate()
    engine = create_async_engine(url)

    async def footprint() -> tuple[int, list[str]]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT count(*) FROM oracle_sessions WHERE user_did = :did"),
                {"did": stranger.did()},
            )
            schemas = await conn.execute(
                text("SELECT schema_name FROM information_schema.schemata ORDER BY 1")
            )
            return int(rows.scalar_one()), [str(s) for s in schemas.scalars()]

    single_replica = {"DATABASE_URL": url, "ALLOW_SINGLE_REPLICA_POSTGRES": "true"}
    try:
        async with (
            serve(**single_replica) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=60) as client,
        ):
            headers = auth_headers(stranger, app.state.oracle_did)
            rows, schemas = await footprint()
            files = tree(data)
            await read_everything(client, headers)
            assert await footprint() == (rows, schemas)
            assert rows == 0
            assert tree(data) == files
            assert not (data / "user_dbs").exists()

            await first_write_works(client, headers, llm)
            assert (await footprint())[0] == 1
    finally:
        await engine.dispose()
