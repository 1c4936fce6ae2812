"""A connection the client has closed is closed by the server at once.

Hypercorn (0.17, 0.18) keeps an idle keep-alive connection's socket open after the client
closed it, until its keep-alive timer fires: the read loop ends on the client's FIN, but
the connection's task group still holds the timer, and the socket is closed only when
that group exits. With the keep-alive this server needs (``HTTP_KEEP_ALIVE_SECONDS``, 75 s
by default, longer than its clients') every connection a client drops lingers in
``CLOSE_WAIT`` for up to that long; under a load of short-lived client connections the
process holds hundreds of dead sockets and reaches its descriptor limit.

Hypercorn offers no hook for this, so the read loop is wrapped once per process: when it
ends, the keep-alive timer is stopped. No request can arrive on the connection any more,
so the timer has nothing left to wait for; a response still being sent ends as it does
on any disconnect, and then the connection closes.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["close_connections_on_eof"]

_MARK = "_oracle_stops_idle_on_eof"


def close_connections_on_eof() -> None:
    """Make Hypercorn's asyncio server close a connection when its client has (idempotent)."""
    from hypercorn.asyncio.tcp_server import TCPServer

    read_data = TCPServer._read_data
    if getattr(read_data, _MARK, False):
        return

    @functools.wraps(read_data)
    async def _read_data(self: Any) -> None:
        try:
            await read_data(self)
        finally:
            idle = getattr(self, "idle_task", None)
            if idle is not None:
                await idle.stop()

    setattr(_read_data, _MARK, True)
    TCPServer._read_data = _read_data  # type: ignore[method-assign]
