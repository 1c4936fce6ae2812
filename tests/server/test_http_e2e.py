"""The oracle over real Hypercorn on loopback, with an OpenAI-compatible model double.

Covers a multi-turn conversation through the meta-tools read by ports of both client SSE
parsers, persistence across a restart, abort mid-stream, double texting, rate limits, and
that one user can reach nothing of another's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server.testing import (
    PER_READ_ACCEPTED_EVENTS,
    OpenAIDouble,
    PerReadSseParser,
    PersistentSseParser,
    SseEvent,
    ToolCalls,
    auth_headers,
)
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


async def new_session(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.post("/sessions", headers=headers)
    assert response.status_code == 201
    session_id: str = response.json()["sessionId"]
    return session_id


async def stream_turn(
    client: httpx.AsyncClient, session_id: str, headers: dict[str, str], text: str
) -> tuple[httpx.Response, list[str]]:
    body = {"message": text, "stream": True}
    async with client.stream(
        "POST", f"/messages/{session_id}", headers=headers, json=body
    ) as response:
        chunks = [chunk async for chunk in response.aiter_text()]
    return response, chunks


async def started(app: OracleApp, session_id: str) -> None:
    """Wait until the session's turn is running."""
    async with asyncio.timeout(10):
        while session_id not in app.state.runner.active:  # noqa: ASYNC110 - polling a dict
            await asyncio.sleep(0.005)


def parse_both(chunks: list[str]) -> list[SseEvent]:
    persistent = PersistentSseParser()
    events = [e for chunk in chunks for e in persistent.feed(chunk)] + persistent.end()
    per_read = PerReadSseParser()
    legacy = [e for chunk in chunks for e in per_read.feed(chunk)]
    # Whole frames per write: the 1.1.x parser, which resets per read, sees them all
    # (all it knows: the `run` frame is newer than it).
    known = [(e.event, e.data) for e in events if e.event in PER_READ_ACCEPTED_EVENTS]
    assert [(e.event, e.data) for e in legacy] == known
    assert events[0].event == "run"
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    return events[1:]


async def test_conversation_through_the_meta_tools_over_sse(
    serve: Serve, llm: OpenAIDouble
) -> None:
    llm.add_steps(
        ToolCalls([("list_capabilities", {})]),
        ToolCalls([("load_capability", {"names": ["weather"]})]),
        ToolCalls([("get_weather", {"city": "Paris"})]),
        "It is 21 degrees in Paris.",
        ToolCalls([("get_weather", {"city": "Rome"})]),
        "Rome is 21 degrees too.",
    )
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await new_session(client, headers)

        response, chunks = await stream_turn(client, session_id, headers, "Weather in Paris?")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-request-id"]
        events = parse_both(chunks)
        names = [e.event for e in events]
        assert names[0] == "reasoning"
        assert names[-1] == "done"
        assert events[-1].data["status"] == "finished"
        calls = [(e.data["toolName"], e.data["status"]) for e in events if e.event == "tool_call"]
        assert calls == [
            ("list_capabilities", "isRunning"),
            ("list_capabilities", "done"),
            ("load_capability", "isRunning"),
            ("load_capability", "done"),
            ("get_weather", "isRunning"),
            ("get_weather", "done"),
        ]
        weather_done = [e for e in events if e.event == "tool_call" and e.data["status"] == "done"][
            -1
        ]
        assert json.loads(weather_done.data["output"]) == {"city": "Paris", "celsius": 21}
        text = "".join(e.data["content"] for e in events if e.event == "message")
        assert text == "It is 21 degrees in Paris."
        # The gate: the on-demand tool was invisible until it was loaded.
        assert "get_weather" not in llm.requests[0].tool_names
        assert "get_weather" in llm.requests[2].tool_names

        response, chunks = await stream_turn(client, session_id, headers, "And Rome?")
        events = parse_both(chunks)
        assert "get_weather" in llm.requests[4].tool_names  # loaded_plugins persisted
        text = "".join(e.data["content"] for e in events if e.event == "message")
        assert text == "Rome is 21 degrees too."

        history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
        kinds = [(m["type"], m["content"]) for m in history["messages"] if m["content"]]
        assert kinds == [
            ("human", "Weather in Paris?"),
            ("ai", "It is 21 degrees in Paris."),
            ("human", "And Rome?"),
            ("ai", "Rome is 21 degrees too."),
        ]
        folded = [c for m in history["messages"] for c in m.get("toolCalls", [])]
        assert [c["name"] for c in folded] == [
            "list_capabilities",
            "load_capability",
            "get_weather",
            "get_weather",
        ]
        assert all(c["status"] == "done" for c in folded)


