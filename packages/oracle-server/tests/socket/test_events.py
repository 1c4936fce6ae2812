"""Events both ways through the gateway (SRV-49, 50, 52, 53), over the raw protocol."""

from __future__ import annotations

import asyncio

from oracle_core import OracleEvent
from oracle_server.testing import EVENT_WAIT, Announcer, RunningOracle, StartOracle, ToolCalls


async def test_ping_answers_pong_with_the_session(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)

    await client.emit("ping")

    [pong] = await client.wait_for("pong")
    assert set(pong) == {"timestamp", "sessionId"}
    assert pong["sessionId"] == session_id


async def test_status_counts_sessions_and_connections(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    first, second = await oracle.create_session(user), await oracle.create_session(user)
    client = await oracle.connect(user, first)
    await oracle.connect(user, first)
    await oracle.connect(user, second)

    await client.emit("status")

    [status] = await client.wait_for("status")
    assert status == {
        "connected": True,
        "sessionId": first,
        "activeSessions": 2,
        "totalConnections": 3,
        "timestamp": status["timestamp"],
    }


async def test_subscribe_confirms_the_sockets_own_session(oracle: RunningOracle) -> None:
    user, stranger = oracle.new_user(), oracle.new_user()
    session_id = await oracle.create_session(user)
    foreign = await oracle.create_session(stranger)
    client = await oracle.connect(user, session_id)

    await client.emit("subscribe", {"sessionId": foreign})

    [subscribed] = await client.wait_for("subscribed")
    assert set(subscribed) == {"sessionId", "timestamp"}
    assert subscribed["sessionId"] == session_id
    assert oracle.gateway.sockets_of(foreign) == 0


async def test_list_events_advertises_the_exact_lists(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)

    await client.emit("list-events")

    [events] = await client.wait_for("available-events")
    assert events == {
        "clientEvents": [
            "ping",
            "status",
            "subscribe",
            "list-events",
            "tool_result",
            "action_call_result",
        ],
        "serverEvents": [
            "connected",
            "pong",
            "status",
            "subscribed",
            "available-events",
            "render_component",
            "tool_call",
            "action_call",
            "browser_tool_call",
            "router_update",
            "message_cache_invalidation",
        ],
        "sessionId": session_id,
        "timestamp": events["timestamp"],
    }


async def test_plugin_events_reach_the_session_room_in_the_sdk_shapes(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle([ToolCalls([("announce", {})]), "done"], plugins=[Announcer()])
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    other_session = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)
    bystander = await oracle.connect(user, other_session)
    await bystander.wait_for("connected")

    response = await oracle.send_message(user, session_id, "announce", request_id="req-ws-1")

    assert response.status_code == 200, response.text
    base = {"sessionId": session_id, "requestId": "req-ws-1"}
    [tool_call] = await client.wait_for("tool_call")
    assert tool_call == {
        "eventName": "tool_call",
        "payload": {
            **base,
            "toolName": "search",
            "args": {},
            "status": "isRunning",
            "eventId": "e1",
        },
    }
    [render] = await client.wait_for("render_component")
    assert render == {
        "eventName": "render_component",
        "payload": {**base, "componentName": "Chart", "args": {"x": 1}, "eventId": "e2"},
    }
    # Core's `router` channel travels as `router.update` (the only name the SDK parses).
    [router] = await client.wait_for("router.update")
    assert router == {
        "eventName": "router.update",
        "payload": {**base, "step": "preloaded", "eventId": "e3"},
    }
    [invalidation] = await client.wait_for("message_cache_invalidation")
    assert invalidation == {
        "eventName": "message_cache_invalidation",
        "payload": {**base, "status": "stale", "eventId": "e4"},
    }
    [reasoning] = await client.wait_for("reasoning")
    assert reasoning == {
        "eventName": "reasoning",
        "payload": {**base, "reasoning": "hmm", "isComplete": False},
    }
    # `action_call` is sent bare: the payload itself is the argument.
    [action] = await client.wait_for("action_call")
    assert action == {**base, "toolCallId": "a1", "toolName": "open_panel", "status": "done"}
    # The user's other tab hears of the session's title, and of none of its events.
    await bystander.wait_for("session.title")
    assert [name for name, _ in bystander.records.items] == ["connected", "session.title"]


async def test_events_of_a_session_without_sockets_are_dropped(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle(
        [ToolCalls([("announce", {})]), "done", "again"], plugins=[Announcer()]
    )
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    first = await oracle.send_message(user, session_id, "announce")
    client = await oracle.connect(user, session_id)
    await client.wait_for("connected")
    second = await oracle.send_message(user, session_id, "hello")

    assert (first.status_code, second.status_code) == (200, 200)
    # Nothing was kept for the socket that joined after the events (SRV-53).
    await client.emit("ping")
    await client.wait_for("pong")
    assert [name for name, _ in client.records.items] == ["connected", "pong"]


async def test_the_last_socket_leaving_marks_the_session_idle(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    idle: list[tuple[str, str]] = []
    went_idle = asyncio.Event()

    async def on_idle(session: str, did: str) -> None:
        idle.append((session, did))
        went_idle.set()

    oracle.gateway.on_session_idle(on_idle)
    first = await oracle.connect(user, session_id)
    second = await oracle.connect(user, session_id)
    await second.wait_for("connected")

    await first.close()
    await second.emit("ping")
    await second.wait_for("pong")
    assert idle == []
    assert oracle.gateway.sockets_of(session_id) == 1
    await second.close()
    await asyncio.wait_for(went_idle.wait(), EVENT_WAIT)

    assert idle == [(session_id, user.did)]
    assert oracle.gateway.sockets_of(session_id) == 0


async def test_frames_above_one_mebibyte_are_refused(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)
    await client.wait_for("connected")

    await client.emit("tool_result", {"toolCallId": "big", "result": "x" * (512 * 1024)})
    await client.emit("ping")
    await client.wait_for("pong")
    await client.emit("tool_result", {"toolCallId": "huge", "result": "x" * (1024 * 1024)})

    await asyncio.wait_for(client.closed.wait(), EVENT_WAIT)
    for _ in range(100):
        if oracle.gateway.connection_count == 0:
            break
        await asyncio.sleep(0.02)
    assert oracle.gateway.connection_count == 0


async def test_events_emitted_from_a_worker_thread_are_delivered(oracle: RunningOracle) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)
    client = await oracle.connect(user, session_id)
    await client.wait_for("connected")
    event = OracleEvent(
        name="render_component",
        payload={"componentName": "Map"},
        session_id=session_id,
        request_id="r-thread",
    )

    await asyncio.to_thread(oracle.gateway.broadcast, event)

    [render] = await client.wait_for("render_component")
    assert render == {
        "eventName": "render_component",
        "payload": {"sessionId": session_id, "requestId": "r-thread", "componentName": "Map"},
    }
