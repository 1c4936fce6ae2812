"""Fixtures of the socket.io gateway tests (SRV-47 … 53, SRV-70 a).

Every test serves a real oracle with Hypercorn on loopback (``OracleApp.serve`` on a free
port), Matrix off, ``ORACLE_BACKEND=local``, and `OpenAIDouble` as its model. Two clients
talk to it:

- `SocketClient`: the Socket.IO v5 protocol (Engine.IO v4, websocket transport) spoken
  over a plain websocket, so a test sees the exact packets. python-socketio's own
  ``AsyncClient`` needs aiohttp (its ``asyncio-client`` extra), which the workspace does
  not install.
- `NodeSocketClient`: ``js/socket_client.mjs`` on ``socket.io-client@4.8.4``, the library
  the client SDK uses, configured as the SDK configures it. ``npm ci`` installs it on
  first use. Node and npm are required: without them these tests fail, they never skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from oracle_core import OraclePlugin
from oracle_server import OracleApp, create_oracle_app
from oracle_server._socket.gateway import SocketGateway
from oracle_server.testing import OpenAIDouble, Step
from oracle_ucan import Ed25519Signer, delegate, invoke
from oracle_ucan.testing import NodeSetupError, node_with_locked_packages

JS_DIR = Path(__file__).parent / "js"
NODE_CLIENT = JS_DIR / "socket_client.mjs"
WAIT = 10.0
"""Seconds a test waits for an event before failing."""


# -- Node ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable, after ``npm ci`` when the install is missing or stale."""
    try:
        return node_with_locked_packages(JS_DIR, code="ws", purpose="the socket.io client tests")
    except NodeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)