async def test_conversation_survives_a_restart(serve: Serve, llm: OpenAIDouble) -> None:
    llm.add_steps(
        ToolCalls([("load_capability", {"names": ["weather"]})]),
        "Loaded.",
        "Still here.",
    )
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await new_session(client, headers)
        reply = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "load weather"}
        )
        assert reply.json()["message"]["content"] == "Loaded."
        oracle_did = app.state.oracle_did
    # A new process on the same data directory: same oracle key, same sessions, same threads.
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        assert app.state.oracle_did == oracle_did
        headers = auth_headers(user, oracle_did)
        sessions = (await client.get("/sessions", headers=headers)).json()
        assert [s["sessionId"] for s in sessions["sessions"]] == [session_id]
        history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
        assert [m["content"] for m in history["messages"] if m["type"] == "human"] == [
            "load weather"
        ]
        reply = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "still there?"}
        )
        assert reply.json()["message"]["content"] == "Still here."
        # loaded_plugins came back from the checkpoint: the tool is visible at once.
        assert "get_weather" in llm.requests[-1].tool_names


async def test_abort_mid_stream_keeps_what_was_checkpointed(
    serve: Serve, llm: OpenAIDouble
) -> None:
    slow = OpenAIDouble(["word " * 400], chunk_size=4, delay_between_chunks=0.01)
    await slow.start()
    try:
        user = Ed25519Signer.generate()
        async with (
            serve(**slow.env()) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            session_id = await new_session(client, headers)
            parser = PersistentSseParser()
            events: list[SseEvent] = []
            aborted = None
            async with client.stream(
                "POST",
                f"/messages/{session_id}",
                headers=headers,
                json={"message": "talk a lot", "stream": True},
            ) as response:
                async for chunk in response.aiter_text():
                    events.extend(parser.feed(chunk))
                    if aborted is None and any(e.event == "message" for e in events):
                        aborted = await client.post(
                            "/messages/abort", headers=headers, json={"sessionId": session_id}
                        )
            events.extend(parser.end())
            assert aborted is not None
            assert aborted.json() == {"success": True}
            assert events[-1].event == "done"
            assert events[-1].data["status"] == "aborted"
            streamed = "".join(e.data["content"] for e in events if e.event == "message")
            assert 0 < len(streamed) < len("word " * 400)
            again = await client.post(
                "/messages/abort", headers=headers, json={"sessionId": session_id}
            )
            assert again.json() == {"success": False}
            history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
            assert [m["content"] for m in history["messages"]][:1] == ["talk a lot"]
    finally:
        await slow.stop()


async def test_double_texting_rejects_or_enqueues(serve: Serve) -> None:
    slow = OpenAIDouble(
        ["first answer " * 30, "second answer"], chunk_size=8, delay_between_chunks=0.005
    )
    await slow.start()
    try:
        user = Ed25519Signer.generate()
        async with (
            serve(SESSION_CONCURRENCY_POLICY="reject", **slow.env()) as (
                app,
                base_url,
            ),
            httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            session_id = await new_session(client, headers)
            first = asyncio.create_task(
                client.post(f"/messages/{session_id}", headers=headers, json={"message": "one"})
            )
            await started(app, session_id)
            second = await client.post(
                f"/messages/{session_id}", headers=headers, json={"message": "two"}
            )
            assert second.status_code == 409
            assert second.json()["message"] == "A turn is already running for this session"
            assert (await first).status_code == 200

        enqueue = OpenAIDouble(["first " * 30, "second"], chunk_size=8, delay_between_chunks=0.005)
        await enqueue.start()
        try:
            async with (
                serve(**enqueue.env()) as (app, base_url),
                httpx.AsyncClient(base_url=base_url, timeout=30) as client,
            ):
                headers = auth_headers(user, app.state.oracle_did)
                session_id = await new_session(client, headers)
                first = asyncio.create_task(
                    client.post(f"/messages/{session_id}", headers=headers, json={"message": "one"})
                )
                await started(app, session_id)
                second = await client.post(
                    f"/messages/{session_id}", headers=headers, json={"message": "two"}
                )
                assert second.status_code == 200
                assert second.json()["message"]["content"] == "second"
                assert (await first).json()["message"]["content"] == "first " * 30
                # The second turn saw the first one's answer: they ran one after the other.
                assert any(m.get("content") == "first " * 30 for m in enqueue.requests[1].messages)
        finally:
            await enqueue.stop()
    finally:
        await slow.stop()


async def test_rate_limit_answers_429(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with (
        serve(THROTTLE_LIMIT="3") as (app, base_url),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        statuses = [(await client.get("/sessions", headers=headers)).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        refused = await client.get("/sessions", headers=headers)
        assert refused.json()["message"] == "ThrottlerException: Too Many Requests"
        assert int(refused.headers["retry-after"]) >= 1
        # Another user has their own budget.
        other = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        assert (await client.get("/sessions", headers=other)).status_code == 200


async def test_another_users_session_is_unreachable_on_every_route(
    serve: Serve, llm: OpenAIDouble
) -> None:
    llm.add_steps("Private answer.")
    owner, stranger = Ed25519Signer.generate(), Ed25519Signer.generate()
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        mine = auth_headers(owner, app.state.oracle_did)
        theirs = auth_headers(stranger, app.state.oracle_did)
        session_id = await new_session(client, mine)
        await client.post(f"/messages/{session_id}", headers=mine, json={"message": "secret"})

        listed = (await client.get("/sessions", headers=theirs)).json()
        assert listed == {"sessions": [], "total": 0}
        for method, path, body in (
            ("GET", f"/messages/{session_id}", None),
            ("POST", f"/messages/{session_id}", {"message": "let me in"}),
            ("DELETE", f"/sessions/{session_id}", None),
        ):
            response = await client.request(method, path, headers=theirs, json=body)
            assert response.status_code == 404, (method, path)
            assert response.json()["message"] == "Session not found"
        aborted = await client.post(
            "/messages/abort", headers=theirs, json={"sessionId": session_id}
        )
        assert aborted.json() == {"success": False}
        # The stranger's checkpointer has no trace of the owner's thread.
        theirs_saver = await app.state.checkpointers(stranger.did())
        assert await theirs_saver.aget_tuple({"configurable": {"thread_id": session_id}}) is None
        # The owner still has everything.
        history = (await client.get(f"/messages/{session_id}", headers=mine)).json()
        assert [m["content"] for m in history["messages"]] == ["secret", "Private answer."]
        assert llm.requests[-1].last_user_text == "secret"


async def test_errors_are_json_with_cors_and_request_id(serve: Serve) -> None:
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        origin = {"Origin": "https://portal.example"}
        missing = await client.post("/sessions", headers=origin)
        assert missing.status_code == 401
        assert missing.json()["statusCode"] == 401
        assert missing.headers["access-control-allow-origin"] == "*"
        assert missing.headers["x-request-id"]
        unknown = await client.get("/no/such/route")
        assert unknown.status_code == 404
        assert unknown.json()["message"] == "Cannot GET /no/such/route"
        preflight = await client.options(
            "/sessions",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,x-auth-type",
            },
        )
        assert preflight.status_code == 200
        headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        session_id = await new_session(client, headers)
        invalid = await client.post(f"/messages/{session_id}", headers=headers, json={})
        assert invalid.status_code == 400
        assert isinstance(invalid.json()["message"], list)
        unknown_field = await client.post(
            f"/messages/{session_id}", headers=headers, json={"message": "x", "bogus": 1}
        )
        assert unknown_field.status_code == 400
        big = await client.post(
            f"/messages/{session_id}",
            headers={**headers, "Content-Type": "application/json"},
            content=b'{"message": "' + b"x" * (2 * 1024 * 1024) + b'"}',
        )
        assert big.status_code == 413
        echoed = await client.get("/health", headers={"x-request-id": "my-id.1"})
        assert echoed.headers["x-request-id"] == "my-id.1"


def _unused(value: Any) -> None:
    del value


async def _first_request(double: OpenAIDouble) -> None:
    async with asyncio.timeout(10):
        while not double.requests:  # noqa: ASYNC110 - polling the double's log
            await asyncio.sleep(0.005)


@pytest.mark.parametrize(
    ("where", "strategy", "history_of_second"),
    [
        ("request", "interrupt", ["one", "two"]),
        ("request", "rollback", ["two"]),
        ("deployment", "interrupt", ["one", "two"]),
        ("deployment", "rollback", ["two"]),
    ],
)
async def test_double_texting_interrupts_or_rolls_back_the_running_turn(
    serve: Serve, where: str, strategy: str, history_of_second: list[str]
) -> None:
    slow = OpenAIDouble(
        ["first answer " * 400, "second answer"], chunk_size=8, delay_between_chunks=0.01
    )
    await slow.start()
    policy = {"SESSION_CONCURRENCY_POLICY": strategy} if where == "deployment" else {}
    body: dict[str, Any] = {"message": "two"}
    if where == "request":
        body["multitaskStrategy"] = strategy
    try:
        user = Ed25519Signer.generate()
        async with (
            serve(**policy, **slow.env()) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            session_id = await new_session(client, headers)
            first = asyncio.create_task(
                client.post(f"/messages/{session_id}", headers=headers, json={"message": "one"})
            )
            await _first_request(slow)
            second = await client.post(f"/messages/{session_id}", headers=headers, json=body)
            await first
            history = (await client.get(f"/messages/{session_id}", headers=headers)).json()
    finally:
        await slow.stop()

    assert second.status_code == 200, second.text
    assert second.json()["message"]["content"] == "second answer"
    # What the second turn's model saw: the first message kept (interrupt) or not (rollback).
    seen = [m["content"] for m in slow.requests[1].messages if m.get("role") == "user"]
    assert seen == history_of_second
    assert [m["content"] for m in history["messages"]] == [*history_of_second, "second answer"]
    assert not any("first answer" in str(m.get("content")) for m in slow.requests[1].messages)


async def test_a_sessions_own_policy_holds_for_its_messages(serve: Serve) -> None:
    slow = OpenAIDouble(
        ["first answer " * 400, "second answer"], chunk_size=8, delay_between_chunks=0.01
    )
    await slow.start()
    try:
        user = Ed25519Signer.generate()
        async with (
            serve(SESSION_CONCURRENCY_POLICY="reject", **slow.env()) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=30) as client,
        ):
            headers = auth_headers(user, app.state.oracle_did)
            session_id = await new_session(client, headers)
            bad = await client.patch(
                f"/sessions/{session_id}", headers=headers, json={"multitaskStrategy": "later"}
            )
            other = await client.patch(
                "/sessions/unknown", headers=headers, json={"multitaskStrategy": "rollback"}
            )
            patched = await client.patch(
                f"/sessions/{session_id}", headers=headers, json={"multitaskStrategy": "rollback"}
            )
            listed = (await client.get("/sessions", headers=headers)).json()
            first = asyncio.create_task(
                client.post(f"/messages/{session_id}", headers=headers, json={"message": "one"})
            )
            await _first_request(slow)
            second = await client.post(
                f"/messages/{session_id}", headers=headers, json={"message": "two"}
            )
            await first
            cleared = await client.patch(
                f"/sessions/{session_id}", headers=headers, json={"multitaskStrategy": None}
            )
    finally:
        await slow.stop()

    assert bad.status_code == 400
    assert other.status_code == 404
    assert patched.status_code == 200, patched.text
    assert patched.json()["multitaskStrategy"] == "rollback"
    assert listed["sessions"][0]["multitaskStrategy"] == "rollback"
    # The deployment rejects; the session's own policy rolled the first turn back.
    assert second.status_code == 200, second.text
    assert [m["content"] for m in slow.requests[1].messages if m.get("role") == "user"] == ["two"]
    assert "multitaskStrategy" not in cleared.json()
