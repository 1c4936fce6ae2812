"""Socket.IO clients for tests of the gateway: the protocol packet by packet, and Node's.

- `SocketClient`: the Socket.IO v5 protocol (Engine.IO v4, websocket transport) spoken
  over a plain websocket, so a test sees the exact packets.
- `NodeSocketClient`: a Node script on ``socket.io-client`` (the library the client SDK
  uses) driven over its stdin and stdout; the script is the test suite's own.
- `EventRecords`: the events a client received, and a way to wait for them; any client
  may use it (the multi-replica tests record python-socketio's events with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

__all__ = [
    "EVENT_WAIT",
    "EventRecords",
    "HandshakeRefusedError",
    "NodeSocketClient",
    "SocketClient",
]

EVENT_WAIT = 10.0
"""Seconds a client waits for an event (or the Node process for its end) before failing."""


class EventRecords:
    """Events in the order they arrived, and a way to wait for them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []
        self._changed = asyncio.Event()

    def add(self, name: str, value: Any) -> None:
        """Record ``value`` under the event ``name``."""
        self.items.append((name, value))
        self._changed.set()

    def named(self, name: str) -> list[Any]:
        """The values recorded under ``name``, oldest first."""
        return [value for event, value in self.items if event == name]

    async def wait_for(self, name: str, count: int = 1, within: float = EVENT_WAIT) -> list[Any]:
        """The values of ``name`` once there are ``count`` of them.

        Raises:
            AssertionError: fewer arrived within ``within`` seconds; the message lists
                the events that did.
        """

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


class HandshakeRefusedError(Exception):
    """The server answered the Socket.IO CONNECT with CONNECT_ERROR.

    Args:
        data: The CONNECT_ERROR packet's data.
    """

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.data = data


class SocketClient:
    """A Socket.IO v5 client (Engine.IO v4 over a websocket), packet by packet.

    Answers Engine.IO pings, closes on an Engine.IO close as real clients do, and records
    every event (``42["name", data]``) in `records`. Open one with `connect`; `close` it.

    Args:
        ws: The open websocket, past the Socket.IO handshake.
        open_packet: The Engine.IO OPEN packet's data (``sid``, ``maxPayload``, …).
        sid: The Socket.IO socket id from the CONNECT acknowledgement.
    """

    def __init__(self, ws: ClientConnection, open_packet: dict[str, Any], sid: str) -> None:
        self.ws = ws
        self.open_packet = open_packet
        self.sid = sid
        self.records = EventRecords()
        self.packets: list[str] = []
        """Every packet received after the handshake, as text."""
        self.closed = asyncio.Event()
        """Set once the connection is closed, by either side."""
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(
        cls,
        base_url: str,
        query: Mapping[str, str],
        auth: Mapping[str, Any] | None,
        *,
        origin: str | None = None,
        local_address: str | None = None,
    ) -> SocketClient:
        """Open the websocket and send the Socket.IO CONNECT with ``auth``.

        Args:
            base_url: The server's ``http://`` URL.
            query: Query parameters next to ``EIO`` and ``transport``.
            auth: The CONNECT packet's data; None sends none.
            origin: The ``Origin`` header, if any.
            local_address: The address to connect from (e.g. ``127.0.0.2``, another
                client IP on loopback); the system's choice when None.

        Raises:
            HandshakeRefusedError: with the CONNECT_ERROR data (the websocket is closed).
        """
        params = urlencode({"EIO": "4", "transport": "websocket", **query})
        # Passed on to the event loop's create_connection.
        source: dict[str, Any] = {} if local_address is None else {"local_addr": (local_address, 0)}
        ws = await connect(
            f"{base_url.replace('http', 'ws', 1)}/socket.io/?{params}",
            origin=None if origin is None else Origin(origin),
            **source,
        )
        try:
            first = _text(await asyncio.wait_for(ws.recv(), EVENT_WAIT))
            assert first.startswith("0"), first
            await ws.send("40" + (json.dumps(auth) if auth is not None else ""))
            reply = _text(await asyncio.wait_for(ws.recv(), EVENT_WAIT))
            if reply.startswith("44"):
                raise HandshakeRefusedError(json.loads(reply[2:]))
            assert reply.startswith("40"), reply
        except BaseException:
            await ws.close()
            raise
        return cls(ws, json.loads(first[1:]), json.loads(reply[2:])["sid"])

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                text = _text(message)
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

    async def wait_for(self, event: str, count: int = 1, within: float = EVENT_WAIT) -> list[Any]:
        """The data of ``event`` once it arrived ``count`` times."""
        return await self.records.wait_for(event, count, within)

    async def emit(self, event: str, *args: Any) -> None:
        """Send ``42["event", ...args]``."""
        await self.ws.send("42" + json.dumps([event, *args]))

    async def close(self) -> None:
        """Socket.IO disconnect, then close the websocket and wait for the reader."""
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send("41")
        await self.ws.close()
        await self._reader


class NodeSocketClient:
    """A Node script on ``socket.io-client``, driven through JSON lines.

    The script reads its configuration as the first line of stdin (tokens stay out of
    the process list), then ``{"emit": <event>, "data": <value>}`` lines; the end of stdin
    makes it disconnect and exit. It prints one ``{"event": <name>, ...}`` object per
    line, recorded under ``name`` in `records`. Start one with `start`; `close` it.

    Args:
        process: The running script, with pipes on stdin, stdout and stderr.
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.records = EventRecords()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, node: str, script: Path, config: Mapping[str, Any]) -> NodeSocketClient:
        """Run ``script`` with ``node`` in the script's directory and send it ``config``.

        Args:
            node: The ``node`` executable.
            script: The client script; its directory holds its ``node_modules``.
            config: The first line the script reads (as its header describes).
        """
        process = await asyncio.create_subprocess_exec(
            node,
            str(script),
            cwd=script.parent,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        client = cls(process)
        await client._send(config)
        return client

    async def _send(self, value: Any) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(value).encode() + b"\n")
        await stdin.drain()

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        async for line in stdout:
            record: dict[str, Any] = json.loads(line)
            self.records.add(record.pop("event"), record)

    async def wait_for(self, event: str, count: int = 1, within: float = EVENT_WAIT) -> list[Any]:
        """The records of ``event`` once there are ``count`` of them."""
        return await self.records.wait_for(event, count, within)

    async def emit(self, event: str, data: Any = None) -> None:
        """Have the client emit ``event`` with ``data``."""
        await self._send({"emit": event, "data": data})

    async def close(self) -> str:
        """Disconnect, wait for the process to end (killing it after `EVENT_WAIT` s), and
        return its stderr."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), EVENT_WAIT)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        await self._reader
        stderr = self.process.stderr
        assert stderr is not None
        return (await stderr.read()).decode()


def _text(message: str | bytes) -> str:
    """A websocket message as text (the server sends text frames only)."""
    return message if isinstance(message, str) else message.decode()
