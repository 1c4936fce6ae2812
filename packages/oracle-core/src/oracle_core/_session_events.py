"""Session lifecycle events: a session was created, titled or deleted.

The host tells the runtime (``OracleRuntime.session_event``), which calls every loaded
plugin's ``on_session_event`` hook with a ``RuntimeContext`` of that user and session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import BaseMessage

__all__ = ["SESSION_EVENT_KINDS", "SessionEvent", "SessionEventKind"]

SessionEventKind = Literal["session.created", "session.title", "session.deleted"]
SESSION_EVENT_KINDS: tuple[SessionEventKind, ...] = (
    "session.created",
    "session.title",
    "session.deleted",
)


@dataclass(frozen=True)
class SessionEvent:
    """What happened to a session.

    Attributes:
        kind: ``session.created``, ``session.title`` or ``session.deleted``.
        session_id: The session.
        user_did: Its owner.
        title: The session's title (``session.created``, ``session.title``).
        messages: For ``session.deleted``: the thread's messages as they were just
            before it was deleted (they are gone once the hook runs); empty otherwise.
    """

    kind: SessionEventKind
    session_id: str
    user_did: str
    title: str | None = None
    messages: tuple[BaseMessage, ...] = field(default=(), repr=False)

    def payload(self) -> dict[str, str]:
        """What the user's clients are sent: ``{sessionId, title?}``."""
        body = {"sessionId": self.session_id}
        if self.title is not None:
            body["title"] = self.title
        return body
