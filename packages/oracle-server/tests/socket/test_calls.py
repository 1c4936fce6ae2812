"""The gateway's pure parts: event shapes, handshake headers, client answers, waiting calls."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from oracle_core import FrontendCallError, FrontendOutcome, OracleEvent
from oracle_server._socket.calls import CallKind, PendingCalls
from oracle_server._socket.protocol import handshake_headers, socket_message


def _event(name: str, **payload: Any) -> OracleEvent:
    return OracleEvent(name=name, payload=payload, session_id="s1", request_id="r1")


@pytest.mark.parametrize(
    ("name", "wire_name"),
    [
        ("tool_call", "tool_call"),
        ("render_component", "render_component"),
        ("reasoning", "reasoning"),
        ("router", "router.update"),
        ("message_cache_invalidation", "message_cache_invalidation"),
        ("custom.thing", "custom.thing"),
    ],
)
def test_events_other_than_calls_travel_in_the_envelope(name: str, wire_name: str) -> None:
    assert socket_message(_event(name, step="x")) == (
        wire_name,
        {"eventName": wire_name, "payload": {"sessionId": "s1", "requestId": "r1", "step": "x"}},
    )


@pytest.mark.parametrize("name", ["action_call", "browser_tool_call"])
def test_calls_travel_bare_and_their_payload_wins(name: str) -> None:
    event = _event(name, toolCallId="t1", requestId="t1", toolName="n")

    assert socket_message(event) == (
        name,
        {"sessionId": "s1", "requestId": "t1", "toolCallId": "t1", "toolName": "n"},
    )


@pytest.mark.parametrize(
    ("auth", "headers"),
    [
        (None, {}),
        ("a string", {}),
        ({"invocation": "  ", "ucanDelegation": 7}, {}),
        ({"invocation": " inv "}, {"authorization": "Bearer inv", "x-auth-type": "ucan"}),
        ({"ucanDelegation": "del"}, {"x-ucan-delegation": "del"}),
        (
            {"invocation": "inv", "ucanDelegation": "del"},
            {"authorization": "Bearer inv", "x-auth-type": "ucan", "x-ucan-delegation": "del"},
        ),
    ],
)
def test_handshake_auth_maps_to_the_http_headers(auth: Any, headers: dict[str, str]) -> None:
    assert handshake_headers(auth) == headers


async def test_every_call_gets_an_id_of_its_own() -> None:
    pending = PendingCalls()
    first, future = pending.open("s1", "browser_tool", "sid-1")
    second, _ = pending.open("s2", "browser_tool", "sid-2")
    action, _ = pending.open("s2", "action", "sid-2", "req-9")

    assert first != second
    assert re.fullmatch(r"tc_noreq_[0-9a-f]{8}", first)
    assert re.fullmatch(r"ag_req-9_[0-9a-f]{8}", action)
    pending.close(action)
    pending.close(first)
    assert future.cancelled()
    assert first not in pending
    assert len(pending) == 1


async def test_only_the_matching_session_kind_and_socket_settle_a_call() -> None:
    pending = PendingCalls()
    call, future = pending.open("s1", "action", "sid-1")

    def settle(call_id: str, session: str, kind: CallKind, socket: str | None, v: Any) -> bool:
        return pending.settle(
            call_id,
            session_id=session,
            kind=kind,
            socket_id=socket,
            outcome=FrontendOutcome(value=v),
        )

    assert not settle(call, "s2", "action", "sid-1", 1)
    assert not settle(call, "s1", "browser_tool", "sid-1", 1)
    assert not settle("t2", "s1", "action", "sid-1", 1)
    assert not settle(call, "s1", "action", "sid-other", 1)
    assert not settle(call, "s1", "action", None, 1)
    assert settle(call, "s1", "action", "sid-1", 2)
    assert not settle(call, "s1", "action", "sid-1", 3)
    assert await asyncio.wait_for(future, 1) == 2


async def test_a_call_sent_to_the_room_takes_a_forwarded_answer() -> None:
    pending = PendingCalls()
    call, future = pending.open("s1", "browser_tool", None)

    assert pending.settle(
        call, session_id="s1", kind="browser_tool", socket_id=None, outcome=FrontendOutcome(value=5)
    )
    assert await asyncio.wait_for(future, 1) == 5


async def test_a_socket_that_leaves_fails_only_its_own_calls() -> None:
    pending = PendingCalls()
    _, gone = pending.open("s1", "browser_tool", "sid-1")
    _, other = pending.open("s1", "browser_tool", "sid-2")

    pending.fail_socket("sid-1", "left")

    with pytest.raises(FrontendCallError, match=r"^left$"):
        await asyncio.wait_for(gone, 1)
    assert not other.done()
