"""Handshake of the socket.io gateway (SRV-47, SRV-48), over the raw Socket.IO protocol."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from oracle_server.testing import OracleUser, RunningOracle, StartOracle
from oracle_ucan import Ed25519Signer

JS_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def test_handshake_joins_the_session_room_and_sends_connected(
    oracle: RunningOracle,
) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    client = await oracle.connect(user, session_id)

    [connected] = await client.wait_for("connected")
    assert set(connected) == {"message", "sessionId", "timestamp"}
    assert connected["message"] == "Connected successfully"
    assert connected["sessionId"] == session_id
    assert JS_ISO.match(connected["timestamp"])
    # `connected` follows the handshake acknowledgement (consumed by `connect`).
    assert client.packets[0].startswith('42["connected",')
    assert oracle.gateway.sockets_of(session_id) == 1
    assert oracle.gateway.connection_count == 1
    assert client.open_packet["maxPayload"] == 1024 * 1024


async def test_delegation_alone_authenticates_as_the_migration_fallback(
    oracle: RunningOracle,
) -> None:
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    client = await oracle.connect(user, session_id, auth={"ucanDelegation": user.delegation()})

    [connected] = await client.wait_for("connected")
    assert connected["sessionId"] == session_id


async def test_another_users_delegation_next_to_a_valid_invocation_is_ignored(
    oracle: RunningOracle,
) -> None:
    user, stranger = oracle.new_user(), oracle.new_user()
    session_id = await oracle.create_session(user)

    auth = {"invocation": user.invocation(), "ucanDelegation": stranger.delegation()}
    client = await oracle.connect(user, session_id, auth=auth)

    await client.wait_for("connected")


Case = Callable[
    [RunningOracle, OracleUser, OracleUser, str], tuple[str | None, dict[str, Any] | None]
]
"""``(oracle, owner, stranger, owner's session) -> (query sessionId, auth)``."""

REFUSED_CASES: dict[str, Case] = {
    "no session id": lambda o, owner, s, sid: (None, {"invocation": owner.invocation()}),
    "empty session id": lambda o, owner, s, sid: ("", {"invocation": owner.invocation()}),
    "no auth": lambda o, owner, s, sid: (sid, None),
    "empty auth": lambda o, owner, s, sid: (sid, {}),
    "garbage invocation": lambda o, owner, s, sid: (sid, {"invocation": "bm90LWEtdWNhbg"}),
    "invocation for another oracle": lambda o, owner, s, sid: (
        sid,
        {"invocation": owner.invocation(audience=Ed25519Signer.generate().did())},
    ),
    # SRV-41: a failed invocation never falls back to the delegation.
    "bad invocation with a good delegation": lambda o, owner, s, sid: (
        sid,
        {"invocation": "bm90LWEtdWNhbg", "ucanDelegation": owner.delegation()},
    ),
    "garbage delegation": lambda o, owner, s, sid: (sid, {"ucanDelegation": "bm90"}),
    "someone else's session": lambda o, owner, stranger, sid: (
        sid,
        {"invocation": stranger.invocation()},
    ),
    "unknown session": lambda o, owner, s, sid: (
        str(uuid.uuid4()),
        {"invocation": owner.invocation()},
    ),
}


@pytest.mark.parametrize("case", REFUSED_CASES.values(), ids=REFUSED_CASES.keys())
async def test_refused_handshakes_get_connect_error_unauthorized(
    oracle: RunningOracle, case: Case
) -> None:
    owner, stranger = oracle.new_user(), oracle.new_user()
    session_id = await oracle.create_session(owner)
    query_session, auth = case(oracle, owner, stranger, session_id)

    refusal = await oracle.refusal(None, query_session, auth=auth)

    assert refusal == {"message": "unauthorized"}
    assert oracle.gateway.connection_count == 0
    assert oracle.gateway.sockets_of(session_id) == 0


async def test_cors_origin_limits_which_pages_may_open_a_socket(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle(env={"CORS_ORIGIN": "https://portal.example"})
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    with pytest.raises(InvalidStatus) as refused:
        await oracle.connect(user, session_id, origin="https://elsewhere.example")
    client = await oracle.connect(user, session_id, origin="https://portal.example")

    assert refused.value.response.status_code == 403
    await client.wait_for("connected")
