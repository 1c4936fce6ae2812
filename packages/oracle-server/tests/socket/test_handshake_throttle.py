"""Socket handshakes are throttled per IP, before any of them is authenticated.

A real oracle on loopback, real Socket.IO handshakes; a second client IP is another
loopback address (``127.0.0.2``). The limiter is the server's own: in memory, and in
Redis with ``REDIS_URL`` (``ORACLE_TEST_REDIS_URL``). Engine.IO connections that never
send a handshake are counted too, against twice the limit.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from oracle_server.testing import RunningOracle, StartOracle, redis_url_or_skip

LIMIT = 3


def _env(backend: str) -> dict[str, str]:
    env = {"SOCKET_HANDSHAKE_LIMIT": str(LIMIT), "SOCKET_HANDSHAKE_WINDOW_SECONDS": "600"}
    if backend == "redis":
        # The limiter's Redis keys carry the limit and the window, and the server's key
        # prefix is fixed: a window of the test's own keeps its count apart from other
        # runs sharing this Redis (the key expires with the window).
        env["REDIS_URL"] = redis_url_or_skip()
        env["SOCKET_HANDSHAKE_WINDOW_SECONDS"] = str(random.randint(600, 3600))
    return env


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_the_handshake_after_the_limit_is_refused_and_another_ip_still_connects(
    start_oracle: StartOracle, backend: str
) -> None:
    oracle: RunningOracle = await start_oracle(env=_env(backend))
    user = oracle.new_user()
    session_id = await oracle.create_session(user)

    # Unauthenticated handshakes count as much as good ones.
    first = await oracle.connect(user, session_id)
    await first.wait_for("connected")
    refused = [
        await oracle.refusal(None, session_id, auth={"invocation": "not a ucan"})
        for _ in range(LIMIT - 1)
    ]
    throttled = await oracle.refusal(user, session_id)
    elsewhere = await oracle.connect(user, session_id, local_address="127.0.0.2")

    assert refused == [{"message": "unauthorized"}] * (LIMIT - 1)
    assert throttled["message"] == "Too Many Requests"
    assert throttled["data"]["code"] == "ws.throttled"
    assert 1 <= throttled["data"]["retryAfter"] <= 3600
    [connected] = await elsewhere.wait_for("connected")
    assert connected["sessionId"] == session_id
    # The sockets admitted before the limit stay connected.
    assert not first.closed.is_set()
    assert oracle.gateway.sockets_of(session_id) == 2


async def _engine_io_open(oracle: RunningOracle, local_address: str) -> ClientConnection:
    """A websocket to ``/socket.io/`` past the Engine.IO OPEN packet, with no handshake."""
    ws = await connect(
        f"{oracle.base_url.replace('http', 'ws', 1)}/socket.io/?EIO=4&transport=websocket",
        local_addr=(local_address, 0),
    )
    first = await asyncio.wait_for(ws.recv(), 10)
    assert str(first).startswith("0"), first
    return ws


async def test_connections_that_never_shake_hands_are_cut_off_at_twice_the_limit(
    start_oracle: StartOracle,
) -> None:
    oracle = await start_oracle(env=_env("memory"))
    opened: list[ClientConnection] = []
    try:
        for _ in range(2 * LIMIT):
            opened.append(await _engine_io_open(oracle, "127.0.0.1"))
        with pytest.raises(InvalidStatus) as refused:
            opened.append(await _engine_io_open(oracle, "127.0.0.1"))
        opened.append(await _engine_io_open(oracle, "127.0.0.2"))
        polling = await oracle.http.get("/socket.io/", params={"EIO": "4", "transport": "polling"})
    finally:
        for ws in opened:
            await ws.close()

    response = refused.value.response
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert json.loads(response.body or b"{}") == {
        "statusCode": 429,
        "message": "Too Many Requests",
        "error": "Too Many Requests",
        "code": "ws.throttled",
    }
    assert polling.status_code == 429
    assert polling.json()["code"] == "ws.throttled"
