"""What route handlers reach: the booted runtime, storage and turn runner."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from oracle_core import OracleRuntime
from oracle_server._auth.authenticator import AuthData, Authenticator
from oracle_server._http.errors import HTTPError
from oracle_server._http.pipeline import json_body_errors, parse_json
from oracle_server._persistence import Sessions, Storage
from oracle_server._settings import ServerSettings
from oracle_server._turns.runner import TurnRunner

__all__ = ["ServerState", "auth_of", "read_body", "server_of"]


@dataclass
class ServerState:
    """The server's parts, shared by every request."""

    runtime: OracleRuntime
    settings: ServerSettings
    storage: Storage
    runner: TurnRunner
    authenticator: Authenticator
    oracle_did: str
    oracle_name: str
    checkpointers: Any
    sessions: Sessions
    models: list[dict[str, Any]] = field(default_factory=list)
    limiter: Any = None
    signer: Any = None
    matrix: Any = None
    background: set[asyncio.Task[None]] = field(default_factory=set)

    async def finish_background(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Let post-turn work (session titles) finish, up to ``timeout`` seconds."""
        if self.background:
            await asyncio.wait(list(self.background), timeout=timeout)

    @property
    def ready(self) -> bool:
        """Whether protected routes may be served (SRV-10).

        Matrix loaded (or off) and the UCAN signing key loaded (or no source of one:
        without Matrix, ``ORACLE_SIGNING_MNEMONIC`` is the only source and loads at boot).
        """
        if self.matrix is None:
            return True
        return bool(self.matrix.state == "loaded") and self.signer is not None

    @property
    def matrix_state(self) -> str:
        """``disabled``, or the Matrix layer's ``pending`` / ``loaded`` / ``failed``."""
        return "disabled" if self.matrix is None else str(self.matrix.state)


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
