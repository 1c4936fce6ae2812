"""An oracle served on loopback for the socket.io gateway's tests, with its clients.

`RunningOracle.start` serves a real oracle with Hypercorn on a free port
(``ORACLE_BACKEND=local``, Matrix off, `OpenAIDouble` as its model) and hands out
`SocketClient` and `NodeSocketClient` connections to its `OracleUser` users;
`RunningOracle.aclose` closes the clients, then the server (which must shut down
promptly), then the model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from oracle_core import OraclePlugin
from oracle_server import OracleApp, create_oracle_app
from oracle_server._socket.gateway import SocketGateway
from oracle_server.testing._openai_double import OpenAIDouble, Step
from oracle_server.testing._server import auth_headers, free_port
from oracle_server.testing._socket_client import (
    EVENT_WAIT,
    HandshakeRefusedError,
    NodeSocketClient,
    SocketClient,
)
from oracle_ucan import Ed25519Signer, delegate, invoke

__all__ = ["OracleUser", "RunningOracle", "StartOracle"]


@dataclass
class OracleUser:
    """A ``did:key`` user with UCANs for one oracle."""

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
        return auth_headers(self.signer, self.oracle_did)


@dataclass
class RunningOracle:
    """An oracle served on loopback, its model double, an HTTP client and its sockets.

    Create one with `start`; `aclose` it.
    """

    app: OracleApp
    double: OpenAIDouble
    port: int
    http: httpx.AsyncClient
    stop: asyncio.Event
    serving: asyncio.Task[None]
    node_script: Path | None = None
    """The Node client script `node_client` runs."""
    sockets: list[SocketClient] = field(default_factory=list)
    node_clients: list[NodeSocketClient] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        steps: Sequence[Step] = (),
        *,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        plugins: Sequence[OraclePlugin] = (),
        node_script: Path | None = None,
    ) -> RunningOracle:
        """Serve an oracle whose model follows ``steps``; it answers ``/health`` on return.

        Args:
            steps: The model double's script.
            data_dir: The oracle's SQLite directory.
            env: Variables over the defaults (local backend, no shutdown drain).
            plugins: The oracle's plugins (entry points are not discovered).
            node_script: The Node client script for `node_client`.
        """
        double = OpenAIDouble(steps)
        await double.start()
        environment = {
            **double.env(),
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(data_dir),
            "SHUTDOWN_DRAIN_SECONDS": "0",
            **(env or {}),
        }
        try:
            app = await create_oracle_app(
                {"name": "Socket Test Oracle"},
                env=environment,
                plugins=plugins,
                discover_entry_points=False,
            )
        except BaseException:
            await double.stop()
            raise
        port = free_port()
        stop = asyncio.Event()
        serving = asyncio.create_task(
            app.serve(host="127.0.0.1", port=port, shutdown_trigger=stop.wait, freeze_gc=False)
        )
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
        oracle = cls(app, double, port, http, stop, serving, node_script)
        try:
            await oracle._until_healthy()
        except BaseException:
            await oracle.aclose()
            raise
        return oracle

    async def _until_healthy(self) -> None:
        deadline = time.monotonic() + EVENT_WAIT
        while True:
            try:
                if (await self.http.get("/health")).status_code == 200:
                    return
            except httpx.TransportError:
                if self.serving.done() or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> SocketGateway:
        """The socket.io gateway."""
        assert self.app.gateway is not None
        return self.app.gateway

    def new_user(self) -> OracleUser:
        """A new user."""
        return OracleUser(Ed25519Signer.generate(), self.app.state.oracle_did)

    async def create_session(self, user: OracleUser) -> str:
        """``POST /sessions`` as ``user``; the session id."""
        response = await self.http.post("/sessions", headers=user.headers())
        assert response.status_code == 201, response.text
        return str(response.json()["sessionId"])

    async def send_message(
        self,
        user: OracleUser,
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
        user: OracleUser | None,
        session_id: str | None,
        *,
        auth: Mapping[str, Any] | None = None,
        origin: str | None = None,
        local_address: str | None = None,
    ) -> SocketClient:
        """A raw Socket.IO connection; ``auth`` defaults to ``user``'s invocation.

        ``local_address`` is the loopback address to connect from (another client IP).
        """
        if auth is None and user is not None:
            auth = {"invocation": user.invocation()}
        query = {"sessionId": session_id} if session_id is not None else {}
        client = await SocketClient.connect(
            self.base_url, query, auth, origin=origin, local_address=local_address
        )
        self.sockets.append(client)
        return client

    async def refusal(
        self,
        user: OracleUser | None,
        session_id: str | None,
        *,
        auth: Mapping[str, Any] | None = None,
        local_address: str | None = None,
    ) -> Any:
        """The CONNECT_ERROR data of a handshake that the test expects to be refused."""
        try:
            client = await self.connect(user, session_id, auth=auth, local_address=local_address)
        except HandshakeRefusedError as exc:
            return exc.data
        raise AssertionError(f"the handshake was accepted (socket {client.sid})")

    async def node_client(self, node: str, config: Mapping[str, Any]) -> NodeSocketClient:
        """Start `node_script` against this oracle (``url`` filled in)."""
        if self.node_script is None:
            raise RuntimeError("RunningOracle.start(..., node_script=...) names no Node client")
        client = await NodeSocketClient.start(
            node, self.node_script, {"url": self.base_url, **config}
        )
        self.node_clients.append(client)
        return client

    def tool_result(self, call_id: str) -> str:
        """The content of the tool message answering ``call_id``, as the model got it
        (from the main agent's requests or a sub-agent's)."""
        for request in self.double.requests:
            for message in request.messages:
                if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                    return str(message["content"])
        raise AssertionError(f"no request held the result of {call_id!r}")

    def second_request_tool_message(self) -> str:
        """The content of the tool message in the model's second request."""
        assert len(self.double.requests) >= 2, len(self.double.requests)
        messages = self.double.requests[1].messages
        tools = [m for m in messages if m.get("role") == "tool"]
        assert len(tools) == 1, messages
        return str(tools[0]["content"])

    async def shutdown(self) -> float:
        """Stop serving; the seconds ``serve`` took to return."""
        started = time.monotonic()
        self.stop.set()
        await asyncio.wait_for(self.serving, EVENT_WAIT)
        return time.monotonic() - started

    async def aclose(self) -> None:
        """Close the Node clients and sockets, the HTTP client, the server and the model."""
        try:
            for node_client in self.node_clients:
                await node_client.close()
            for client in self.sockets:
                await client.close()
            await self.http.aclose()
            await self.shutdown()
        finally:
            await self.double.stop()


class StartOracle(Protocol):
    """``await start_oracle(steps, env=..., plugins=...)``: the socket tests' fixture."""

    def __call__(
        self,
        steps: Sequence[Step] = (),
        *,
        env: Mapping[str, str] | None = None,
        plugins: Sequence[OraclePlugin] = (),
    ) -> Awaitable[RunningOracle]:
        """Start a `RunningOracle`; the fixture closes it when the test ends."""
        ...
