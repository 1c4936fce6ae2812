"""Ambient services: the interfaces plugins see, and the local implementations core ships.

The server replaces the local ones with IXO implementations (Matrix, chain-backed UCAN,
encrypted secrets); plugins only ever see the interfaces.
"""

from __future__ import annotations

import logging
import re
import secrets as _secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from oracle_core._errors import CapabilityDeniedError, NotConfiguredError
from oracle_core._frontend import FrontendService, LocalFrontendService
from oracle_core._kv import KeyValueService
from oracle_core._matrix import MatrixService
from oracle_core._secrets import SecretsService
from oracle_core._transports import TurnTransport
from oracle_ucan import ability_covers, resource_covers

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from oracle_core._context import UserInfo

__all__ = [
    "AmbientServices",
    "Blob",
    "BlobStore",
    "CapabilityGrant",
    "EventSink",
    "InMemoryBlobStore",
    "LLMAccessor",
    "LoggingEventSink",
    "OracleEvent",
    "PermissiveUcanService",
    "RecordingEventSink",
    "UcanAccessor",
    "UcanService",
]

BLOB_ID_RE = re.compile(r"^blob_[0-9a-f]{16}$")
BLOB_DEFAULT_TTL = 3600
BLOB_MAX_TTL = 86400

EVENT_NAMES: tuple[str, ...] = (
    "tool_call",
    "action_call",
    "render_component",
    "reasoning",
    "browser_tool_call",
    "router",
    "message_cache_invalidation",
    "warning",
)


# --- blob store ----------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    """A stored value and its owner."""

    blob_id: str
    user_did: str
    name: str
    value: str
    expires_at: float


class BlobStore(Protocol):
    """Short-lived per-user values that the model must never see (CORE-44)."""

    async def put(
        self, *, user_did: str, name: str, value: str, ttl_seconds: int | None = None
    ) -> str:
        """Store ``value`` for ``user_did``; returns a ``blob_…`` id."""
        ...

    async def get(self, *, user_did: str, blob_id: str) -> Blob | None:
        """The blob, or ``None`` when unknown, expired or another user's."""
        ...

    def is_valid_blob_id(self, value: str) -> bool:
        """Whether ``value`` has the shape of a blob id (format only)."""
        ...


