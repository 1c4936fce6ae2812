"""Users' secrets in their Matrix room, as the IXO clients keep them.

Each secret is two events in the user's room with the oracle:

- the index, a state event ``ixo.room.secret.index`` whose state key is the secret's
  name and whose content is ``{eventId, publicKeyId}`` (``{}`` once deleted);
- the value, a timeline event ``ixo.room.secret`` ``{value}``: a compact JWE
  (``ECDH-ES+A256KW`` / ``A256GCM``) encrypted to the oracle's P-256 key, itself sent in
  the end-to-end encrypted room.

The oracle's key is read once from its account room (``ixo.room.encryption_key.index`` /
``p256_encryption`` names the active key's event, whose ``encrypted_private_key`` is the
JWK under ``MATRIX_VALUE_PIN``). Without it the names are still listed and no value can
be read. Reading never fails a request: a value that cannot be fetched or decrypted is
left out and logged by name only. Values are cached in memory for a day, and only while
the index still points at the event they came from, so a replaced secret is read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from joserfc import jwe
from joserfc.errors import JoseError
from joserfc.jwk import ECKey

from oracle_core import (
    SECRETS_PER_USER,
    SecretIndexEntry,
    SecretsError,
    ServiceUnavailableError,
    UserInfo,
    check_secret,
    visible_secret,
)
from oracle_server._matrix.client import MatrixClient, MatrixError
from oracle_server._matrix.values import ValueDecryptionError, decrypt_value

if TYPE_CHECKING:
    from oracle_server._matrix.rooms import UserRooms

__all__ = [
    "INDEX_EVENT_TYPE",
    "KEY_INDEX_STATE_KEY",
    "KEY_INDEX_TYPE",
    "VALUE_EVENT_TYPE",
    "MatrixSecretsService",
    "SecretsSource",
    "load_secrets_key",
]

logger = logging.getLogger("oracle.server.matrix.secrets")

INDEX_EVENT_TYPE = "ixo.room.secret.index"
VALUE_EVENT_TYPE = "ixo.room.secret"
KEY_INDEX_TYPE = "ixo.room.encryption_key.index"
KEY_INDEX_STATE_KEY = "p256_encryption"
KEY_ID = "p256_encryption"
JWE_HEADER = {"alg": "ECDH-ES+A256KW", "enc": "A256GCM"}
CACHE_SECONDS = 24 * 3600
INDEX_CACHE_SECONDS = 30.0
"""How long a user's index is reused: every turn's prompt lists the names, and one read
of the room's state per turn per user would put the homeserver on every turn's path."""
INDEX_TIMEOUT_SECONDS = 3.0
"""A turn waits at most this long for the index; a slow homeserver means no names listed
this turn, never a stalled turn."""
VALUES_TIMEOUT_SECONDS = 15.0


def _content(event: dict[str, Any] | None) -> dict[str, Any] | None:
    """An event's content, from its decrypted form when it was end-to-end encrypted."""
    if event is None:
        return None
    source = event.get("decrypted", event)
    if source.get("type") == "m.room.encrypted":
        return None  # the oracle does not hold the room key
    content = source.get("content")
    return content if isinstance(content, dict) else None


