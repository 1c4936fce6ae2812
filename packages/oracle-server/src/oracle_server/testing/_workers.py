"""The workers' hub with connected workers in one process, for the backends' tests."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

from oracle_server._workers.connection import HubConnection
from oracle_server._workers.hub import WorkerHub

__all__ = ["connected_workers"]


@contextlib.asynccontextmanager
async def connected_workers(count: int) -> AsyncIterator[tuple[WorkerHub, list[HubConnection]]]:
    """A hub and ``count`` worker connections to it, over real socket pairs.

    What ``oracle serve --workers`` sets up across processes, here in one: each
    connection is what one worker's backends (``HubRunLog``, ``HubTurnLocks``, …) use.
    Closing a connection is what the hub sees when its worker dies.
    """
    hub = WorkerHub()
    connections: list[HubConnection] = []
    try:
        for index in range(count):
            ours, theirs = socket.socketpair()
            await hub.attach(ours)
            connections.append(await HubConnection.open(theirs, worker=f"worker-{index}"))
        yield hub, connections
    finally:
        for connection in connections:
            await connection.aclose()
        await hub.aclose()
