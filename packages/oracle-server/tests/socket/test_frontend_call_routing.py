"""Which socket runs a client call, and who may answer it.

Each browser-tool or AG-UI call gets an id issued by the server (in ``toolCallId``, the
field the client echoes) and goes to one socket: the one the turn's earlier calls went
to, else the session's newest. Only that socket settles it. Real Socket.IO clients, two
tabs of one session, and two sessions whose model repeats the tool-call id ``call_0``.
"""

from __future__ import annotations

import asyncio

import pytest

from oracle_core import FrontendCallError
from oracle_plugins.portal import PortalPlugin
from oracle_server.testing import (
    ChatRequest,
    OracleUser,
    RunningOracle,
    SocketClient,
    StartOracle,
    ToolCalls,
)

PAGE_TITLE_TOOL = {
    "name": "get_page_title",
    "description": "The title of the page the user is looking at.",
    "schema": {"type": "object", "properties": {}},
}


async def _tab(oracle: RunningOracle, user: OracleUser, session_id: str) -> SocketClient:
    tab = await oracle.connect(user, session_id)
    await tab.wait_for("connected")
    return tab


async def _settled_nothing(oracle: RunningOracle, tab: SocketClient) -> None:
    """Let the server handle what ``tab`` sent: a ping answered comes after it."""
    await tab.emit("ping")
    await tab.wait_for("pong", count=len(tab.records.named("pong")) + 1)


async def test_a_call_goes_to_the_newest_tab_and_only_it_may_answer(
    oracle: RunningOracle,
) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    older = await _tab(oracle, user, session_id)
    newer = await _tab(oracle, user, session_id)

    call = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "get_page_title", {}))
    [request] = await newer.wait_for("browser_tool_call")
    await older.emit("tool_result", {"toolCallId": request["toolCallId"], "result": "forged"})
    await _settled_nothing(oracle, older)

    assert not call.done()
    assert older.records.named("browser_tool_call") == []
    await newer.emit("tool_result", {"toolCallId": request["toolCallId"], "result": "Docs"})
    assert await call == "Docs"


async def test_a_turns_calls_stay_on_its_socket_when_a_tab_opens(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    first = await _tab(oracle, user, session_id)

    async def run(request_id: str, tab: SocketClient, count: int) -> str:
        call = asyncio.create_task(
            oracle.gateway.call_action(session_id, "open_panel", {}, request_id=request_id)
        )
        request = (await tab.wait_for("action_call", count=count))[-1]
        await tab.emit(
            "action_call_result",
            {"sessionId": session_id, "toolCallId": request["toolCallId"], "result": request_id},
        )
        return str(await call)

    assert await run("turn-1", first, 1) == "turn-1"
    second = await _tab(oracle, user, session_id)
    # The running turn keeps its socket; a new turn takes the newest one.
    assert await run("turn-1", first, 2) == "turn-1"
    assert await run("turn-2", second, 1) == "turn-2"
    assert len(second.records.named("action_call")) == 1


async def test_without_a_socket_the_call_fails_at_once(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    with pytest.raises(FrontendCallError) as failed:
        await oracle.gateway.call_browser_tool(session_id, "get_page_title", {})

    assert str(failed.value) == (
        "ws.no_client: no client of this session is connected, so the browser tool "
        "'get_page_title' did not run."
    )


async def test_a_tab_that_closes_fails_its_call_as_an_unknown_outcome(
    oracle: RunningOracle,
) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    tab = await _tab(oracle, user, session_id)
    call = asyncio.create_task(oracle.gateway.call_browser_tool(session_id, "click", {}))
    await tab.wait_for("browser_tool_call")

    await tab.close()

    with pytest.raises(FrontendCallError) as failed:
        await call
    assert str(failed.value).startswith("ws.client_gone: ")
    assert "Do not call it again unless the user asks" in str(failed.value)


def _portal_turn(request: ChatRequest) -> str | ToolCalls:
    """Each step of a turn through the Portal Agent, decided by the request, so two
    turns running at once may take their steps in any order."""
    last = request.messages[-1]
    sub_agent = "in the user's browser" in str(request.messages[0].get("content"))
    if last.get("role") == "user":
        if sub_agent:
            return ToolCalls([("get_page_title", {})], ids=("call_0",))
        load = ("load_capability", {"names": ["portal"]})
        return ToolCalls([load], ids=("load_1",))
    called = last.get("tool_call_id")
    if called == "load_1":
        user = next(m["content"] for m in request.messages if m.get("role") == "user")
        return ToolCalls([("call_portal_agent", {"task": user})], ids=("agent_1",))
    return "got it" if called == "call_0" else "done"


async def test_two_sessions_whose_model_says_call_0_each_get_their_own_answer(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle([_portal_turn] * 10, plugins=[PortalPlugin()])
    turns = []
    for name in ("first", "second"):
        user = oracle.new_user()
        session_id = await oracle.create_session(user)
        turns.append((name, user, session_id, await _tab(oracle, user, session_id)))

    sends = [
        asyncio.create_task(
            oracle.send_message(user, session_id, f"title for {name}", tools=[PAGE_TITLE_TOOL])
        )
        for name, user, session_id, _ in turns
    ]
    # Both calls wait at once before either is answered.
    requests = [(await tab.wait_for("browser_tool_call"))[0] for *_, tab in turns]
    for (name, *_, tab), request in zip(turns, requests, strict=True):
        await tab.emit("tool_result", {"toolCallId": request["toolCallId"], "result": name})
    responses = await asyncio.gather(*sends)

    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert requests[0]["toolCallId"] != requests[1]["toolCallId"]
    # Each sub-agent's task is its user's message; its browser tool got its own answer.
    answered = {
        next(m["content"] for m in chat.messages if m.get("role") == "user"): chat.messages[-1][
            "content"
        ]
        for chat in oracle.double.requests
        if chat.messages[-1].get("tool_call_id") == "call_0"
    }
    assert answered == {"title for first": "first", "title for second": "second"}