async def load_secrets_key(client: MatrixClient, account_room_id: str, pin: str) -> ECKey | None:
    """The oracle's P-256 key from its account room, or ``None`` (logged) when absent."""
    index = await client.state_event(account_room_id, KEY_INDEX_TYPE, KEY_INDEX_STATE_KEY)
    keys = (index or {}).get("keys")
    active = None
    if isinstance(keys, dict):
        active = next(
            (k for k in keys.values() if isinstance(k, dict) and k.get("active") is True), None
        )
    event_id = None if active is None else active.get("eventId")
    if not isinstance(event_id, str) or not event_id:
        logger.warning(
            "matrix.secrets_key_missing: no active P-256 key in the account room; users' "
            "secret values cannot be read (provision one with the setup CLI)"
        )
        return None
    content = _content(await client.get_event(account_room_id, event_id))
    encrypted = (content or {}).get("encrypted_private_key")
    if not isinstance(encrypted, str):
        logger.warning("matrix.secrets_key_missing: the key's event holds no private key")
        return None
    try:
        jwk = json.loads(decrypt_value(encrypted, pin))
        key = ECKey.import_key(jwk)
    except (ValueDecryptionError, ValueError, JoseError) as exc:
        logger.error("matrix.secrets_key_unreadable: %s", str(exc).split(":")[0])
        return None
    if key.curve_name != "P-256" or not key.is_private:
        logger.error("matrix.secrets_key_unreadable: not a private P-256 key")
        return None
    return key


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The homeserver's answers to a write, as the secrets API's errors."""
    try:
        yield
    except MatrixError as exc:
        if exc.code == "M_FORBIDDEN":
            raise SecretsError(
                "the oracle may not write to the user's room (its power level is too low)",
                code="secrets.forbidden",
            ) from exc
        raise ServiceUnavailableError(
            f"the homeserver refused or failed the write ({exc.code})", hint="retry later"
        ) from exc


class SecretsSource(Protocol):
    """What the service reads from the Matrix layer: its client once logged in, the
    users' rooms, its state and the oracle's P-256 key."""

    @property
    def client(self) -> MatrixClient | None: ...

    @property
    def rooms(self) -> UserRooms | None: ...

    @property
    def state(self) -> str: ...

    @property
    def secrets_key(self) -> ECKey | None: ...


@dataclass
class _Cached:
    event_id: str
    value: str
    expires_at: float


class MatrixSecretsService:
    """``SecretsService`` over users' rooms; the layer supplies the client and the key."""

    def __init__(self, layer: SecretsSource, *, clock: Any = time.monotonic) -> None:
        self._layer = layer
        self._clock = clock
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._indexes: dict[str, tuple[float, dict[str, str]]] = {}

    def for_user(self, user: UserInfo) -> _RoomSecrets:
        """The accessor of ``user``'s secrets."""
        return _RoomSecrets(self, user.did)

    # --- shared by the accessors -----------------------------------------------------

    def _client(self) -> MatrixClient:
        client, rooms = self._layer.client, self._layer.rooms
        if client is None or rooms is None or self._layer.state != "loaded":
            raise ServiceUnavailableError(
                "Matrix is not ready", hint="the Matrix layer is still starting or failed"
            )
        return client

    async def room(self, user_did: str) -> str | None:
        """The user's room with the oracle, where their secrets are."""
        self._client()
        assert self._layer.rooms is not None
        return await self._layer.rooms.find(user_did)

    async def index(self, room_id: str, *, fresh: bool = False) -> dict[str, str]:
        """Secret name → the event id of its value (reused for a few seconds unless
        ``fresh``)."""
        cached = self._indexes.get(room_id)
        if not fresh and cached is not None and cached[0] > self._clock():
            return dict(cached[1])
        state = await self._client().room_state(room_id)
        out = {}
        for event in state:
            name, content = event.get("state_key"), event.get("content") or {}
            event_id = content.get("eventId") if isinstance(content, dict) else None
            if (
                event.get("type") == INDEX_EVENT_TYPE
                and isinstance(name, str)
                and isinstance(event_id, str)
                and event_id
            ):
                out[name] = event_id
        self._indexes[room_id] = (self._clock() + INDEX_CACHE_SECONDS, dict(out))
        return out

    async def value(self, room_id: str, name: str, event_id: str) -> str | None:
        """One secret's value, or ``None`` (logged) when it cannot be read."""
        cached = self._cache.get((room_id, name))
        if cached is not None and cached.event_id == event_id and cached.expires_at > self._clock():
            return cached.value
        key = self._layer.secrets_key
        if key is None:
            logger.warning("matrix.secret_unreadable: %s (no P-256 key)", name)
            return None
        try:
            content = _content(await self._client().get_event(room_id, event_id))
            token = (content or {}).get("value")
            if not isinstance(token, str) or not token:
                logger.warning("matrix.secret_unreadable: %s (no readable value)", name)
                return None
            value = jwe.decrypt_compact(token, key).plaintext
            text = (value or b"").decode()
        except (MatrixError, JoseError, ValueError, UnicodeDecodeError) as exc:
            logger.warning("matrix.secret_unreadable: %s (%s)", name, type(exc).__name__)
            return None
        self._cache[(room_id, name)] = _Cached(event_id, text, self._clock() + CACHE_SECONDS)
        return text

    async def put(self, user_did: str, name: str, value: str) -> None:
        """Write a secret as the clients do: the encrypted value, then the index."""
        with _refusals():
            await self._put(user_did, name, value)

    async def delete(self, user_did: str, name: str) -> bool:
        """Empty the secret's index entry and redact its value."""
        with _refusals():
            return await self._delete(user_did, name)

    async def _put(self, user_did: str, name: str, value: str) -> None:
        data = check_secret(name, value)
        key = self._layer.secrets_key
        if key is None:
            raise SecretsError(
                "this oracle has no P-256 key to encrypt secrets to",
                code="secrets.unavailable",
            )
        client = self._client()
        room_id = await self.room(user_did)
        if room_id is None:
            raise SecretsError(
                "the user has no room with this oracle yet", code="secrets.unavailable"
            )
        index = await self.index(room_id, fresh=True)
        if name not in index and len(index) >= SECRETS_PER_USER:
            raise SecretsError(
                f"at most {SECRETS_PER_USER} secrets per user", code="secrets.too_many"
            )
        public = ECKey.import_key(key.as_dict(private=False))
        token = jwe.encrypt_compact(JWE_HEADER, data, public)
        event_id = await client.send(room_id, VALUE_EVENT_TYPE, {"value": token})
        await client.put_state(
            room_id, INDEX_EVENT_TYPE, {"eventId": event_id, "publicKeyId": KEY_ID}, name
        )
        self._cache[(room_id, name)] = _Cached(event_id, value, self._clock() + CACHE_SECONDS)
        self._indexes.pop(room_id, None)
        await self._redact(client, room_id, index.get(name))

    async def _delete(self, user_did: str, name: str) -> bool:
        client = self._client()
        room_id = await self.room(user_did)
        if room_id is None:
            return False
        previous = (await self.index(room_id, fresh=True)).get(name)
        if previous is None:
            return False
        await client.put_state(room_id, INDEX_EVENT_TYPE, {}, name)
        self._cache.pop((room_id, name), None)
        self._indexes.pop(room_id, None)
        await self._redact(client, room_id, previous)
        return True

    async def _redact(self, client: MatrixClient, room_id: str, event_id: str | None) -> None:
        if event_id is None:
            return
        try:
            await client.redact(room_id, event_id, "Secret replaced")
        except MatrixError as exc:  # best effort: the index no longer points at it
            logger.warning("matrix.secret_redact_failed: %s", exc.code)


