"""What route handlers reach: the booted runtime, storage and turn runner."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from oracle_core import OracleRuntime, SessionEvent
from oracle_server._auth.authenticator import AuthData, Authenticator
from oracle_server._auth.keys import OracleKey
from oracle_server._errors import HTTPError
from oracle_server._http.parsing import json_body_errors, parse_json
from oracle_server._persistence import SessionRecord, Sessions, Storage
from oracle_server._settings import ServerSettings
from oracle_server._turns.bookkeeping import TurnBookkeeping
from oracle_server._turns.runner import TurnRunner

if TYPE_CHECKING:
    from oracle_server._http.ratelimit import RateLimiter
    from oracle_server._matrix.layer import MatrixLayer
    from oracle_ucan import Ed25519Signer

__all__ = ["ServerState", "auth_of", "read_body", "server_of"]


@dataclass
class ServerState:
    """The server's parts, shared by every request."""

    runtime: OracleRuntime
    settings: ServerSettings
    storage: Storage
    runner: TurnRunner
    bookkeeping: TurnBookkeeping
    authenticator: Authenticator
    oracle_did: str
    oracle_name: str
    checkpointers: Any
    sessions: Sessions
    limiter: RateLimiter
    key: OracleKey
    models: list[dict[str, Any]] = field(default_factory=list)
    matrix: MatrixLayer | None = None
    announce: Callable[[SessionEvent], Awaitable[None]] | None = None
    """Tells the user's sockets and the plugins of a session created or deleted."""

    @property
    def signer(self) -> Ed25519Signer | None:
        """The oracle's UCAN signing key, once known."""
        return self.key.signer

    @property
    def ready(self) -> bool:
        """Whether protected routes may be served (SRV-10).

        Matrix loaded (or off) and the UCAN signing key loaded (or no source of one:
        without Matrix, ``ORACLE_SIGNING_MNEMONIC`` is the only source and loads at boot).
        """
        if self.matrix is None:
            return True
        return self.matrix.state == "loaded" and self.signer is not None

    async def new_session(
        self,
        did: str,
        *,
        session_id: str | None = None,
        room_id: str | None = None,
        client: str = "portal",
    ) -> SessionRecord:
        """Create an empty session of ``did``'s, titled ``Untitled``: a fresh id unless
        one is given (a transport's thread), in ``room_id`` when it has a room."""
        now = datetime.now(UTC)
        record = SessionRecord(
            session_id=session_id or str(uuid.uuid4()),
            user_did=did,
            title="Untitled",
            created_at=now,
            last_updated_at=now,
            oracle_name=self.oracle_name,
            oracle_did=self.oracle_did,
            oracle_entity_did=self.settings.oracle_entity_did,
            room_id=room_id,
            client=client,
        )
        created = await self.sessions.create(record)
        await self.announce_session(
            SessionEvent("session.created", created.session_id, did, title=created.title)
        )
        return created

    async def announce_session(self, event: SessionEvent) -> None:
        """Send ``event`` to the user's sockets and the plugins' ``on_session_event``."""
        if self.announce is not None:
            await self.announce(event)

    async def spend_turn(self, did: str) -> int | None:
        """Count one turn in ``did``'s ``turns`` budget, the one ``POST /messages/{id}``
        spends (work started some other way: a ``/mcp`` tool call, an A2A message).

        Returns:
            ``None`` when allowed; else the seconds until the budget has room again.
        """
        decision = await self.limiter.hit(
            f"{self.oracle_did}:turns:did:{did}",
            limit=self.settings.turn_limit,
            window_seconds=self.settings.throttle_ttl_seconds,
        )
        return None if decision.allowed else decision.retry_after

    @property
    def matrix_state(self) -> str:
        """``disabled``, or the Matrix layer's ``pending`` / ``loaded`` / ``failed``."""
        return "disabled" if self.matrix is None else self.matrix.state


def server_of(request: Request) -> ServerState:
    """The server state of the app serving ``request``."""
    state: ServerState = request.app.state.oracle
    return state


def auth_of(request: Request) -> AuthData:
    """The authenticated caller (set by the protection middleware)."""
    auth = request.scope.get("state", {}).get("auth")
    if not isinstance(auth, AuthData):
        raise HTTPError(401, "Missing UCAN authentication")
    return auth


M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request, model: type[M]) -> M:
    """Validate the JSON body; 400 with a message list on failure (SRV-15)."""
    data = parse_json(await request.body())
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise HTTPError(400, json_body_errors(exc.errors())) from exc
