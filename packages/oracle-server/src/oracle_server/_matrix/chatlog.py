"""The chat log: each turn's messages mirrored into the user's Matrix room (SRV-68).

Every session is one thread of the user's room. The oracle posts the thread's root when
the session is first logged, then the user's message and its reply as thread replies:
``m.text`` with the Markdown ``body`` and its HTML rendering (raw HTML in the Markdown is
escaped, not passed through). In an encrypted room the events are encrypted.
"""

from __future__ import annotations

import logging
from typing import Any

from markdown_it import MarkdownIt

from oracle_server._matrix.client import MatrixClient
from oracle_server._matrix.rooms import UserRooms
from oracle_server._persistence import Sessions

__all__ = ["ChatLog", "message_content"]

logger = logging.getLogger("oracle.server.matrix")

_MARKDOWN = MarkdownIt("commonmark", {"html": False})
ROLE_KEY = "ixo.role"


def message_content(markdown: str, *, thread_root: str | None = None) -> dict[str, Any]:
    """An ``m.text`` message: Markdown body, HTML ``formatted_body``, thread relation."""
    content: dict[str, Any] = {
        "msgtype": "m.text",
        "body": markdown,
        "format": "org.matrix.custom.html",
        "formatted_body": _MARKDOWN.render(markdown).strip(),
    }
    if thread_root is not None:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": thread_root},
        }
    return content


class ChatLog:
    """Posts each turn's user message and reply into the session's thread.

    Args:
        client: The oracle's Matrix client.
        rooms: Finds or creates the user's room.
        sessions: Where each session's room and thread root are remembered.
    """

    def __init__(self, client: MatrixClient, rooms: UserRooms, sessions: Sessions) -> None:
        self.client = client
        self.rooms = rooms
        self.sessions = sessions

    async def log_turn(
        self,
        *,
        user_did: str,
        session_id: str,
        user_message: str,
        reply: str | None,
        home_server: str | None = None,
    ) -> None:
        """Post the turn into the session's thread, starting the thread if needed.

        Raises:
            MatrixError: the homeserver refused or could not be reached (the caller logs
                it; a turn never fails because of the chat log).
        """
        record = await self.sessions.get(user_did, session_id)
        if record is None:
            return
        room_id = await self.rooms.ensure(user_did, home_server)
        thread = record.matrix_thread_id if record.room_id == room_id else None
        if thread is None:
            title = record.title or "Untitled"
            root = message_content(f"**{title}**")
            root["ixo.session_id"] = session_id
            thread = await self.client.send(room_id, "m.room.message", root)
            await self.sessions.set_matrix_thread(
                user_did, session_id, room_id=room_id, thread_id=thread
            )
        sent = message_content(user_message, thread_root=thread)
        sent[ROLE_KEY] = "user"
        await self.client.send(room_id, "m.room.message", sent)
        if reply:
            answer = message_content(reply, thread_root=thread)
            answer[ROLE_KEY] = "assistant"
            await self.client.send(room_id, "m.room.message", answer)
