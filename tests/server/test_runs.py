"""Runs: numbered SSE events in a log, rejoin after a dropped connection, the session's
active run, and (with Redis) rejoin through another replica and a replica that dies."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server.testing import (
    OpenAIDouble,
    PersistentSseParser,
    SseEvent,
    auth_headers,
    free_port,
    redis_url_or_skip,
)
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]
LONG_REPLY = " ".join(f"word{n}" for n in range(120))


def events_of(chunks: list[str]) -> list[SseEvent]:
    parser = PersistentSseParser()
    return [e for chunk in chunks for e in parser.feed(chunk)] + parser.end()


async def read_until(
    response: httpx.Response, stop: Callable[[list[SseEvent]], bool]
) -> list[SseEvent]:
    """Events of a streaming response until ``stop`` holds (then the caller disconnects)."""
    parser = PersistentSseParser()
    seen: list[SseEvent] = []
    async for chunk in response.aiter_text():
        seen += parser.feed(chunk)
        if stop(seen):
            break
    return seen


async def rejoin(
    client: httpx.AsyncClient, run_id: str, after: int, headers: dict[str, str]
) -> tuple[int, list[SseEvent]]:
    async with client.stream(
        "GET", f"/runs/{run_id}", params={"after": after}, headers=headers
    ) as response:
        chunks = [chunk async for chunk in response.aiter_text()]
        return response.status_code, events_of(chunks) if response.status_code == 200 else []


def text_of(events: list[SseEvent]) -> str:
    return "".join(e.data["content"] for e in events if e.event == "message")


@pytest.fixture
async def slow_llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble(
        auto_reply=lambda chat: LONG_REPLY, chunk_size=12, delay_between_chunks=0.01
    ) as double:
        yield double


async def test_a_dropped_stream_is_rejoined_exactly(serve: Serve, slow_llm: OpenAIDouble) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve(**slow_llm.env()) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        body = {"message": "tell me everything", "stream": True}
        async with client.stream(
            "POST", f"/messages/{session}", headers=headers, json=body
        ) as response:
            run_id = response.headers["x-run-id"]
            assert response.headers["x-request-id"]
            first = await read_until(
                response, lambda seen: sum(e.event == "message" for e in seen) >= 3
            )
        assert first[0].event == "run"
        assert first[0].data["runId"] == run_id
        last_id = first[-1].id
        assert last_id is not None

        active = (await client.get(f"/sessions/{session}/run", headers=headers)).json()
        assert active == {"run": {"runId": run_id, "status": "running"}}

        status, rest = await rejoin(client, run_id, last_id, headers)
        assert status == 200
        assert rest[-1].event == "done"
        assert rest[-1].data["status"] == "finished"
        assert [e.id for e in first + rest] == list(range(1, len(first) + len(rest) + 1))
        assert text_of(first + rest) == LONG_REPLY

        # Replay after any N gives exactly the events after N, in order, once.
        _, everything = await rejoin(client, run_id, 0, headers)
        assert [(e.event, e.data) for e in everything] == [(e.event, e.data) for e in first + rest]
        for after in (1, len(everything) // 2, len(everything) - 1):
            _, tail = await rejoin(client, run_id, after, headers)
            assert [e.id for e in tail] == list(range(after + 1, len(everything) + 1))
        # Nothing left to send: one closing frame with the stored status.
        _, closing = await rejoin(client, run_id, len(everything), headers)
        assert [(e.event, e.data["status"]) for e in closing] == [("done", "finished")]

        assert (await client.get(f"/sessions/{session}/run", headers=headers)).json() == {
            "run": None
        }
        stranger = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        assert (await rejoin(client, run_id, 0, stranger))[0] == 404
        assert (await rejoin(client, "no-such-run", 0, headers))[0] == 404
        bad = await client.get(f"/runs/{run_id}", params={"after": "x"}, headers=headers)
        assert bad.status_code == 400


async def test_a_second_message_is_queued_then_runs(serve: Serve, slow_llm: OpenAIDouble) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve(**slow_llm.env()) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]

        async def send(text: str) -> list[SseEvent]:
            body = {"message": text, "stream": True}
            async with client.stream(
                "POST", f"/messages/{session}", headers=headers, json=body
            ) as response:
                return events_of([chunk async for chunk in response.aiter_text()])

        first = asyncio.create_task(send("one"))
        while not app.state.runner.turns_of(session):  # noqa: ASYNC110 - polling a list
            await asyncio.sleep(0.005)
        second = asyncio.create_task(send("two"))
        while len(app.state.runner.turns_of(session)) < 2:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        queued = app.state.runner.turns_of(session)[1]
        assert queued.status == "queued"
        one, two = await first, await second
        assert one[-1].data["status"] == two[-1].data["status"] == "finished"
        assert one[0].data["runId"] != two[0].data["runId"]


async def test_an_aborted_run_ends_with_its_partial_text(
    serve: Serve, slow_llm: OpenAIDouble
) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve(**slow_llm.env()) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=30) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        body = {"message": "go", "stream": True}
        async with client.stream(
            "POST", f"/messages/{session}", headers=headers, json=body
        ) as response:
            run_id = response.headers["x-run-id"]
            await read_until(response, lambda seen: any(e.event == "message" for e in seen))
        abort = await client.post("/messages/abort", headers=headers, json={"sessionId": session})
        assert abort.json() == {"success": True}
        _, events = await rejoin(client, run_id, 0, headers)
        done = events[-1]
        assert done.event == "done"
        assert done.data["status"] == "aborted"
        assert done.data["partialText"] == text_of(events)
        assert LONG_REPLY.startswith(done.data["partialText"])


REPLICA = textwrap.dedent(
    """
    import asyncio, os
    from oracle_server import create_oracle_app

    async def main():
        app = await create_oracle_app(
            {"name": "E2E Oracle"}, env=dict(os.environ), discover_entry_points=False
        )
        await app.listen(int(os.environ["REPLICA_PORT"]))

    asyncio.run(main())
    """
)


async def _wait_listening(port: int) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            try:
                if (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError("the replica never listened")


async def test_rejoin_through_another_replica_and_a_replica_that_dies(
    serve: Serve, slow_llm: OpenAIDouble, base_env: dict[str, str], tmp_path: Path
) -> None:
    shared: dict[str, Any] = {
        "REDIS_URL": redis_url_or_skip(),
        "ORACLE_SIGNING_MNEMONIC": f"replica test {uuid.uuid4()}",
        "RUN_REPLICA_TIMEOUT_SECONDS": "1.5",
        **slow_llm.env(),
    }
    user = Ed25519Signer.generate()
    port = free_port()
    script = tmp_path / "replica.py"
    script.write_text(REPLICA)
    env = {**os.environ, **base_env, **shared, "REPLICA_PORT": str(port)}
    replica = subprocess.Popen(  # noqa: ASYNC220 - a separate process, killed below
        [sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        await _wait_listening(port)
        async with (
            serve(**shared) as (app, base_url),
            httpx.AsyncClient(timeout=30) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            dying = f"http://127.0.0.1:{port}"
            session = (await client.post(f"{dying}/sessions", headers=headers)).json()
            session_id = session["sessionId"]

            # Rejoin a live run on the other replica: the rest arrives from there.
            body = {"message": "first", "stream": True}
            async with client.stream(
                "POST", f"{dying}/messages/{session_id}", headers=headers, json=body
            ) as response:
                run_id = response.headers["x-run-id"]
                seen = await read_until(response, lambda s: any(e.event == "message" for e in s))
            survivor = httpx.AsyncClient(base_url=base_url, timeout=30)
            async with survivor:
                status, rest = await rejoin(survivor, run_id, seen[-1].id or 0, headers)
            assert status == 200
            assert rest[-1].data["status"] == "finished"
            assert text_of(seen + rest) == LONG_REPLY

            # The replica running the next turn is killed: the run ends as interrupted.
            body = {"message": "second", "stream": True}
            async with client.stream(
                "POST", f"{dying}/messages/{session_id}", headers=headers, json=body
            ) as response:
                run_id = response.headers["x-run-id"]
                seen = await read_until(
                    response, lambda s: sum(e.event == "message" for e in s) >= 2
                )
                replica.send_signal(signal.SIGKILL)
            async with httpx.AsyncClient(base_url=base_url, timeout=30) as survivor:
                status, rest = await rejoin(survivor, run_id, seen[-1].id or 0, headers)
                assert status == 200
                assert [e.event for e in rest[-2:]] == ["error", "done"]
                done = rest[-1].data
                assert done["status"] == "interrupted"
                assert done["partialText"] == text_of(seen + rest)
                assert done["partialText"].startswith(text_of(seen))
                active = await survivor.get(f"/sessions/{session_id}/run", headers=headers)
                assert active.json() == {"run": None}
    finally:
        if replica.poll() is None:
            replica.kill()
        replica.wait()
        if replica.stderr is not None:
            replica.stderr.close()
    assert json.dumps(done)  # the done frame was a JSON object
