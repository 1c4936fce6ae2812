"""The server's ``TurnTransport``: plugins start turns the way ``POST /messages`` does.

A plugin's turn passes the subscription gate and spends from the user's turn budget,
gets a session row (a new one, the room's, or the one it names), and runs on the
``TurnRunner``: the session's lock and double-texting policy, the run log (rejoinable
with ``GET /sessions/{id}/run``), titles and the chat log, the tool policy, events to
the user's sockets.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from oracle_core import (
    OracleError,
    ServiceUnavailableError,
    TransportReply,
    TransportTurn,
    TurnBusyError,
    UserInfo,
)
from oracle_server._auth.authenticator import AuthData
from oracle_server._errors import HTTPError
from oracle_server._turns.runner import TurnInput

if TYPE_CHECKING:
    from oracle_server._http.pipeline import SubscriptionCheck
    from oracle_server._http.state import ServerState

__all__ = ["ServerTransport"]


class ServerTransport:
    """Bound to the server's state once it is built (plugins boot before it)."""

    def __init__(self) -> None:
        self._state: ServerState | None = None
        self._subscription: SubscriptionCheck | None = None

    def bind(self, state: ServerState, subscription: SubscriptionCheck | None) -> None:
        """Start serving turns: the server's state and its subscription gate."""
        self._state = state
        self._subscription = subscription

    def _bound(self) -> ServerState:
        if self._state is None:
            raise ServiceUnavailableError(
                "turns cannot start yet", hint="start turns once the server serves"
            )
        return self._state

    async def session_for_room(self, user: UserInfo, room_id: str, *, client: str) -> str:
        state = self._bound()
        records, _ = await state.sessions.list(user.did, limit=1, room_id=room_id)
        if records:
            return records[0].session_id
        created = await state.new_session(user.did, room_id=room_id, client=client)
        return created.session_id

    async def run_turn(self, turn: TransportTurn) -> TransportReply:
        state = self._bound()
        did = turn.user.did
        auth = AuthData(did=did)
        try:
            if self._subscription is not None:
                await self._subscription(auth)
        except HTTPError as exc:
            raise OracleError(str(exc.message), code="subscription.required") from None
        if await state.spend_turn(did) is not None:
            raise OracleError("the user's turn budget is spent for now", code="turn.rate_limited")
        session_id = await self._session(state, turn)
        try:
            started = await state.runner.start(
                TurnInput(
                    auth=auth,
                    session_id=session_id,
                    message=turn.message,
                    request_id=uuid.uuid4().hex,
                    client=turn.client,
                    state=dict(turn.state),
                    room_id=turn.room_id,
                    matrix_user_id=turn.user.matrix_user_id,
                    strategy=turn.strategy,
                )
            )
        except HTTPError as exc:
            if exc.status == 409:
                raise TurnBusyError(str(exc.message)) from None
            raise OracleError(str(exc.message), code=f"turn.refused_{exc.status}") from None
        await started.done.wait()
        text = started.reply.text if started.reply is not None else ""
        return TransportReply(session_id, started.status, text or "", started.run_id)

    async def _session(self, state: ServerState, turn: TransportTurn) -> str:
        did = turn.user.did
        if turn.session_id is None:
            if turn.room_id:
                return await self.session_for_room(turn.user, turn.room_id, client=turn.client)
            return (await state.new_session(did, client=turn.client)).session_id
        if await state.sessions.get(did, turn.session_id) is None:
            await state.new_session(
                did, session_id=turn.session_id, room_id=turn.room_id, client=turn.client
            )
        return turn.session_id
