"""Browser-tool and AG-UI round trips through the gateway (SRV-51, 53).

The gateway's own API (``call_browser_tool`` / ``call_action``) against a raw Socket.IO
client, then whole turns where the portal and AG-UI sub-agents call the client's tools.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from oracle_core import FrontendCallError
from oracle_plugins.agui import AguiPlugin
from oracle_plugins.portal import PortalPlugin
from oracle_server.testing import (
    OracleUser,
    RunningOracle,
    SocketClient,
    StartOracle,
    Step,
    ToolCalls,
    delegating,
)

UNKNOWN = (
    "Outcome unknown: the client may or may not have run it. Do not call it again unless "
    "the user asks; tell the user instead."
)
PORTAL_AGENT = "call_portal_agent"
AGUI_AGENT = "call_ag-ui_agent"
PAGE_TITLE_TOOL = {
    "name": "get_page_title",
    "description": "The title of the page the user is looking at.",
    "schema": {"type": "object", "properties": {}},
}


async def _connected(oracle: RunningOracle) -> tuple[OracleUser, str, SocketClient]:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)
    await client.wait_for("connected")
    return user, session_id, client


async def test_browser_tool_result_returns_to_the_caller(oracle: RunningOracle) -> None:
    _, session_id, client = await _connected(oracle)

    call = asyncio.create_task(
        oracle.gateway.call_browser_tool(session_id, "get_page_title", {"frame": 1})
    )
    [request] = await client.wait_for("browser_tool_call")
    call_id = request["toolCallId"]
    await client.emit("tool_result", {"toolCallId": call_id, "result": {"title": "My Page"}})

    assert await call == {"title": "My Page"}
    assert request == {
        "sessionId": session_id,
        "requestId": call_id,
        "toolCallId": call_id,
        "toolName": "get_page_title",
        "args": {"frame": 1},
    }


async def test_browser_tool_error_fails_the_call_with_its_text(oracle: RunningOracle) -> None:
    _, session_id, client = await _connected(oracle)

    call = asyncio.create_task(
        oracle.gateway.call_browser_tool(session_id, "click", {"selector": "#go"})
    )
    [request] = await client.wait_for("browser_tool_call")
    await client.emit(
        "tool_result", {"toolCallId": request["toolCallId"], "error": "Element not found"}
    )

    with pytest.raises(FrontendCallError, match=r"^Element not found$"):
        await call
    assert request["requestId"] == request["toolCallId"]


async def test_browser_tool_timeout_names_the_limit_and_the_tool(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle(env={"FRONTEND_TOOL_TIMEOUT_MS": "150"})
    _, session_id, client = await _connected(oracle)

    with pytest.raises(FrontendCallError) as by_setting:
        await oracle.gateway.call_browser_tool(session_id, "get_page_title", {})
    with pytest.raises(FrontendCallError) as by_argument:
        await oracle.gateway.call_browser_tool(session_id, "scroll", {}, timeout_ms=50)

    assert str(by_setting.value) == f"Browser tool timeout after 150ms: get_page_title. {UNKNOWN}"
    assert str(by_argument.value) == f"Browser tool timeout after 50ms: scroll. {UNKNOWN}"
    assert len(client.records.named("browser_tool_call")) == 2


async def test_results_from_another_sessions_socket_are_dropped(oracle: RunningOracle) -> None:
    user, session_id, client = await _connected(oracle)
    other_session = await oracle.create_session(user)
    intruder = await oracle.connect(user, other_session)
    await intruder.wait_for("connected")

    call = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "get_page_title", {}))
    [request] = await client.wait_for("browser_tool_call")
    await intruder.emit("tool_result", {"toolCallId": request["toolCallId"], "result": "forged"})
    await intruder.emit("ping")
    await intruder.wait_for("pong")
    await asyncio.sleep(0.05)

    assert not call.done()
    assert intruder.records.named("browser_tool_call") == []
    await client.emit("tool_result", {"toolCallId": request["toolCallId"], "result": "My Page"})
    assert await call == "My Page"


async def test_unknown_settled_and_mismatched_results_are_ignored(
    oracle: RunningOracle,
) -> None:
    _, session_id, client = await _connected(oracle)

    await client.emit("tool_result", {"toolCallId": "nobody-waits", "result": 1})
    await client.emit("tool_result", {"result": "no id"})
    await client.emit("tool_result", "not an object")
    first = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "get_page_title", {}))
    [request] = await client.wait_for("browser_tool_call")
    first_id = request["toolCallId"]
    # An action result never settles a browser tool call.
    await client.emit("action_call_result", {"toolCallId": first_id, "result": "wrong kind"})
    await client.emit("tool_result", {"toolCallId": first_id, "result": "first"})
    assert await first == "first"
    await client.emit("tool_result", {"toolCallId": first_id, "result": "again"})

    second = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "get_page_title", {}))
    second_id = (await client.wait_for("browser_tool_call", count=2))[1]["toolCallId"]
    assert second_id != first_id
    await client.emit("tool_result", {"toolCallId": second_id, "result": "second"})
    assert await second == "second"
    assert not client.closed.is_set()


async def test_action_result_returns_to_the_caller(oracle: RunningOracle) -> None:
    _, session_id, client = await _connected(oracle)

    call = asyncio.create_task(
        oracle.gateway.call_action(session_id, "open_panel", {"panel": "settings"})
    )
    [request] = await client.wait_for("action_call")
    call_id = request["toolCallId"]
    await client.emit(
        "action_call_result",
        {"sessionId": session_id, "toolCallId": call_id, "result": {"success": True, "n": 2}},
    )

    assert await call == {"success": True, "n": 2}
    assert request == {
        "sessionId": session_id,
        "requestId": call_id,
        "toolCallId": call_id,
        "toolName": "open_panel",
        "args": {"panel": "settings"},
        "status": "isRunning",
    }


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"result": {"success": False, "error": "Panel is locked"}}, "Panel is locked"),
        ({"result": {"success": False}}, "Action failed"),
        ({"result": None, "error": "Handler crashed"}, "Handler crashed"),
        (
            {"result": {"success": False, "error": "Unknown action"}, "error": "Unknown action"},
            "Unknown action",
        ),
    ],
    ids=["result error", "no reason", "error field", "sdk unknown action"],
)
async def test_failed_actions_fail_the_call(
    oracle: RunningOracle, answer: dict[str, Any], message: str
) -> None:
    _, session_id, client = await _connected(oracle)

    call = asyncio.create_task(oracle.gateway.call_action(session_id, "open_panel", {}))
    [request] = await client.wait_for("action_call")
    await client.emit(
        "action_call_result",
        {"sessionId": session_id, "toolCallId": request["toolCallId"], **answer},
    )

    with pytest.raises(FrontendCallError) as failed:
        await call
    assert str(failed.value) == message


async def test_action_timeout_names_the_limit_and_the_action(oracle: RunningOracle) -> None:
    _, session_id, _client = await _connected(oracle)

    with pytest.raises(FrontendCallError) as timed_out:
        await oracle.gateway.call_action(session_id, "open_panel", {}, timeout_ms=60)

    assert str(timed_out.value) == f"AG-UI action timeout after 60ms: open_panel. {UNKNOWN}"


async def test_shutdown_fails_waiting_calls_and_closes_sockets(oracle: RunningOracle) -> None:
    _, session_id, client = await _connected(oracle)
    call = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "slow", {}))
    await client.wait_for("browser_tool_call")

    seconds = await oracle.shutdown()

    with pytest.raises(FrontendCallError, match=r"^Server shutting down$"):
        await call
    with pytest.raises(FrontendCallError, match=r"^Server shutting down$"):
        await oracle.gateway.call_action(session_id, "late", {})
    assert client.closed.is_set()
    assert seconds < 3


# -- whole turns, through the portal and agui plugins ----------------------------------


def _through_portal(inner: ToolCalls, inner_reply: str, reply: str) -> list[Step]:
    return delegating("portal", PORTAL_AGENT, inner, inner_reply, reply)


async def test_a_turn_calls_the_clients_browser_tool(start_oracle: StartOracle) -> None:
    oracle = await start_oracle(
        _through_portal(ToolCalls([("get_page_title", {})], ids=("b1",)), "It is Docs.", "done"),
        plugins=[PortalPlugin()],
    )
    user, session_id, client = await _connected(oracle)

    async def answer() -> None:
        [request] = await client.wait_for("browser_tool_call")
        await client.emit("tool_result", {"toolCallId": request["toolCallId"], "result": "Docs"})

    answering = asyncio.create_task(answer())
    response = await oracle.send_message(
        user, session_id, "What page is this?", tools=[PAGE_TITLE_TOOL]
    )
    await answering

    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "done"
    main, sub = oracle.double.requests[1], oracle.double.requests[2]
    assert PORTAL_AGENT in _names(main)
    assert "get_page_title" not in _names(main)
    [offered] = [t for t in sub.tools if t["function"]["name"] == "get_page_title"]
    assert offered["function"]["parameters"]["properties"] == {}
    assert offered["function"]["description"].endswith(PAGE_TITLE_TOOL["description"])
    assert oracle.tool_result("b1") == "Docs"
    assert oracle.tool_result("agent_1") == "It is Docs."
    [request] = client.records.named("browser_tool_call")
    # The server's id for the call, not the model's tool-call id.
    assert re.fullmatch(r"tc_[A-Za-z0-9_-]+_[0-9a-f]{8}", request["toolCallId"])
    # Deleting the session takes the Portal Agent's thread too (a request-time sub-agent).
    agent_thread = f"{session_id}_portal_agent"
    runtime = oracle.app.runtime
    assert await runtime.thread_messages(user.did, agent_thread)
    deleted = await oracle.http.delete(f"/sessions/{session_id}", headers=user.headers())
    assert deleted.status_code == 200, deleted.text
    assert await runtime.thread_messages(user.did, agent_thread) == []


def _names(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.tools]


async def test_a_browser_tool_timeout_becomes_the_tool_message_and_the_turn_finishes(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle(
        _through_portal(
            ToolCalls([("get_page_title", {})], ids=("b1",)),
            "The page did not answer.",
            "Sorry, the page did not answer.",
        ),
        env={"FRONTEND_TOOL_TIMEOUT_MS": "300"},
        plugins=[PortalPlugin()],
    )
    user, session_id, client = await _connected(oracle)

    response = await oracle.send_message(user, session_id, "Title?", tools=[PAGE_TITLE_TOOL])

    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "Sorry, the page did not answer."
    assert oracle.tool_result("b1") == (
        f"Browser tool timeout after 300ms: get_page_title. {UNKNOWN}"
    )
    # Browser tools may change the page: a failed one is never re-run.
    assert len(client.records.named("browser_tool_call")) == 1


async def test_a_browser_tool_error_becomes_the_tool_message(start_oracle: StartOracle) -> None:
    oracle = await start_oracle(
        _through_portal(ToolCalls([("get_page_title", {})], ids=("b1",)), "No tab.", "Sorry."),
        plugins=[PortalPlugin()],
    )
    user, session_id, client = await _connected(oracle)

    async def answer() -> None:
        [request] = await client.wait_for("browser_tool_call")
        await client.emit("tool_result", {"toolCallId": request["toolCallId"], "error": "No tab"})

    answering = asyncio.create_task(answer())
    response = await oracle.send_message(user, session_id, "Title?", tools=[PAGE_TITLE_TOOL])
    await answering

    assert response.status_code == 200, response.text
    assert oracle.tool_result("b1") == "No tab"


async def test_a_turn_runs_the_clients_ag_ui_action(start_oracle: StartOracle) -> None:
    oracle = await start_oracle(
        delegating(
            "agui",
            AGUI_AGENT,
            ToolCalls([("open_panel", {"panel": "settings"})], ids=("a1",)),
            "Opened settings.",
            "Opened.",
        ),
        plugins=[AguiPlugin()],
    )
    user, session_id, client = await _connected(oracle)
    action = {
        "name": "open_panel",
        "description": "Open a panel of the app.",
        "schema": {"type": "object", "properties": {"panel": {"type": "string"}}},
    }

    async def answer() -> None:
        [request] = await client.wait_for("action_call")
        await client.emit(
            "action_call_result",
            {
                "sessionId": session_id,
                "toolCallId": request["toolCallId"],
                "result": {"success": True, "panel": request["args"]["panel"]},
            },
        )

    answering = asyncio.create_task(answer())
    response = await oracle.send_message(
        user, session_id, "Open settings", agActions=[action], request_id="req-7"
    )
    await answering

    assert response.status_code == 200, response.text
    assert json.loads(oracle.tool_result("a1")) == {"success": True, "panel": "settings"}
    [request] = client.records.named("action_call")
    assert re.fullmatch(r"ag_req-7_[0-9a-f]{8}", request["toolCallId"])
