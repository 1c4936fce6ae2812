"""A worker's end of the hub: calls to what the hub holds, and its channels.

One connection per worker process, opened at boot from the socket the supervisor handed
down (``ORACLE_WORKER_HUB_FD``). Everything the workers share goes through it: the run
log, turn locks and rate limits the hub holds (``call``, ``hold``), and the channels the
socket.io rooms and the replica bus speak on (``publish``, ``subscribe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Callable
from typing import Any

from oracle_server._workers.wire import encode, read_message

__all__ = ["HUB_LOST", "HubConnection"]

logger = logging.getLogger("oracle.server.workers")

HUB_LOST = "workers.hub_lost"

ChannelHandler = Callable[[Any], None]


class HubConnection:
    """A worker's connection to the hub of its machine.

    Args:
        reader: The stream from the hub.
        writer: The stream to the hub.
        worker: This worker's name on the hub (its index), for logs and replica ids.

    Attributes:
        worker: This worker's name.
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, worker: str
    ) -> None:
        self.worker = worker
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self._channels: dict[str, list[ChannelHandler]] = {}
        self._lost_handlers: list[Callable[[], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, sock: socket.socket, *, worker: str) -> HubConnection:
        """Connect over ``sock`` (one end of the supervisor's socket pair) and listen."""
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        connection = cls(reader, writer, worker=worker)
        connection._listener = asyncio.get_running_loop().create_task(
            connection._listen(), name=f"oracle-worker-hub-{worker}"
        )
        connection._send(("hello", worker))
        return connection

    @property
    def closed(self) -> bool:
        """Whether the hub is gone (or this end was closed)."""
        return self._closed

    def on_lost(self, handler: Callable[[], None]) -> None:
        """Call ``handler`` once if the hub goes away while this worker still runs."""
        self._lost_handlers.append(handler)

    async def call(self, target: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``target.method(*args, **kwargs)`` on the hub, its exception raised here.

        Raises:
            ConnectionError: The hub is gone (``workers.hub_lost``).
        """
        return await self._request("call", target, method, args, kwargs)

    def cast(self, target: str, method: str, *args: Any, **kwargs: Any) -> None:
        """``target.method(*args, **kwargs)`` on the hub, without waiting for it.

        The hub runs casts and calls in the order it receives them, so a call sent after
        a cast sees its effect. A cast that fails is logged by the hub.

        Raises:
            ConnectionError: The hub is gone (``workers.hub_lost``).
        """
        if self._closed:
            raise ConnectionError(f"{HUB_LOST}: the workers' hub is gone")
        self._send(("call", 0, target, method, args, kwargs))

    async def hold(self, session_id: str, *, wait: bool, patience: float | None) -> int:
        """Take the session's turn on the hub; the returned id gives it back (``release``).

        Returns:
            The hold's id, once the turn is this worker's.

        Raises:
            TurnBusy: ``wait`` is ``False`` and the turn is taken.
            TimeoutError: ``patience`` (seconds) ran out while waiting (``turn.wait_timeout``).
            ConnectionError: The hub is gone.
        """
        hold_id = next(self._ids)
        await self._request_as(hold_id, "hold", session_id, wait, patience)
        return hold_id

    def release(self, hold_id: int) -> None:
        """Give back the turn taken by ``hold`` (a no-op once the hub is gone)."""
        if not self._closed:
            self._send(("cancel", hold_id))

    async def subscribe(self, channel: str, handler: ChannelHandler) -> None:
        """Deliver every message published on ``channel`` (also by this worker) to
        ``handler``, from the moment this returns."""
        first = channel not in self._channels
        self._channels.setdefault(channel, []).append(handler)
        if first:
            await self._request("sub", channel)

    async def unsubscribe(self, channel: str, handler: ChannelHandler) -> None:
        """Stop delivering ``channel`` to ``handler`` (a no-op once the hub is gone)."""
        handlers = self._channels.get(channel, [])
        if handler in handlers:
            handlers.remove(handler)
        if not handlers and self._channels.pop(channel, None) is not None and not self._closed:
            await self._request("unsub", channel)

    async def publish(self, channel: str, message: Any) -> int:
        """Publish ``message`` on ``channel``.

        Returns:
            How many workers are subscribed and received it (this one included).
        """
        return int(await self._request("pub", channel, message))

    def publish_nowait(self, channel: str, message: Any) -> None:
        """Publish without waiting for the count (socket.io room events)."""
        if self._closed:
            raise ConnectionError(f"{HUB_LOST}: the workers' hub is gone")
        self._send(("pub", 0, channel, message))

    def announce_ready(self) -> None:
        """Tell the supervisor this worker serves requests."""
        if not self._closed:
            self._send(("ready",))

    async def aclose(self) -> None:
        """Close this end (idempotent); calls still waiting fail with ``ConnectionError``."""
        self._lost_handlers.clear()
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        self._fail_waiting()
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    # -- inside ------------------------------------------------------------------------

    async def _request(self, kind: str, *fields: Any) -> Any:
        return await self._request_as(next(self._ids), kind, *fields)

    async def _request_as(self, request_id: int, kind: str, *fields: Any) -> Any:
        if self._closed:
            raise ConnectionError(f"{HUB_LOST}: the workers' hub is gone")
        answer = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        self._send((kind, request_id, *fields))
        try:
            ok, value = await answer
        except asyncio.CancelledError:
            # The hub stops the call (and gives back a turn it may just have granted).
            if not self._closed:
                self._send(("cancel", request_id))
            raise
        finally:
            self._waiting.pop(request_id, None)
        if not ok:
            raise value
        return value

    def _send(self, message: tuple[Any, ...]) -> None:
        self._writer.write(encode(message))

    async def _listen(self) -> None:
        try:
            while True:
                message = await read_message(self._reader)
                if message is None:
                    break
                self._dispatch(message)
        except (ConnectionError, OSError) as exc:
            logger.error("workers.hub_failed: %r", exc)
        if self._closed:
            return
        self._closed = True
        logger.error("%s: the workers' hub closed; this worker stops", HUB_LOST)
        self._fail_waiting()
        for handler in self._lost_handlers:
            handler()

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ret":
            _, request_id, ok, value = message
            answer = self._waiting.get(request_id)
            if answer is not None and not answer.done():
                answer.set_result((ok, value))
        elif kind == "msg":
            _, channel, body = message
            for handler in self._channels.get(channel, ()):
                try:
                    handler(body)
                except Exception:
                    logger.exception("workers.channel_handler_failed: %s", channel)

    def _fail_waiting(self) -> None:
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ConnectionError(f"{HUB_LOST}: the workers' hub is gone"))
        self._waiting.clear()
