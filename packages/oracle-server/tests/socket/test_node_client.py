"""The gateway with Node ``socket.io-client@4.8.4``, configured as the client SDK does (SRV-70 a).

``js/socket_client.mjs`` connects with ``query.sessionId`` (+ ``userDid``) and
``auth.invocation`` / ``auth.ucanDelegation`` over the websocket transport only, and
answers ``browser_tool_call`` / ``action_call`` the way the SDK's handlers do.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext
from oracle_plugins.agui import AguiPlugin
from oracle_plugins.portal import PortalPlugin
from oracle_server.testing import (
    NodeSocketClient,
    OracleUser,
    RunningOracle,
    StartOracle,
    Step,
    ToolCalls,
    delegating,
)

OPEN_PANEL = {
    "name": "open_panel",
    "description": "Open a panel of the app.",
    "schema": {"type": "object", "properties": {"panel": {"type": "string"}}},
}
PAGE_TITLE_TOOL = {
    "name": "get_page_title",
    "description": "The title of the page the user is looking at.",
    "schema": {"type": "object", "properties": {}},
}


def _portal(inner_reply: str, reply: str) -> list[Step]:
    inner = ToolCalls([("get_page_title", {})], ids=("b1",))
    return delegating("portal", "call_portal_agent", inner, inner_reply, reply)


async def _sdk_client(
    oracle: RunningOracle, node: str, user: OracleUser, session_id: str, **answers: Any
) -> NodeSocketClient:
    client = await oracle.node_client(
        node,
        {
            "query": {"sessionId": session_id, "userDid": user.did},
            "auth": {"invocation": user.invocation()},
            **answers,
        },
    )
    await client.wait_for("connected")
    return client


async def test_browser_tool_round_trip_with_the_sdk_socket_client(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle(_portal("The page is My Page.", "done"), plugins=[PortalPlugin()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node,
        {
            "query": {"sessionId": session_id, "userDid": user.did},
            "auth": {"invocation": user.invocation()},
            "browserTools": {"get_page_title": {"result": "My Page"}},
        },
    )
    [connected] = await client.wait_for("connected")

    response = await oracle.send_message(
        user, session_id, "What page am I on?", tools=[PAGE_TITLE_TOOL]
    )

    assert connected["data"]["message"] == "Connected successfully"
    assert connected["data"]["sessionId"] == session_id
    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "done"
    [call] = await client.wait_for("browser_tool_call")
    # The id the server issued for the call, which the SDK echoes in its `tool_result`.
    call_id = call["data"]["toolCallId"]
    assert call_id.startswith("tc_")
    assert call["data"] == {
        "sessionId": session_id,
        "requestId": call_id,
        "toolCallId": call_id,
        "toolName": "get_page_title",
        "args": {},
    }
    assert oracle.tool_result("b1") == "My Page"
    assert oracle.tool_result("agent_1") == "The page is My Page."


async def test_the_sdk_clients_error_answer_fails_the_browser_tool(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle(_portal("No tab.", "Sorry."), plugins=[PortalPlugin()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    await _sdk_client(
        oracle, node, user, session_id, browserTools={"get_page_title": {"error": "No tab open"}}
    )

    response = await oracle.send_message(user, session_id, "Title?", tools=[PAGE_TITLE_TOOL])

    assert response.status_code == 200, response.text
    assert oracle.tool_result("b1") == "No tab open"


async def test_an_answer_after_the_timeout_is_dropped_and_the_tool_says_so(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle(
        _portal("It did not answer.", "Sorry."),
        env={"FRONTEND_TOOL_TIMEOUT_MS": "300"},
        plugins=[PortalPlugin()],
    )
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await _sdk_client(
        oracle,
        node,
        user,
        session_id,
        browserTools={"get_page_title": {"result": "Late", "delayMs": 900}},
    )

    response = await oracle.send_message(user, session_id, "Title?", tools=[PAGE_TITLE_TOOL])
    [late] = await client.wait_for("answered")

    assert response.status_code == 200, response.text
    assert oracle.tool_result("b1").startswith("Browser tool timeout after 300ms: get_page_title.")
    assert late["data"]["result"] == "Late"
    assert "Late" not in response.text


async def test_another_socket_of_the_session_cannot_settle_the_call(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle(
        _portal("Got the title.", "done"),
        env={"FRONTEND_TOOL_TIMEOUT_MS": "5000"},
        plugins=[PortalPlugin()],
    )
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    other_tab = await _sdk_client(oracle, node, user, session_id)
    # The newest socket takes the call; it answers only after the other tab tried.
    target = await _sdk_client(
        oracle,
        node,
        user,
        session_id,
        browserTools={"get_page_title": {"result": "Real title", "delayMs": 600}},
    )

    sending = asyncio.create_task(
        oracle.send_message(user, session_id, "Title?", tools=[PAGE_TITLE_TOOL])
    )
    [call] = await target.wait_for("browser_tool_call")
    forged = {"toolCallId": call["data"]["toolCallId"], "result": "Forged"}
    await other_tab.emit("tool_result", forged)
    response = await sending

    assert response.status_code == 200, response.text
    assert other_tab.records.named("browser_tool_call") == []
    assert oracle.tool_result("b1") == "Real title"


async def test_bad_auth_gives_the_client_connect_error(oracle: RunningOracle, node: str) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node,
        {"query": {"sessionId": session_id}, "auth": {"invocation": "bm90LWEtdWNhbg"}},
    )

    [error] = await client.wait_for("connect_error")

    assert error["message"] == "unauthorized"
    assert client.records.named("connect") == []
    assert oracle.gateway.connection_count == 0


async def test_the_sdks_delegation_only_auth_connects(oracle: RunningOracle, node: str) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node,
        {
            "query": {"sessionId": session_id, "userDid": user.did},
            "auth": {"ucanDelegation": user.delegation()},
        },
    )

    [connected] = await client.wait_for("connected")

    assert connected["data"]["sessionId"] == session_id
    assert len(client.records.named("connect")) == 1


class _NoArgs(BaseModel):
    pass


class RouterAnnouncer(OraclePlugin):
    """Emits a router update from a tool."""

    name = "router-announcer"
    version = "1.0.0"
    manifest = {
        "title": "Router announcer",
        "summary": "Reports routing.",
        "when_to_use": ["When asked to route"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            PluginTool(
                name="route",
                description="Report the routing.",
                args_schema=_NoArgs,
                handler=self.route,
            )
        ]

    def route(self, args: _NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        assert rt_ctx.emit is not None
        rt_ctx.emit.router({"step": "preloaded", "eventId": "r1"})
        return "routed"


async def test_plugin_events_reach_the_sdks_catch_all_handler_as_envelopes(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle([ToolCalls([("route", {})]), "done"], plugins=[RouterAnnouncer()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node, {"query": {"sessionId": session_id}, "auth": {"invocation": user.invocation()}}
    )
    await client.wait_for("connected")

    response = await oracle.send_message(user, session_id, "route", request_id="req-node-1")

    assert response.status_code == 200, response.text
    [event] = await client.wait_for("any")
    assert event == {
        "name": "router.update",
        "args": [
            {
                "eventName": "router.update",
                "payload": {
                    "sessionId": session_id,
                    "requestId": "req-node-1",
                    "step": "preloaded",
                    "eventId": "r1",
                },
            }
        ],
    }


async def test_an_ag_ui_action_with_the_sdk_socket_client(
    start_oracle: StartOracle, node: str
) -> None:
    steps = delegating(
        "agui",
        "call_ag-ui_agent",
        ToolCalls([("open_panel", {"panel": "settings"})], ids=("a1",)),
        "Opened settings.",
        "Opened.",
    )
    oracle = await start_oracle(steps, plugins=[AguiPlugin()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await _sdk_client(
        oracle,
        node,
        user,
        session_id,
        actions={"open_panel": {"result": {"success": True, "panel": "settings"}}},
    )

    response = await oracle.send_message(
        user, session_id, "Open settings", agActions=[OPEN_PANEL], request_id="req-n1"
    )

    assert response.status_code == 200, response.text
    [call] = await client.wait_for("action_call")
    assert call["data"]["status"] == "isRunning"
    assert call["data"]["toolCallId"].startswith("ag_req-n1_")
    assert json.loads(oracle.tool_result("a1")) == {"success": True, "panel": "settings"}


async def test_an_unknown_action_answer_from_the_sdk_fails_the_tool(
    start_oracle: StartOracle, node: str
) -> None:
    steps = delegating(
        "agui",
        "call_ag-ui_agent",
        ToolCalls([("open_panel", {"panel": "x"})], ids=("a1",)),
        "It failed.",
        "Could not.",
    )
    oracle = await start_oracle(steps, plugins=[AguiPlugin()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await _sdk_client(oracle, node, user, session_id)

    response = await oracle.send_message(user, session_id, "Open x", agActions=[OPEN_PANEL])

    assert response.status_code == 200, response.text
    [call] = await client.wait_for("action_call")
    assert call["data"]["args"] == {"panel": "x"}
    # The SDK answers an action it does not know with `success: false`.
    assert oracle.tool_result("a1") == "Unknown action: open_panel"


async def test_shutdown_disconnects_the_client_promptly(oracle: RunningOracle, node: str) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node, {"query": {"sessionId": session_id}, "auth": {"invocation": user.invocation()}}
    )
    await client.wait_for("connected")

    seconds = await oracle.shutdown()

    [disconnect] = await client.wait_for("disconnect")
    assert disconnect["reason"] == "io server disconnect"
    assert seconds < 3
