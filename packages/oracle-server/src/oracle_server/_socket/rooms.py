"""The sockets of each session on this replica, and which one a turn's client calls go to.

A browser tool or AG-UI action runs in one client, never in every tab of the session:
the socket the turn names (its ``ws_id``), else the socket that took the turn's earlier
calls, else the session's newest socket. A turn's calls stay on one socket while it is
connected, so a tab opened mid-turn does not take over half of its calls.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["SessionSockets"]

MAX_TURN_BINDINGS = 4096
"""Turns remembered with their socket; the oldest is forgotten beyond this (a finished
turn's binding is never read again, and one still running only loses its stickiness)."""


class SessionSockets:
    """Sockets by session, in the order they connected, and the socket of each turn."""

    def __init__(self) -> None:
        self._rooms: dict[str, dict[str, None]] = {}
        self._session_of: dict[str, str] = {}
        self._turns: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        """The number of sessions with a socket here."""
        return len(self._rooms)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._rooms

    def count(self, session_id: str) -> int:
        """How many sockets of ``session_id`` are connected here."""
        return len(self._rooms.get(session_id, ()))

    def add(self, session_id: str, socket_id: str) -> None:
        """``socket_id`` joined ``session_id``: it is now the session's newest socket."""
        self._rooms.setdefault(session_id, {})[socket_id] = None
        self._session_of[socket_id] = session_id

    def remove(self, socket_id: str) -> bool:
        """``socket_id`` left; ``True`` when it was its session's last socket here."""
        session_id = self._session_of.pop(socket_id, None)
        for turn in [t for t, sid in self._turns.items() if sid == socket_id]:
            del self._turns[turn]
        room = self._rooms.get(session_id or "")
        if session_id is None or room is None:
            return False
        room.pop(socket_id, None)
        if room:
            return False
        del self._rooms[session_id]
        return True

    def target(
        self, session_id: str, *, request_id: str | None, socket_id: str | None
    ) -> str | None:
        """The socket that runs a call of the turn ``request_id``; ``None``: none here.

        Args:
            session_id: The turn's session.
            request_id: The turn; its first call binds it to the socket chosen.
            socket_id: The socket the turn names, used while it is in the session.
        """
        room = self._rooms.get(session_id)
        if not room:
            return None
        turn = (session_id, request_id) if request_id else None
        bound = self._turns.get(turn) if turn else None
        for candidate in (socket_id, bound):
            if candidate is not None and candidate in room:
                chosen = candidate
                break
        else:
            chosen = next(reversed(room))
        if turn:
            self._turns[turn] = chosen
            self._turns.move_to_end(turn)
            while len(self._turns) > MAX_TURN_BINDINGS:
                self._turns.popitem(last=False)
        return chosen
