"""Two oracle instances sharing Redis: one rate limit and one turn lock per session.

Both instances also share the database (the same SQLite file), as replicas share
PostgreSQL; the test needs ``ORACLE_TEST_REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import httpx

from oracle_server import OracleApp
from oracle_server.testing import OpenAIDouble, auth_headers, redis_url_or_skip
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


async def test_rate_limit_is_shared_by_replicas(serve: Serve) -> None:
    url = redis_url_or_skip()
    user = Ed25519Signer.generate()
    mnemonic = f"replica test {uuid.uuid4()}"
    shared = {"REDIS_URL": url, "THROTTLE_LIMIT": "4", "ORACLE_SIGNING_MNEMONIC": mnemonic}
    async with serve(**shared) as (first, first_url), serve(**shared) as (second, second_url):
        assert first.state.oracle_did == second.state.oracle_did
        headers = auth_headers(user, first.state.oracle_did)
        async with httpx.AsyncClient() as client:
            statuses = [
                (await client.get(f"{base}/sessions", headers=headers)).status_code
                for base in (first_url, second_url, first_url, second_url, first_url)
            ]
    assert statuses == [200, 200, 200, 200, 429]


async def test_one_turn_per_session_across_replicas(serve: Serve) -> None:
    url = redis_url_or_skip()
    slow = OpenAIDouble(["slow " * 40, "fast"], chunk_size=5, delay_between_chunks=0.01)
    await slow.start()
    try:
        user = Ed25519Signer.generate()
        shared = {
            "REDIS_URL": url,
            "SESSION_CONCURRENCY_POLICY": "reject",
            "ORACLE_SIGNING_MNEMONIC": f"replica test {uuid.uuid4()}",
            **slow.env(),
        }
        async with (
            serve(**shared) as (first, first_url),
            serve(**shared) as (
                _second,
                second_url,
            ),
            httpx.AsyncClient(timeout=30) as client,
        ):
            headers = auth_headers(user, first.state.oracle_did)
            created = await client.post(f"{first_url}/sessions", headers=headers)
            session_id = created.json()["sessionId"]
            running = asyncio.create_task(
                client.post(
                    f"{first_url}/messages/{session_id}", headers=headers, json={"message": "one"}
                )
            )
            async with asyncio.timeout(10):
                while session_id not in first.state.runner.active:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
            refused = await client.post(
                f"{second_url}/messages/{session_id}", headers=headers, json={"message": "two"}
            )
            assert refused.status_code == 409
            assert (await running).status_code == 200
            accepted = await client.post(
                f"{second_url}/messages/{session_id}", headers=headers, json={"message": "two"}
            )
            assert accepted.status_code == 200
            assert accepted.json()["message"]["content"] == "fast"
    finally:
        await slow.stop()
