"""Two replicas on one socket.io message queue and control bus (SRV-54).

Replica A runs the turn; the browser's socket is connected to replica B. Both share Redis
(``REDIS_URL`` and ``SOCKETIO_MESSAGE_QUEUE``) and the database (one SQLite directory, as
replicas share PostgreSQL), each served by Hypercorn on loopback. The client is
python-socketio's ``AsyncClient`` over the websocket transport, as the SDK connects. The
tests need ``ORACLE_TEST_REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
import socketio  # type: ignore[import-untyped]

from oracle_core import OraclePlugin
from oracle_plugins.agui import AguiPlugin
from oracle_plugins.portal import PortalPlugin
from oracle_server import OracleApp
from oracle_server.testing import (
    Announcer,
    EventRecords,
    OpenAIDouble,
    ToolCalls,
    auth_headers,
    delegating,
    redis_url_or_skip,
)
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]
Replicas = tuple[OracleApp, str, OracleApp, str]

WAIT = 10.0
PAGE_TITLE_TOOL = {
    "name": "get_page_title",
    "description": "The title of the page the user is looking at.",
    "schema": {"type": "object", "properties": {}},
}
OPEN_PANEL_ACTION = {
    "name": "open_panel",
    "description": "Open a panel of the app.",
    "schema": {"type": "object", "properties": {"panel": {"type": "string"}}},
}


def shared_env(**extra: str) -> dict[str, str]:
    url = redis_url_or_skip()
    return {
        "REDIS_URL": url,
        "SOCKETIO_MESSAGE_QUEUE": url,
        "ORACLE_SIGNING_MNEMONIC": f"replica bus test {uuid.uuid4()}",
        **extra,
    }


@asynccontextmanager
async def replicas(
    serve: Serve, plugins: list[OraclePlugin] | None = None, env: Mapping[str, str] | None = None
) -> AsyncIterator[Replicas]:
    shared = shared_env(**(env or {}))
    async with (
        serve(plugins, **shared) as (first, first_url),
        serve(plugins, **shared) as (second, second_url),
    ):
        assert first.state.settings.socketio_message_queue
        assert second.state.settings.socketio_message_queue
        yield first, first_url, second, second_url


class BrowserSocket:
    """A socket.io client of one session, recording every event it receives."""

    def __init__(self) -> None:
        self.client = socketio.AsyncClient(reconnection=False)
        self.records = EventRecords()
        self.client.on("*", self._record)

    async def _record(self, event: str, data: Any = None) -> None:
        self.records.add(event, data)

    def named(self, name: str) -> list[Any]:
        return self.records.named(name)

    async def wait_for(self, name: str, count: int = 1) -> list[Any]:
        return await self.records.wait_for(name, count, WAIT)

    async def emit(self, event: str, data: Any) -> None:
        await self.client.emit(event, data)


@asynccontextmanager
async def browser(
    base_url: str, user: Ed25519Signer, oracle_did: str, session_id: str
) -> AsyncIterator[BrowserSocket]:
    socket = BrowserSocket()
    token = auth_headers(user, oracle_did)["Authorization"].removeprefix("Bearer ")
    await socket.client.connect(
        f"{base_url}?sessionId={session_id}",
        transports=["websocket"],
        auth={"invocation": token},
        wait_timeout=WAIT,
    )
    try:
        await socket.wait_for("connected")
        yield socket
    finally:
        await socket.client.disconnect()


async def linked(sender: OracleApp, socket: BrowserSocket, session_id: str) -> None:
    """Wait until an emit from ``sender`` to the session's room reaches ``socket``.

    Delivery is fire-and-forget (SRV-53): a replica's queue listener subscribes in the
    background at boot, so the test first proves the path before it starts a turn.
    """
    assert sender.gateway is not None
    deadline = time.monotonic() + WAIT
    while not socket.named("probe"):
        assert time.monotonic() < deadline, "the rooms of the two replicas never linked"
        await sender.gateway.sio.emit("probe", {}, room=session_id)
        await asyncio.sleep(0.05)


async def new_session(http: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> str:
    created = await http.post(f"{base_url}/sessions", headers=headers)
    assert created.status_code == 201, created.text
    return str(created.json()["sessionId"])


async def test_a_socket_on_b_receives_the_events_of_a_turn_on_a(
    serve: Serve, llm: OpenAIDouble
) -> None:
    llm.add_steps(ToolCalls([("announce", {})]), "done")
    user = Ed25519Signer.generate()
    async with (
        replicas(serve, [Announcer()]) as (first, first_url, second, second_url),
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = auth_headers(user, first.state.oracle_did)
        session_id = await new_session(http, first_url, headers)
        async with browser(second_url, user, second.state.oracle_did, session_id) as socket:
            await linked(first, socket, session_id)
            reply = await http.post(
                f"{first_url}/messages/{session_id}",
                headers={**headers, "x-request-id": "req-bus-1"},
                json={"message": "announce"},
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["message"]["content"] == "done"
            [render] = await socket.wait_for("render_component")
            [action] = await socket.wait_for("action_call")
        # The turn ran on A; B only relayed to its socket.
        assert first.gateway is not None
        assert first.gateway.sockets_of(session_id) == 0
        assert len(llm.requests) == 2
    base = {"sessionId": session_id, "requestId": "req-bus-1"}
    assert render == {
        "eventName": "render_component",
        "payload": {**base, "componentName": "Chart", "args": {"x": 1}, "eventId": "e2"},
    }
    assert action == {**base, "toolCallId": "a1", "toolName": "open_panel", "status": "done"}


@pytest.mark.parametrize(
    ("field", "spec", "args", "call_event", "result_event", "answer", "tool_message"),
    [
        (
            "tools",
            PAGE_TITLE_TOOL,
            {},
            "browser_tool_call",
            "tool_result",
            {"result": "Docs"},
            "Docs",
        ),
        (
            "agActions",
            OPEN_PANEL_ACTION,
            {"panel": "settings"},
            "action_call",
            "action_call_result",
            {"result": {"success": True, "panel": "settings"}},
            json.dumps({"success": True, "panel": "settings"}),
        ),
    ],
    ids=["browser-tool", "ag-ui-action"],
)
async def test_a_client_call_runs_on_a_and_its_result_comes_back_through_b(
    serve: Serve,
    llm: OpenAIDouble,
    field: str,
    spec: dict[str, Any],
    args: dict[str, Any],
    call_event: str,
    result_event: str,
    answer: dict[str, Any],
    tool_message: str,
) -> None:
    capability, agent = ("portal", "call_portal_agent")
    if field == "agActions":
        capability, agent = ("agui", "call_ag-ui_agent")
    inner = ToolCalls([(spec["name"], args)], ids=("client_1",))
    llm.add_steps(*delegating(capability, agent, inner, "Used it.", "done"))
    user = Ed25519Signer.generate()
    async with (
        replicas(serve, [PortalPlugin(), AguiPlugin()]) as (first, first_url, second, second_url),
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = auth_headers(user, first.state.oracle_did)
        session_id = await new_session(http, first_url, headers)
        async with browser(second_url, user, second.state.oracle_did, session_id) as socket:
            await linked(first, socket, session_id)

            async def answer_on_b() -> None:
                [request] = await socket.wait_for(call_event)
                await socket.emit(
                    result_event,
                    {"sessionId": session_id, "toolCallId": request["toolCallId"], **answer},
                )

            answering = asyncio.create_task(answer_on_b())
            reply = await http.post(
                f"{first_url}/messages/{session_id}",
                headers=headers,
                json={"message": "use the client", field: [spec]},
            )
            await answering
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"]["content"] == "done"
    [request] = socket.named(call_event)
    # The id the turn's replica issued, not the model's tool-call id.
    assert request["toolCallId"] not in ("", "call_1")
    # The client's answer, forwarded from B: not the unknown outcome of a timeout.
    [answered] = [
        m["content"]
        for chat in llm.requests
        for m in chat.messages
        if m.get("role") == "tool" and m.get("tool_call_id") == "client_1"
    ]
    assert answered == tool_message


async def _first_message(lines: AsyncIterator[str]) -> None:
    event = None
    async for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "message":
            return


async def _done(lines: AsyncIterator[str]) -> dict[str, Any]:
    event = None
    async for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "done":
            done: dict[str, Any] = json.loads(line.removeprefix("data: "))
            return done
    raise AssertionError("the stream ended without done")


async def test_an_abort_sent_to_b_stops_the_turn_running_on_a(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    slow = OpenAIDouble(["slow " * 400], chunk_size=5, delay_between_chunks=0.02)
    await slow.start()
    user, stranger = Ed25519Signer.generate(), Ed25519Signer.generate()
    try:
        async with (
            replicas(serve, env=slow.env()) as (first, first_url, second, second_url),
            httpx.AsyncClient(timeout=30) as http,
        ):
            headers = auth_headers(user, first.state.oracle_did)
            session_id = await new_session(http, first_url, headers)
            async with http.stream(
                "POST",
                f"{first_url}/messages/{session_id}",
                headers=headers,
                json={"message": "talk slowly", "stream": True},
            ) as stream:
                lines = stream.aiter_lines()
                await asyncio.wait_for(_first_message(lines), WAIT)
                assert session_id in first.state.runner.active
                assert session_id not in second.state.runner.active
                # Only the caller's own turn is aborted, on any replica.
                foreign = await http.post(
                    f"{second_url}/messages/abort",
                    headers=auth_headers(stranger, second.state.oracle_did),
                    json={"sessionId": session_id},
                )
                assert foreign.json() == {"success": False}
                assert session_id in first.state.runner.active
                aborted = await http.post(
                    f"{second_url}/messages/abort",
                    headers=auth_headers(user, second.state.oracle_did),
                    json={"sessionId": session_id},
                )
                done = await asyncio.wait_for(_done(lines), WAIT)
            assert aborted.status_code == 200, aborted.text
            assert aborted.json() == {"success": True}
            assert done["status"] == "aborted"
            assert done["aborted"] is True
            assert done["partialText"].startswith("slow")
            # The model was still streaming: the abort cut it short.
            assert len(done["partialText"]) < len("slow " * 400)
            # A answered: nobody waited out the reply timeout.
            assert "controlbus.abort_unanswered" not in caplog.text
    finally:
        await slow.stop()


async def test_an_abort_with_no_running_turn_on_any_replica_fails(serve: Serve) -> None:
    user = Ed25519Signer.generate()
    async with (
        replicas(serve) as (first, first_url, second, second_url),
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = auth_headers(user, first.state.oracle_did)
        session_id = await new_session(http, first_url, headers)
        for base_url, app in ((second_url, second), (first_url, first)):
            answer = await http.post(
                f"{base_url}/messages/abort",
                headers=auth_headers(user, app.state.oracle_did),
                json={"sessionId": session_id},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"success": False}
