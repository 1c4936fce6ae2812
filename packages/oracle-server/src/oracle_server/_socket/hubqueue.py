"""The socket.io rooms of one machine's workers, on their hub's channel.

python-socketio's pub/sub managers send room events (emits, joins, disconnects) to every
server sharing a queue; this one uses the workers' hub instead of Redis, so the events of
a turn reach the session's sockets whichever worker each is connected to. Its base class
does the rest (encoding, skipping its own messages by ``host_id``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from socketio.async_pubsub_manager import AsyncPubSubManager  # type: ignore[import-untyped]

from oracle_server._workers.connection import HubConnection

__all__ = ["SOCKETIO_HUB_CHANNEL", "HubSocketManager"]

SOCKETIO_HUB_CHANNEL = "oracle:socketio"


class HubSocketManager(AsyncPubSubManager):  # type: ignore[misc]  # untyped base
    """A python-socketio client manager whose queue is the workers' hub."""

    name = "oracle-workers"

    def __init__(self, hub: HubConnection, *, channel: str = SOCKETIO_HUB_CHANNEL) -> None:
        super().__init__(channel=channel, write_only=False)
        self._hub = hub
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.subscribed = False

    async def subscribe(self) -> None:
        """Hear the channel from now on (before the first socket, like the Redis queue)."""
        if not self.subscribed:
            self.subscribed = True
            await self._hub.subscribe(self.channel, self._inbox.put_nowait)

    async def _publish(self, data: dict[str, Any]) -> None:
        self._hub.publish_nowait(self.channel, data)

    async def _listen(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._inbox.get()