@dataclass
class _RoomSecrets:
    service: MatrixSecretsService
    user_did: str

    async def _index(self, timeout: float) -> tuple[str, dict[str, str]] | None:  # noqa: ASYNC109
        # Reading fails soft: with Matrix down the user simply has no secrets this turn.
        try:
            async with asyncio.timeout(timeout):
                room_id = await self.service.room(self.user_did)
                if room_id is None:
                    return None
                return room_id, await self.service.index(room_id)
        except (MatrixError, ServiceUnavailableError, TimeoutError) as exc:
            logger.warning(
                "matrix.secrets_index_failed: %s", getattr(exc, "code", type(exc).__name__)
            )
            return None

    async def get_index(self) -> list[SecretIndexEntry]:
        found = await self._index(INDEX_TIMEOUT_SECONDS)
        names = {} if found is None else found[1]
        return [SecretIndexEntry(name=n) for n in sorted(names) if visible_secret(n)]

    async def get_values(self, keys: Sequence[str]) -> dict[str, str]:
        found = await self._index(VALUES_TIMEOUT_SECONDS)
        if found is None:
            return {}
        room_id, index = found
        out: dict[str, str] = {}
        try:
            async with asyncio.timeout(VALUES_TIMEOUT_SECONDS):
                for name in dict.fromkeys(keys):
                    event_id = index.get(name)
                    if event_id is None or not visible_secret(name):
                        continue
                    value = await self.service.value(room_id, name, event_id)
                    if value is not None:
                        out[name] = value
        except TimeoutError:
            logger.warning("matrix.secrets_slow: the homeserver did not answer in time")
        return out

    async def put(self, name: str, value: str) -> None:
        await self.service.put(self.user_did, name, value)

    async def delete(self, name: str) -> bool:
        return await self.service.delete(self.user_did, name)
