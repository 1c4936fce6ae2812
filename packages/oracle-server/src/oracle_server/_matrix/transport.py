"""Matrix as a transport (SRV-69): a user's message in their room runs a turn.

A text message from the room's user (``@did-ixo-…`` on a trusted homeserver, not the
oracle, not flagged ``INTERNAL``) runs a turn as that user's DID with client ``matrix``.
The session is the message's thread: its root event id, or the message itself when it
starts a thread. The reply is posted into the thread. Group rooms are the group-chat
plugin's, not this.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import nio

from oracle_core import SessionEvent
from oracle_server._auth.authenticator import AuthData
from oracle_server._matrix.chatlog import ROLE_KEY, message_content
from oracle_server._matrix.client import MatrixClient
from oracle_server._matrix.rooms import UserRooms
from oracle_server._persistence import SessionRecord, Sessions
from oracle_server._turns.runner import ActiveTurn, TurnInput

__all__ = ["MatrixTransport"]

logger = logging.getLogger("oracle.server.matrix")

INTERNAL_FLAG = "INTERNAL"


def thread_root(content: dict[str, Any], event_id: str) -> str:
    """The event id of the message's thread root (the message itself if it has none)."""
    relation = content.get("m.relates_to")
    if isinstance(relation, dict) and relation.get("rel_type") == "m.thread":
        root = relation.get("event_id")
        if isinstance(root, str) and root:
            return root
    return event_id


def is_internal(content: dict[str, Any]) -> bool:
    """Whether the message is flagged ``INTERNAL`` (posted by tooling, never a turn)."""
    return bool(content.get(INTERNAL_FLAG)) or content.get("msgtype") == INTERNAL_FLAG


class MatrixTransport:
    """Runs turns for messages users send in their rooms, and answers in the thread.

    Args:
        client: The oracle's Matrix client.
        rooms: The users' rooms.
        sessions: The session store.
        start_turn: Starts a turn (the server's ``TurnRunner.start``).
        oracle: ``(name, did, entity_did)`` written on sessions it creates.
        announce: Tells plugins and the user's sockets of each session it creates.
    """

    def __init__(
        self,
        client: MatrixClient,
        rooms: UserRooms,
        sessions: Sessions,
        start_turn: Callable[[TurnInput], Awaitable[ActiveTurn]],
        oracle: tuple[str, str, str | None],
        *,
        announce: Callable[[SessionEvent], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.rooms = rooms
        self.sessions = sessions
        self.start_turn = start_turn
        self.oracle = oracle
        self.announce = announce

    async def on_message(self, room: nio.MatrixRoom, event: nio.Event) -> None:
        """Handle one timeline message (the client's message callback)."""
        if not isinstance(event, nio.RoomMessageText) or event.sender == self.client.user_id:
            return
        content = dict(event.source.get("content", {}))
        if is_internal(content) or ROLE_KEY in content:
            return
        user_did = self.rooms.user_did(event.sender)
        if user_did is None:
            return  # not a user's account, or one on a homeserver that is not trusted
        home_server = event.sender.partition(":")[2]
        if await self.rooms.find(user_did) != room.room_id:
            return  # not the user's room with this oracle: another room, or a group chat
        root = thread_root(content, event.event_id)
        await self._ensure_session(user_did, root, room.room_id)
        turn = await self.start_turn(
            TurnInput(
                auth=AuthData(did=user_did, home_server=home_server),
                session_id=root,
                message=event.body,
                request_id=uuid.uuid4().hex,
                client="matrix",
                room_id=room.room_id,
                matrix_user_id=event.sender,
            )
        )
        await turn.done.wait()
        if turn.status != "finished" or turn.reply is None or not turn.reply.text:
            logger.warning("matrix.turn_unanswered: status %s", turn.status)
            return
        answer = message_content(turn.reply.text, thread_root=root)
        answer[ROLE_KEY] = "assistant"
        await self.client.send(room.room_id, "m.room.message", answer)

    async def _ensure_session(self, user_did: str, root: str, room_id: str) -> None:
        if await self.sessions.get(user_did, root) is not None:
            return
        name, did, entity = self.oracle
        now = datetime.now(UTC)
        record = SessionRecord(
            session_id=root,
            user_did=user_did,
            title="Untitled",
            created_at=now,
            last_updated_at=now,
            oracle_name=name,
            oracle_did=did,
            oracle_entity_did=entity,
            room_id=room_id,
            client="matrix",
            matrix_thread_id=root,
        )
        created = await self.sessions.create(record)
        if self.announce is not None:
            await self.announce(
                SessionEvent("session.created", created.session_id, user_did, title=created.title)
            )
