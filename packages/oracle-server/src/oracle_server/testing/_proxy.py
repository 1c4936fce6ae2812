"""A TCP relay in front of a real service, which a test can cut: a restart or an outage
of PostgreSQL or Redis without touching the service itself (others may be using it).

Example:
    ```python
    async with TcpProxy("127.0.0.1", 6379) as proxy:
        env = {"REDIS_URL": proxy.url("redis://127.0.0.1:6379/0")}
        ...
        await proxy.cut()            # every connection drops, as when the server restarts
        async with proxy.down():     # connections are refused meanwhile
            ...
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

__all__ = ["TcpProxy"]

_CHUNK = 64 * 1024


class TcpProxy:
    """Relays connections from ``127.0.0.1:<port>`` to ``host:target_port``.

    Args:
        host: The service's host.
        target_port: The service's port.

    Attributes:
        port: The relay's own port, fixed for its life (also across `down`).
    """

    def __init__(self, host: str, target_port: int) -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def url(self, service_url: str) -> str:
        """``service_url`` with its host and port replaced by the relay's."""
        parts = urlsplit(service_url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@" if credentials else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{self.port}"))

    async def start(self) -> None:
        """Listen (on the same port as before, after `down`)."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Drop every relayed connection, both sides, as a restarting server would."""
        for writer in list(self._writers):
            writer.transport.abort()
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """Within the block the service is gone: connections dropped, new ones refused."""
        await self._stop_listening()
        await self.cut()
        try:
            yield
        finally:
            await self.start()

    async def aclose(self) -> None:
        """Stop listening and drop every connection."""
        await self._stop_listening()
        await self.cut()

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _relay(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        self._writers.add(client)
        service: asyncio.StreamWriter | None = None
        try:
            service_reader, service = await asyncio.open_connection(self.host, self.target_port)
            self._writers.add(service)
            await asyncio.gather(_pipe(client_reader, service), _pipe(service_reader, client))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client, service):
                if writer is not None:
                    self._writers.discard(writer)
                    writer.transport.abort()
            self._pipes.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
    writer.transport.abort()
