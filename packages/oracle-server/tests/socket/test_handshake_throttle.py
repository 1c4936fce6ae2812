"""Socket handshakes are throttled per IP, before any of them is authenticated.

A real oracle on loopback, real Socket.IO handshakes; a second client IP is another
loopback address (``127.0.0.2``). The limiter is the server's own: in memory, and in
Redis with ``REDIS_URL`` (``ORACLE_TEST_REDIS_URL``).
"""

from __future__ import annotations

import random

import pytest

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
