"""The headers every Memory Engine request carries: a fresh UCAN invocation and the room.

``Authorization: Bearer <invocation>`` is minted per request by the shared MCP client's
``UcanInvocationAuth`` (capability ``ixo:memory``, ability ``memory/*``, audience the
engine's ``did:web``), with ``X-Auth-Type: ucan``, and ``x-room-id`` with the user↔oracle
room when there is one. Nothing here raises into a turn: a failure is an ``AuthFailure``
whose reason names no user data, and the caller degrades.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from oracle_core import RuntimeContext
from oracle_mcp import AuthFailure, UcanInvocationAuth

__all__ = ["MEMORY_ABILITY", "MEMORY_CAPABILITY", "AuthFailure", "EngineAuth", "RoomCache"]

MEMORY_CAPABILITY = "ixo:memory"
MEMORY_ABILITY = "memory/*"


class RoomCache:
    """Each user's room with the oracle, looked up once per ``ttl`` seconds.

    The room changes rarely and the lookup may cost Matrix requests, while one turn asks
    for headers several times (context, tool list, each tool call).
    """

    def __init__(
        self,
        ttl: float = 300.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, str | None]] = OrderedDict()

    async def room_for(self, rt_ctx: RuntimeContext[Any]) -> str | None:
        """The user↔oracle room id, or ``None`` when there is none or Matrix is unavailable."""
        did = rt_ctx.user.did
        entry = self._entries.get(did)
        if entry is not None and entry[0] > self._clock():
            return entry[1]
        room: str | None = None
        if rt_ctx.matrix is not None:
            try:
                room = await rt_ctx.matrix.user_room_id()
            except Exception:  # local backend, or Matrix down: the header is left out
                room = None
        self._entries[did] = (self._clock() + self._ttl, room)
        self._entries.move_to_end(did)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return room


class EngineAuth:
    """Mints the engine headers for one request.

    Args:
        rooms: The room lookup shared by the plugin.
        did_url: Where the engine's ``did:web`` document is served: the contract puts it
            at the MCP host, and the REST surface shares the DID.
    """

    def __init__(self, rooms: RoomCache, did_url: str) -> None:
        self._rooms = rooms
        self._invocation = UcanInvocationAuth(did_url, MEMORY_CAPABILITY, MEMORY_ABILITY)

    async def headers(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str] | AuthFailure:
        """Headers for a request to the engine (MCP or REST), or why there are none."""
        minted = await self._invocation(rt_ctx)
        if isinstance(minted, AuthFailure):
            return minted
        room = await self._rooms.room_for(rt_ctx)
        return {**minted, "x-room-id": room} if room else minted