class InMemoryBlobStore:
    """Blob store in process memory with real TTL and per-user scoping."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._blobs: dict[str, Blob] = {}
        self._clock = clock

    async def put(
        self, *, user_did: str, name: str, value: str, ttl_seconds: int | None = None
    ) -> str:
        if not user_did:
            raise ValueError("user_did is required; take it from rt_ctx.user.did")
        ttl = BLOB_DEFAULT_TTL if ttl_seconds is None else ttl_seconds
        ttl = max(1, min(ttl, BLOB_MAX_TTL))
        now = self._clock()
        self._evict(now)
        blob_id = f"blob_{_secrets.token_hex(8)}"
        self._blobs[blob_id] = Blob(blob_id, user_did, name, value, now + ttl)
        return blob_id

    async def get(self, *, user_did: str, blob_id: str) -> Blob | None:
        blob = self._blobs.get(blob_id)
        if blob is None or blob.user_did != user_did:
            return None
        if blob.expires_at <= self._clock():
            del self._blobs[blob_id]
            return None
        return blob

    def is_valid_blob_id(self, value: str) -> bool:
        return isinstance(value, str) and BLOB_ID_RE.fullmatch(value) is not None

    def _evict(self, now: float) -> None:
        for blob_id in [b for b, blob in self._blobs.items() if blob.expires_at <= now]:
            del self._blobs[blob_id]


# --- UCAN ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CapabilityGrant:
    """One granted capability, matched by ``oracle_ucan``'s ucanto rule.

    Attributes:
        with_: The resource: exact, a ``…/*`` or ``…:*`` wildcard, or ``ucan:*`` for any
            resource. A bare ``*`` is a literal resource, not a wildcard.
        can: The ability: exact, ``ns/*`` for the namespace, or ``*`` for any ability.
    """

    with_: str
    can: str


class UcanAccessor(Protocol):
    """The user's UCAN capabilities and minting for downstream services (CORE-45)."""

    def has_capability(self, resource: str, action: str) -> bool:
        """Whether the user granted ``action`` on ``resource``."""
        ...

    def require_capability(self, resource: str, action: str) -> None:
        """Raise ``CapabilityDeniedError`` unless ``has_capability``."""
        ...

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str | None:
        """Mint an invocation (base64 CAR) for service ``did``.

        ``None`` when the user's delegation does not allow it (callers degrade);
        ``NotConfiguredError`` when this backend cannot mint at all.
        """
        ...

    async def resolve_service_did(self, url: str) -> str:
        """The DID of the service at ``url``."""
        ...

    def has_signing_key(self) -> bool:
        """Whether this oracle can sign invocations."""
        ...

    async def mint_oracle_invocation(
        self, service_url: str, can: str, *, with_: str | None = None
    ) -> str | None:
        """An invocation the oracle issues on its own authority, without the user's proof.

        For services that serve the oracle itself, such as a UCAN store listing the
        delegations users addressed to it. ``with_`` defaults to the oracle's DID; the
        audience is the ``did:web`` of ``service_url``. Each call is single-use (a fresh
        nonce). ``None`` when the oracle has no signing key or the service publishes no
        DID; ``NotConfiguredError`` when this backend cannot mint at all.
        """
        ...

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
        can: str = "*",
    ) -> dict[str, str]:
        """``{"invocation": …}`` or ``{"error": …}`` (text fit to show verbatim).

        The invocation claims ``can`` on ``capability``, proven by ``car`` (a delegation
        addressed to the oracle, e.g. one fetched from a UCAN store): pass the minimum
        ability a call needs so the invocation attenuates the delegation. Each call is
        single-use (a fresh nonce), so a service that refuses replays accepts every one.
        """
        ...


class UcanService(Protocol):
    """Gives each user a UCAN accessor."""

    def for_user(self, user: UserInfo) -> UcanAccessor:
        """The accessor scoped to ``user``."""
        ...


@dataclass
class _GrantingUcan:
    grants: tuple[CapabilityGrant, ...] | None
    minter: UcanAccessor | None = None

    def has_capability(self, resource: str, action: str) -> bool:
        if self.grants is None:
            return True
        return any(
            resource_covers(g.with_, resource) and ability_covers(g.can, action)
            for g in self.grants
        )

    def require_capability(self, resource: str, action: str) -> None:
        if not self.has_capability(resource, action):
            raise CapabilityDeniedError(resource, action)

    def _not_configured(self) -> NotConfiguredError:
        return NotConfiguredError(
            "UCAN minting is not configured in this backend",
            hint="run with ORACLE_BACKEND=ixo so the oracle has a signing key",
        )

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str | None:
        if self.minter is None:
            raise self._not_configured()
        return await self.minter.mint_invocation(did, capability, can=can, skip_cache=skip_cache)

    async def resolve_service_did(self, url: str) -> str:
        if self.minter is None:
            raise self._not_configured()
        return await self.minter.resolve_service_did(url)

    def has_signing_key(self) -> bool:
        return self.minter is not None and self.minter.has_signing_key()

    async def mint_oracle_invocation(
        self, service_url: str, can: str, *, with_: str | None = None
    ) -> str | None:
        if self.minter is None:
            raise self._not_configured()
        return await self.minter.mint_oracle_invocation(service_url, can, with_=with_)

    async def create_invocation_from_delegation(
        self,
        car: str,
        service_url: str,
        capability: str,
        *,
        max_ttl_seconds: int | None = None,
        can: str = "*",
    ) -> dict[str, str]:
        if self.minter is None:
            return {"error": "UCAN minting is not configured for this oracle."}
        if can == "*":
            # Minters written before ``can`` existed keep working for the default.
            return await self.minter.create_invocation_from_delegation(
                car, service_url, capability, max_ttl_seconds=max_ttl_seconds
            )
        return await self.minter.create_invocation_from_delegation(
            car, service_url, capability, max_ttl_seconds=max_ttl_seconds, can=can
        )


@dataclass
class PermissiveUcanService:
    """Local UCAN: grants ``grants`` (``None`` = everything); minting is not configured.

    ``minter`` (tests) supplies minting without changing the grant logic.
    """

    grants: Sequence[CapabilityGrant] | None = None
    minter: UcanAccessor | None = None

    def for_user(self, user: UserInfo) -> UcanAccessor:
        grants = None if self.grants is None else tuple(self.grants)
        return _GrantingUcan(grants, self.minter)


# --- events --------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleEvent:
    """An event for the client of one session (socket.io in the server).

    ``run_id`` is the host's id of the turn that emitted it (``SessionInfo.run_id``).
    """

    name: str
    payload: Mapping[str, Any]
    session_id: str | None = None
    request_id: str | None = None
    user_did: str | None = None
    run_id: str | None = None


@runtime_checkable
class EventSink(Protocol):
    """Where ``rt_ctx.emit`` events go; must not block."""

    def emit(self, event: OracleEvent) -> None:
        """Deliver or queue ``event``."""
        ...


class LoggingEventSink:
    """Default sink with no client attached: logs event names at debug level only."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def emit(self, event: OracleEvent) -> None:
        # Payloads may carry user data; log the name only.
        self._logger.debug("event %s for session %s", event.name, event.session_id)


class RecordingEventSink:
    """Keeps every event in ``events`` (tests, inspection)."""

    def __init__(self) -> None:
        self.events: list[OracleEvent] = []

    def emit(self, event: OracleEvent) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        """Names of the recorded events, in order."""
        return [e.name for e in self.events]


# --- models --------------------------------------------------------------------------


class LLMAccessor(Protocol):
    """``get(role, **params)`` returns a chat model for a ``ModelRole``."""

    def get(self, role: str, **params: Any) -> BaseChatModel:
        """The chat model serving ``role``."""
        ...


@dataclass
class AmbientServices:
    """The services every request can reach (CORE-43, CORE-49).

    ``frontend`` runs browser tools and AG-UI actions in the session's client; the
    local default has no client attached until one is. ``kv`` is the plugins' per-user
    key-value store (``None``: plugins get no ``rt_ctx.kv``).
    """

    secrets: SecretsService
    blob_store: BlobStore
    matrix: MatrixService
    ucan: UcanService
    events: EventSink
    llm: LLMAccessor
    frontend: FrontendService = field(default_factory=LocalFrontendService)
    kv: KeyValueService | None = None
    transport: TurnTransport | None = None
    """Starts turns for plugins; ``None``: the runtime's own ``LocalTurnTransport``."""
