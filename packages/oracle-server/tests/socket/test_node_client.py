"""The gateway with Node ``socket.io-client@4.8.4``, configured as the client SDK does (SRV-70 a).

``js/socket_client.mjs`` connects with ``query.sessionId`` (+ ``userDid``) and
``auth.invocation`` / ``auth.ucanDelegation`` over the websocket transport only, and
answers ``browser_tool_call`` / ``action_call`` the way the SDK's handlers do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext
from oracle_server.testing import RunningOracle, StartOracle, ToolCalls

PAGE_TITLE_TOOL = {
    "name": "get_page_title",
    "description": "The title of the page the user is looking at.",
    "schema": {"type": "object", "properties": {}},
}


async def test_browser_tool_round_trip_with_the_sdk_socket_client(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle([ToolCalls([("get_page_title", {})]), "done"])
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
    assert call_id != "call_1"
    assert call["data"] == {
        "sessionId": session_id,
        "requestId": call_id,
        "toolCallId": call_id,
        "toolName": "get_page_title",
        "args": {},
    }
    assert oracle.second_request_tool_message() == "My Page"


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


async def test_an_unknown_action_answer_from_the_sdk_fails_the_tool(
    start_oracle: StartOracle, node: str
) -> None:
    oracle = await start_oracle([ToolCalls([("open_panel", {"panel": "x"})]), "Could not."])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.node_client(
        node, {"query": {"sessionId": session_id}, "auth": {"invocation": user.invocation()}}
    )
    await client.wait_for("connected")
    action = {
        "name": "open_panel",
        "description": "Open a panel of the app.",
        "schema": {"type": "object", "properties": {"panel": {"type": "string"}}},
    }

    response = await oracle.send_message(user, session_id, "Open x", agActions=[action])

    assert response.status_code == 200, response.text
    [call] = await client.wait_for("action_call")
    assert call["data"]["status"] == "isRunning"
    assert call["data"]["args"] == {"panel": "x"}
    assert "Unknown action: open_panel" in oracle.second_request_tool_message()


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
