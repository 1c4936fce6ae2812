"""Fixtures of the socket.io gateway tests (SRV-47 … 53, SRV-70 a).

Every test serves a real oracle with Hypercorn on loopback (`RunningOracle` from
``oracle_server.testing``: ``OracleApp.serve`` on a free port, Matrix off,
``ORACLE_BACKEND=local``, `OpenAIDouble` as its model). Two clients talk to it:

- `SocketClient`: the Socket.IO v5 protocol spoken over a plain websocket, so a test
  sees the exact packets.
- `NodeSocketClient` running ``js/socket_client.mjs`` on ``socket.io-client@4.8.4``, the
  library the client SDK uses, configured as the SDK configures it. ``npm ci`` installs
  it on first use. Node and npm are required: without them these tests fail, they never
  skip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest

from oracle_core import OraclePlugin
from oracle_server.testing import RunningOracle, StartOracle, Step
from oracle_ucan.testing import NodeSetupError, node_with_locked_packages

JS_DIR = Path(__file__).parent / "js"


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, after ``npm ci`` when the install is missing or stale."""
    try:
        return node_with_locked_packages(JS_DIR, code="ws", purpose="the socket.io client tests")
    except NodeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
async def start_oracle(tmp_path: Path) -> AsyncIterator[StartOracle]:
    """Start an oracle: ``await start_oracle(steps, env=..., plugins=...)``.

    Everything started is closed when the test ends, the last started first: clients,
    then the server (which must shut down promptly) and the model double.
    """
    started: list[RunningOracle] = []

    async def start(
        steps: Sequence[Step] = (),
        *,
        env: Mapping[str, str] | None = None,
        plugins: Sequence[OraclePlugin] = (),
    ) -> RunningOracle:
        oracle = await RunningOracle.start(
            steps,
            data_dir=tmp_path / f"oracle-{len(started)}",
            env=env,
            plugins=plugins,
            node_script=JS_DIR / "socket_client.mjs",
        )
        started.append(oracle)
        return oracle

    yield start

    for oracle in reversed(started):
        await oracle.aclose()


@pytest.fixture
async def oracle(start_oracle: StartOracle) -> RunningOracle:
    """An oracle whose model has no script (for tests that run no turn)."""
    return await start_oracle()
