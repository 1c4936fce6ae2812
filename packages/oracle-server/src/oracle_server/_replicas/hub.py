"""Control messages between the workers of one machine, on their hub's channels.

The same messages as between replicas on Redis (:mod:`oracle_server._replicas.channels`);
the hub's publish, like Redis's, tells how many workers received a message.
"""

from __future__ import annotations

from oracle_server._replicas.base import ABORT_REPLY_TIMEOUT_SECONDS
from oracle_server._replicas.channels import CONTROL_CHANNEL, ChannelReplicaBus
from oracle_server._workers.connection import HubConnection

__all__ = ["HubReplicaBus"]


class HubReplicaBus(ChannelReplicaBus):
    """Control messages shared by one machine's workers through their hub.

    Args:
        hub: This worker's connection to the hub.
        channel: The shared channel; replies go to ``<channel>:reply:<replica>``.
        reply_timeout: Seconds an abort waits for the last worker's answer.

    Attributes:
        replica: This worker's id on the bus.
    """

    def __init__(
        self,
        hub: HubConnection,
        *,
        channel: str = CONTROL_CHANNEL,
        reply_timeout: float = ABORT_REPLY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(channel=channel, reply_timeout=reply_timeout)
        self._hub = hub
        self._started = False

    async def start(self) -> None:
        """Subscribe to the shared and the reply channel (idempotent).

        Raises:
            ConnectionError: The hub is gone.
        """
        if self._started:
            return
        self._started = True
        await self._hub.subscribe(self._channel, self._dispatch)
        await self._hub.subscribe(self._reply_channel, self._dispatch)

    async def _publish(self, channel: str, message: str) -> int:
        return await self._hub.publish(channel, message)

    async def aclose(self) -> None:
        """Stop hearing the channels and answering (idempotent; the connection itself is
        closed by its owner)."""
        if self._started:
            self._started = False
            for channel in (self._channel, self._reply_channel):
                try:
                    await self._hub.unsubscribe(channel, self._dispatch)
                except ConnectionError:
                    break  # the hub is gone: nothing to leave
        await self._stop_answering()
