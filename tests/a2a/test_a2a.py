"""The A2A endpoint (ORACLE_A2A): the agent card, and messages as turns of the caller,
tested with the official ``a2a-sdk`` client (A2A 1.0) and raw A2A 0.3 JSON-RPC."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, create_client
from a2a.helpers import get_artifact_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import (
    ClockPlugin,
    OpenAIDouble,
    Paced,
    WeatherPlugin,
    auth_headers,
    parse_stream,
    serving,
)
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


@pytest.fixture
def serve(tmp_path: Path, llm: OpenAIDouble) -> Serve:
    @asynccontextmanager
    async def run(**overrides: str) -> AsyncIterator[tuple[OracleApp, str]]:
        app = await create_oracle_app(
            {"name": "Agent Oracle", "description": "Answers questions about the weather."},
            plugins=[ClockPlugin(), WeatherPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "THROTTLE_LIMIT": "1000",
                "ORACLE_A2A": "true",
                **llm.env(),
                **overrides,
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        async with serving(app) as base_url:
            yield app, base_url

    return run


def message(text: str, context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=[Part(text=text)],
            context_id=context_id,
        )
    )


async def test_the_card_is_public_and_lists_the_tier_one_plugins(serve: Serve) -> None:
    async with serve() as (_, base_url), httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        raw = (await http.get(f"{base_url}/.well-known/agent-card.json")).json()

    assert card.name == "Agent Oracle"
    assert card.description == "Answers questions about the weather."
    assert card.capabilities.streaming
    assert {skill.id for skill in card.skills} == {"clock", "weather"}
    weather = next(skill for skill in card.skills if skill.id == "weather")
    assert weather.description == "Weather forecasts for a city."
    assert list(weather.examples) == ["The user asks about the weather"]
    interfaces = {(i.protocol_version, i.url) for i in card.supported_interfaces}
    assert interfaces == {("1.0", f"{base_url}/a2a"), ("0.3", f"{base_url}/a2a")}
    assert raw["protocolVersion"] == "0.3"


async def test_a_message_is_a_turn_of_the_caller_in_their_session(
    serve: Serve, llm: OpenAIDouble
) -> None:
    llm.add_steps("It is sunny in Lisbon.", "Still sunny.")
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            card = await A2ACardResolver(http, base_url).get_agent_card()
            client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
            async with client:
                [first] = [r async for r in client.send_message(message("Weather in Lisbon?"))]
                task = first.task
                [again] = [
                    r async for r in client.send_message(message("And now?", task.context_id))
                ]
                fetched = await client.get_task(GetTaskRequest(id=task.id))
            sessions = (await http.get(f"{base_url}/sessions")).json()

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(task.artifacts[0], delimiter="") == "It is sunny in Lisbon."
    assert fetched.id == task.id
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    # The context is a session of the caller, and the second message continued it.
    assert again.task.context_id == task.context_id
    assert [s["sessionId"] for s in sessions["sessions"]] == [task.context_id]
    assert llm.requests[-1].last_user_text == "And now?"
    said = [m for m in llm.requests[-1].messages if m.get("role") in ("user", "assistant")]
    assert [m["content"] for m in said][:2] == ["Weather in Lisbon?", "It is sunny in Lisbon."]


async def test_a_streamed_task_is_a_run_that_can_be_rejoined(
    serve: Serve, llm: OpenAIDouble
) -> None:
    reply = "Sunny and twenty-one degrees all afternoon."
    llm.add_steps(reply)
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            card = await A2ACardResolver(http, base_url).get_agent_card()
            client = await create_client(card, ClientConfig(httpx_client=http))
            async with client:
                events = [e async for e in client.send_message(message("Weather?"))]
            kinds = [e.WhichOneof("payload") for e in events]
            chunks = [
                part.text
                for e in events
                if e.WhichOneof("payload") == "artifact_update"
                for part in e.artifact_update.artifact.parts
            ]
            working = next(
                e.status_update
                for e in events
                if e.WhichOneof("payload") == "status_update"
                and e.status_update.status.state == TaskState.TASK_STATE_WORKING
            )
            run_id = working.metadata["runId"]
            rejoined = await http.get(f"{base_url}/runs/{run_id}")

    assert kinds[0] == "task"
    assert kinds[-1] == "status_update"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(chunks) > 1  # streamed as the model produced it
    assert "".join(chunks) == reply
    assert working.metadata["sessionId"] == events[0].task.context_id
    assert rejoined.status_code == 200
    frames = parse_stream([rejoined.text], "persistent")
    assert frames[-1].event == "done"
    assert "".join(f.data["content"] for f in frames if f.event == "message") == reply


async def test_callers_are_authenticated_and_kept_apart(serve: Serve, llm: OpenAIDouble) -> None:
    llm.add_steps("Alice's answer.", "Bob's answer.")
    alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
    async with serve() as (app, base_url):
        oracle = app.state.oracle_did
        tasks: dict[str, Any] = {}
        for name, user in (("alice", alice), ("bob", bob)):
            async with httpx.AsyncClient(headers=auth_headers(user, oracle), timeout=30) as http:
                card = await A2ACardResolver(http, base_url).get_agent_card()
                client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
                async with client:
                    # Bob names Alice's context: he gets a session of his own.
                    context = tasks["alice"].context_id if name == "bob" else ""
                    [got] = [r async for r in client.send_message(message("Hi", context))]
                    tasks[name] = got.task
                    if name == "bob":
                        with pytest.raises(Exception, match="not found"):
                            await client.get_task(GetTaskRequest(id=tasks["alice"].id))
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
            async with client:
                with pytest.raises(A2AClientError, match="401"):
                    [r async for r in client.send_message(message("Who am I?"))]

    assert tasks["bob"].context_id != tasks["alice"].context_id
    assert get_artifact_text(tasks["bob"].artifacts[0], delimiter="") == "Bob's answer."


async def test_a2a_0_3_message_send_runs_a_turn(serve: Serve, llm: OpenAIDouble) -> None:
    llm.add_steps("Hello from the oracle.")
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {
                    "message": {
                        "kind": "message",
                        "role": "user",
                        "messageId": "m1",
                        "parts": [{"kind": "text", "text": "Hello?"}],
                    }
                },
            }
            answer = (await http.post(f"{base_url}/a2a", json=body)).json()
            task_id = answer["result"]["id"]
            got = await http.post(
                f"{base_url}/a2a",
                json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}},
            )

    result = answer["result"]
    assert result["kind"] == "task"
    assert result["status"]["state"] == "completed"
    assert "".join(p["text"] for p in result["artifacts"][0]["parts"]) == "Hello from the oracle."
    assert got.json()["result"]["status"]["state"] == "completed"


async def test_cancelling_a_task_aborts_its_turn(serve: Serve, llm: OpenAIDouble) -> None:
    llm.add_steps(Paced("word " * 400, between_chunks=0.02))
    user = Ed25519Signer.generate()
    async with serve() as (app, base_url):
        headers = auth_headers(user, app.state.oracle_did)
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            card = await A2ACardResolver(http, base_url).get_agent_card()
            client = await create_client(card, ClientConfig(httpx_client=http))
            async with client:
                events = client.send_message(message("Talk for a long time."))
                seen = []
                async for event in events:
                    seen.append(event)
                    if event.WhichOneof("payload") == "artifact_update":
                        break
                task_id = seen[0].task.id
                cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
                final = await client.get_task(GetTaskRequest(id=task_id))
                run_id = next(
                    e.status_update.metadata["runId"]
                    for e in seen
                    if e.WhichOneof("payload") == "status_update"
                )
            run = await http.get(f"{base_url}/runs/{run_id}")

    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert final.status.state == TaskState.TASK_STATE_CANCELED
    done = parse_stream([run.text], "persistent")[-1]
    assert (done.event, done.data["status"]) == ("done", "aborted")


async def test_off_unless_enabled(serve: Serve) -> None:
    async with serve(ORACLE_A2A="false") as (_, base_url), httpx.AsyncClient() as http:
        card = await http.get(f"{base_url}/.well-known/agent-card.json")

    assert card.status_code == 404
