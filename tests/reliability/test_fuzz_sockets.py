"""Fuzz: any payload on any socket.io event leaves the socket and the server working.

The oracle is served in a thread of its own, so that hypothesis drives it from a plain
test: each example connects a real websocket (Socket.IO v5 over Engine.IO v4), sends one
event with a generated payload, then ``ping``; the answer must be ``pong`` on the same
socket, and no record at ERROR or above may have been logged. ``HYPOTHESIS_PROFILE=chaos``
runs many more examples.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability.threaded import ThreadServedOracle
from websockets.sync.client import ClientConnection, connect

from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import auth_headers
from oracle_ucan import Ed25519Signer

pytestmark = pytest.mark.fuzz

CLIENT_EVENTS = ["ping", "status", "subscribe", "list-events", "tool_result", "action_call_result"]
KNOWN_KEYS = ["toolCallId", "result", "error", "success", "sessionId", "data", "payload"]

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


@asynccontextmanager
async def fuzzed_oracle(data: Path) -> AsyncIterator[OracleApp]:
    """The oracle under fuzz; no model (no turn runs)."""
    app = await create_oracle_app(
        {"name": "Socket Fuzz"},
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(data),
            "THROTTLE_LIMIT": "100000000",
            # Every example is a new handshake from 127.0.0.1.
            "SOCKET_HANDSHAKE_LIMIT": "100000000",
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
        require_llm=False,
    )
    yield app


class ErrorRecords(logging.Handler):
    """Keeps the records at ERROR or above."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """The served oracle's base URL, one user's invocation and a session of that user."""
    served = ThreadServedOracle(partial(fuzzed_oracle, tmp_path_factory.mktemp("socket-fuzz")))
    base_url, oracle_did = served.start()
    try:
        import httpx

        user = Ed25519Signer.generate()
        headers = auth_headers(user, oracle_did, ttl=900)
        session_id = httpx.post(f"{base_url}/sessions", headers=headers).json()["sessionId"]
        invocation = headers["Authorization"].removeprefix("Bearer ")
        yield base_url, invocation, session_id
    finally:
        served.stop()


@pytest.fixture(scope="module")
def server_errors() -> Iterator[ErrorRecords]:
    handler = ErrorRecords()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


def _handshake(ws: ClientConnection, invocation: str) -> None:
    assert str(ws.recv(timeout=10)).startswith("0")
    ws.send("40" + json.dumps({"invocation": invocation}))
    assert str(ws.recv(timeout=10)).startswith("40")


def _next_event(ws: ClientConnection) -> tuple[str, Any]:
    """The next Socket.IO event, answering Engine.IO pings on the way."""
    while True:
        packet = str(ws.recv(timeout=10))
        if packet == "2":
            ws.send("3")
        elif packet.startswith("42"):
            name, *args = json.loads(packet[2:])
            return str(name), args[0] if args else None


@settings(deadline=None)  # each example opens a real websocket
@given(
    event=st.sampled_from(CLIENT_EVENTS) | st.text(min_size=1, max_size=20),
    payload=JSON,
)
def test_any_payload_on_any_event_leaves_the_socket_answering(
    oracle: tuple[str, str, str], server_errors: ErrorRecords, event: str, payload: Any
) -> None:
    base_url, invocation, session_id = oracle
    url = base_url.replace("http", "ws", 1)
    with connect(f"{url}/socket.io/?EIO=4&transport=websocket&sessionId={session_id}") as ws:
        _handshake(ws, invocation)
        ws.send("42" + json.dumps([event, payload]))
        ws.send("42" + json.dumps(["ping", {}]))
        # Whatever the fuzzed event answered (status, subscribed…), pong comes after it.
        name, _ = _next_event(ws)
        while name != "pong":
            name, _ = _next_event(ws)
    assert [r.getMessage() for r in server_errors.records] == []
