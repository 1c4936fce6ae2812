"""Session lifecycle events told to the plugins and to the user's sockets."""

from __future__ import annotations

from oracle_core import EventSink, OracleEvent, OracleRuntime, SessionEvent

__all__ = ["SessionAnnouncer"]


class SessionAnnouncer:
    """Sends a ``SessionEvent`` to the user's sockets, then to the plugins' hooks.

    Args:
        runtime: Calls the plugins' ``on_session_event``.
        events: The server's event sink (the gateway sends these to every socket of the
            user, bare, not in the envelope).
    """

    def __init__(self, runtime: OracleRuntime, events: EventSink) -> None:
        self._runtime = runtime
        self._events = events

    async def __call__(self, event: SessionEvent) -> None:
        self._events.emit(
            OracleEvent(
                event.kind,
                event.payload(),
                session_id=event.session_id,
                user_did=event.user_did,
            )
        )
        await self._runtime.session_event(event)