class _Records:
    """Events as they arrive, and a way to wait for them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []
        self._changed = asyncio.Event()

    def add(self, name: str, value: Any) -> None:
        self.items.append((name, value))
        self._changed.set()

    def named(self, name: str) -> list[Any]:
        return [value for event, value in self.items if event == name]

    async def wait_for(self, name: str, count: int = 1, within: float = WAIT) -> list[Any]:
        async def enough() -> list[Any]:
            while len(self.named(name)) < count:
                self._changed.clear()
                await self._changed.wait()
            return self.named(name)

        try:
            return await asyncio.wait_for(enough(), within)
        except TimeoutError:
            got = [event for event, _ in self.items]
            raise AssertionError(f"no {count}× {name!r} within {within}s; got {got}") from None


class NodeSocketClient:
    """``js/socket_client.mjs``: socket.io-client 4.8.4 as the SDK configures it."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.records = _Records()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, node: str, config: Mapping[str, Any]) -> NodeSocketClient:
        """Start the client; ``config`` as described in the script's header."""
        process = await asyncio.create_subprocess_exec(
            node,
            str(NODE_CLIENT),
            cwd=JS_DIR,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        client = cls(process)
        await client._send(config)
        return client

    async def _send(self, value: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(value).encode() + b"\n")
        await self.process.stdin.drain()

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            record = json.loads(line)
            self.records.add(record.pop("event"), record)

    async def wait_for(self, event: str, count: int = 1, within: float = WAIT) -> list[Any]:
        """The records of ``event`` once there are ``count`` of them."""
        return await self.records.wait_for(event, count, within)

    async def emit(self, event: str, data: Any = None) -> None:
        """Have the client emit ``event``."""
        await self._send({"emit": event, "data": data})

    async def close(self) -> str:
        """Disconnect, wait for the process to end, and return its stderr."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), WAIT)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        await self._reader
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()


# -- the Socket.IO protocol over a websocket --------------------------------------------


class HandshakeRefusedError(Exception):
    """The server answered the Socket.IO CONNECT with CONNECT_ERROR."""

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.data = data


class SocketClient:
    """A Socket.IO v5 client (Engine.IO v4 over a websocket), packet by packet.

    Answers Engine.IO pings, closes on an Engine.IO close as real clients do, and records
    every event (``42["name", data]``) in `records`.
    """

    def __init__(self, ws: ClientConnection, open_packet: dict[str, Any], sid: str) -> None:
        self.ws = ws
        self.open_packet = open_packet
        self.sid = sid
        self.records = _Records()
        self.packets: list[str] = []
        self.closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(
        cls,
        base_url: str,
        query: Mapping[str, str],
        auth: Mapping[str, Any] | None,
        *,
        origin: str | None = None,
    ) -> SocketClient:
        """Open the websocket and send the Socket.IO CONNECT with ``auth``.

        Raises:
            HandshakeRefusedError: with the CONNECT_ERROR data.
        """
        params = urlencode({"EIO": "4", "transport": "websocket", **query})
        ws = await connect(
            f"{base_url.replace('http', 'ws', 1)}/socket.io/?{params}",
            origin=None if origin is None else Origin(origin),
        )
        try:
            first = str(await asyncio.wait_for(ws.recv(), WAIT))
            assert first.startswith("0"), first
            await ws.send("40" + (json.dumps(auth) if auth is not None else ""))
            reply = str(await asyncio.wait_for(ws.recv(), WAIT))
        except BaseException:
            await ws.close()
            raise
        if reply.startswith("44"):
            await ws.close()
            raise HandshakeRefusedError(json.loads(reply[2:]))
        assert reply.startswith("40"), reply
        return cls(ws, json.loads(first[1:]), json.loads(reply[2:])["sid"])

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                text = str(message)
                self.packets.append(text)
                if text == "2":
                    await self.ws.send("3")
                elif text in ("1", "41"):
                    # Engine.IO close, or the server disconnected our only Socket.IO
                    # socket: real clients then close the connection.
                    await self.ws.close()
                elif text.startswith("42"):
                    name, *args = json.loads(text[2:])
                    self.records.add(name, args[0] if args else None)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def wait_for(self, event: str, count: int = 1, within: float = WAIT) -> list[Any]:
        """The data of ``event`` once it arrived ``count`` times."""
        return await self.records.wait_for(event, count, within)

    async def emit(self, event: str, *args: Any) -> None:
        """Send ``42["event", ...args]``."""
        await self.ws.send("42" + json.dumps([event, *args]))

    async def close(self) -> None:
        """Socket.IO disconnect, then close the websocket."""
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send("41")
        await self.ws.close()
        await self._reader


# -- the oracle ------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class User:
    """A did:key user with UCANs for the oracle."""

    signer: Ed25519Signer
    oracle_did: str

    @property
    def did(self) -> str:
        """The user's DID."""
        return self.signer.did()

    def invocation(self, *, audience: str | None = None) -> str:
        """A fresh auth invocation (``Authorization: Bearer``) for the oracle."""
        return invoke(
            self.signer,
            audience=audience or self.oracle_did,
            capability={"with": self.did, "can": "*"},
            expiration=int(time.time()) + 600,
        ).to_base64()

    def delegation(self) -> str:
        """A delegation to the oracle (the ``x-ucan-delegation`` fallback)."""
        return delegate(
            self.signer,
            audience=self.oracle_did,
            capabilities=[{"with": self.did, "can": "*"}],
            expiration=int(time.time()) + 3600,
        ).to_base64()

    def headers(self) -> dict[str, str]:
        """HTTP auth headers."""
        return {"authorization": f"Bearer {self.invocation()}", "x-auth-type": "ucan"}


@dataclass
class RunningOracle:
    """An oracle served on loopback, its model double and an HTTP client."""

    app: OracleApp
    double: OpenAIDouble
    port: int
    http: httpx.AsyncClient
    stop: asyncio.Event
    serving: asyncio.Task[None]
    sockets: list[SocketClient] = field(default_factory=list)
    node_clients: list[NodeSocketClient] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> SocketGateway:
        """The socket.io gateway."""
        assert self.app.gateway is not None
        return self.app.gateway

    def new_user(self) -> User:
        """A new user."""
        return User(Ed25519Signer.generate(), self.app.state.oracle_did)

    async def create_session(self, user: User) -> str:
        """``POST /sessions`` as ``user``; the session id."""
        response = await self.http.post("/sessions", headers=user.headers())
        assert response.status_code == 201, response.text
        return str(response.json()["sessionId"])

    async def send_message(
        self,
        user: User,
        session_id: str,
        message: str,
        *,
        request_id: str | None = None,
        **body: Any,
    ) -> httpx.Response:
        """``POST /messages/{session_id}`` (non-stream) as ``user``."""
        headers = user.headers()
        if request_id is not None:
            headers["x-request-id"] = request_id
        return await self.http.post(
            f"/messages/{session_id}", headers=headers, json={"message": message, **body}
        )

    async def connect(
        self,
        user: User | None,
        session_id: str | None,
        *,
        auth: Mapping[str, Any] | None = None,
        origin: str | None = None,
    ) -> SocketClient:
        """A raw Socket.IO connection; ``auth`` defaults to ``user``'s invocation."""
        if auth is None and user is not None:
            auth = {"invocation": user.invocation()}
        query = {"sessionId": session_id} if session_id is not None else {}
        client = await SocketClient.connect(self.base_url, query, auth, origin=origin)
        self.sockets.append(client)
        return client

    async def refusal(
        self, user: User | None, session_id: str | None, *, auth: Mapping[str, Any] | None = None
    ) -> Any:
        """The CONNECT_ERROR data of a handshake that the test expects to be refused."""
        try:
            client = await self.connect(user, session_id, auth=auth)
        except HandshakeRefusedError as exc:
            return exc.data
        raise AssertionError(f"the handshake was accepted (socket {client.sid})")

    async def shutdown(self) -> float:
        """Stop serving; the seconds ``serve`` took to return."""
        started = time.monotonic()
        self.stop.set()
        await asyncio.wait_for(self.serving, WAIT)
        return time.monotonic() - started

    async def node_client(self, node: str, config: Mapping[str, Any]) -> NodeSocketClient:
        """Start ``js/socket_client.mjs`` against this oracle (``url`` filled in)."""
        client = await NodeSocketClient.start(node, {"url": self.base_url, **config})
        self.node_clients.append(client)
        return client

    def second_request_tool_message(self) -> str:
        """The content of the tool message in the model's second request."""
        assert len(self.double.requests) >= 2, len(self.double.requests)
        messages = self.double.requests[1].messages
        tools = [m for m in messages if m.get("role") == "tool"]
        assert len(tools) == 1, messages
        return str(tools[0]["content"])


StartOracle = Callable[..., Awaitable[RunningOracle]]


@pytest.fixture
async def start_oracle(tmp_path: Path) -> AsyncIterator[StartOracle]:
    """Start an oracle: ``await start_oracle(steps, env=..., plugins=...)``.

    Everything started is stopped when the test ends: clients first, then the server
    (which must shut down promptly) and the model double.
    """
    started: list[RunningOracle] = []

    async def start(
        steps: Sequence[Step] = (),
        *,
        env: Mapping[str, str] | None = None,
        plugins: Sequence[OraclePlugin] = (),
    ) -> RunningOracle:
        double = OpenAIDouble(steps)
        await double.start()
        data = tmp_path / f"oracle-{len(started)}"
        environment = {
            **double.env(),
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(data),
            "SHUTDOWN_DRAIN_SECONDS": "0",
            **(env or {}),
        }
        app = await create_oracle_app(
            {"name": "Socket Test Oracle"},
            env=environment,
            plugins=plugins,
            discover_entry_points=False,
        )
        port = free_port()
        stop = asyncio.Event()
        serving = asyncio.create_task(
            app.serve(host="127.0.0.1", port=port, shutdown_trigger=stop.wait, freeze_gc=False)
        )
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
        oracle = RunningOracle(app, double, port, http, stop, serving)
        started.append(oracle)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                if (await http.get("/health")).status_code == 200:
                    break
            except httpx.TransportError:
                if serving.done() or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)
        return oracle

    yield start

    for oracle in reversed(started):
        for node_client in oracle.node_clients:
            await node_client.close()
        for client in oracle.sockets:
            await client.close()
        await oracle.http.aclose()
        await oracle.shutdown()
        await oracle.double.stop()


@pytest.fixture
async def oracle(start_oracle: StartOracle) -> RunningOracle:
    """An oracle whose model has no script (for tests that run no turn)."""
    return await start_oracle()
