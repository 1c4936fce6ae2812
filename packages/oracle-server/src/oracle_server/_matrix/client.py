"""The oracle's Matrix client: matrix-nio with end-to-end encryption (SRV-64).

:class:`MatrixClient` wraps one ``nio.AsyncClient``: login (access token first, then
password), the persistent crypto store, a sync loop that reconnects with backoff and
joins the invites of users on trusted homeservers, and the few operations the server
needs, each turning nio's error responses into :class:`MatrixError` with a stable
``code`` and a ``transient`` flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import nio

__all__ = ["MatrixClient", "MatrixError"]

logger = logging.getLogger("oracle.server.matrix")

# Errors that say "try again later" rather than "this will never work".
_TRANSIENT_CODES = frozenset({"M_LIMIT_EXCEEDED", "network"})
SYNC_TIMEOUT_MS = 30_000
# Written beside the crypto store after a password login: that device's session.
CREDENTIALS_FILE = "credentials.json"
RECONNECT_FIRST_DELAY = 1.0
RECONNECT_MAX_DELAY = 60.0

R = TypeVar("R")
RoomListener = Callable[[dict[str, Any]], None]


class MatrixError(Exception):
    """A Matrix request failed.

    Attributes:
        code: The Matrix ``errcode`` (``M_NOT_FOUND``, ``M_FORBIDDEN``…), or ``network``
            when the homeserver could not be reached.
        status: The HTTP status, when there was a response.
        transient: Whether retrying later may succeed (network, 5xx, rate limits).
    """

    def __init__(self, message: str, *, code: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.transient = (
            code in _TRANSIENT_CODES
            or (status is not None and status >= 500)
            or (code == "M_UNKNOWN" and status is None)
        )


def _error(what: str, response: nio.ErrorResponse) -> MatrixError:
    code = str(response.status_code or "M_UNKNOWN")
    status = getattr(response, "transport_response", None)
    http_status = getattr(status, "status", None)
    return MatrixError(f"{what}: {code} {response.message}", code=code, status=http_status)


def _ok(what: str, response: R) -> R:
    if isinstance(response, nio.ErrorResponse):
        raise _error(what, response)
    return response


async def _call(what: str, request: Awaitable[R]) -> R:
    """Await a nio request; network failures become a transient :class:`MatrixError`."""
    try:
        response = await request
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise MatrixError(
            f"{what}: homeserver unreachable ({type(exc).__name__})", code="network"
        ) from exc
    return _ok(what, response)


class MatrixClient:
    """One logged-in Matrix account with its crypto store.

    Args:
        base_url: ``MATRIX_BASE_URL``.
        user_id: ``MATRIX_ORACLE_ADMIN_USER_ID``.
        store_path: Directory of the nio store (``MATRIX_STORE_PATH/nio``); it holds the
            device's E2EE keys and must persist.
        access_token: Used first (``whoami`` gives the device).
        password: Used when the token is missing or rejected; a new device.
        request_timeout: Seconds per request.
        max_retries: Retries of a request that hit a network error.
        trusted_homeservers: Server names whose users may speak for a DID and invite the
            oracle (``MATRIX_TRUSTED_HOMESERVERS``); empty: the account's own server only.
    """

    def __init__(
        self,
        *,
        base_url: str,
        user_id: str,
        store_path: str | Path,
        access_token: str | None = None,
        password: str | None = None,
        request_timeout: float = 30.0,
        max_retries: int = 2,
        trusted_homeservers: Collection[str] = (),
    ) -> None:
        self.store_path = Path(store_path)
        self.store_path.mkdir(parents=True, exist_ok=True)
        self._base_url = base_url
        self._config = nio.AsyncClientConfig(
            encryption_enabled=True,
            store_sync_tokens=True,
            max_timeouts=max_retries,
            max_limit_exceeded=3,
            backoff_factor=0.2,
            max_timeout_retry_wait_time=5.0,
            request_timeout=request_timeout,
        )
        self._user_id = user_id
        self.trusted_homeservers = frozenset(trusted_homeservers) or frozenset({self.server_name})
        self.nio = self._new_nio(user_id)
        self._access_token = access_token
        self._password = password
        self._sync_task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._sync_seen = asyncio.Condition()
        self._closed = False
        self._handlers: set[asyncio.Task[None]] = set()
        self.on_room_message: Callable[[nio.MatrixRoom, nio.Event], Awaitable[None]] | None = None
        self._room_listeners: dict[str, set[RoomListener]] = {}

    @property
    def user_id(self) -> str:
        """The account's Matrix user id (``MATRIX_ORACLE_ADMIN_USER_ID``)."""
        return self._user_id

    @property
    def server_name(self) -> str:
        """The homeserver name from the user id (``@bot:example.org`` → ``example.org``)."""
        return self.user_id.partition(":")[2]

    def is_trusted(self, user_id: str) -> bool:
        """Whether ``user_id`` is on a trusted homeserver.

        A homeserver vouches for the user ids of its own server name only, and anyone can
        run one: ``@did-ixo-victim:evil.example`` says nothing about ``did:ixo:victim``
        unless ``evil.example`` is trusted.
        """
        localpart, sep, server = user_id.partition(":")
        return bool(sep and localpart.startswith("@") and server in self.trusted_homeservers)

    # --- login and sync --------------------------------------------------------------

    def _new_nio(self, user_id: str) -> nio.AsyncClient:
        return nio.AsyncClient(
            self._base_url, user_id, store_path=str(self.store_path), config=self._config
        )

    async def login(self) -> None:
        """Log in and load the crypto store of the device.

        Tried in order: the session this store saved after an earlier password login (its
        device matches the store), ``MATRIX_ORACLE_ADMIN_ACCESS_TOKEN``, then the password.
        A token that is rejected, or whose device's keys on the server are not the store's
        (the store was lost), falls through to the next. A password login creates a new
        device (and E2EE identity), with a warning, and is saved beside the crypto store
        so the next start reuses that device instead of creating another.

        Raises:
            MatrixError: no credential works, or the homeserver is unreachable.
        """
        saved = self._saved_token()
        tokens = [t for t in dict.fromkeys((saved, self._access_token)) if t]
        for token in tokens:
            try:
                await self._token_login(token)
                return
            except MatrixError as exc:
                if exc.transient or exc.code == "M_FORBIDDEN":
                    raise
                logger.warning(
                    "matrix.token_unusable: %s access token cannot be used (%s)",
                    "the saved" if token == saved else "the configured",
                    exc.code,
                )
                await self.nio.close()
                self.nio = self._new_nio(self.user_id)
        if not self._password:
            raise MatrixError("login: no usable access token or password", code="M_FORBIDDEN")
        logger.warning(
            "matrix.device_replaced: logging in with the password creates a NEW device and "
            "a new E2EE identity: older encrypted messages will not decrypt on it"
        )
        await _call("login", self.nio.login(self._password, device_name="oracle"))
        await self._upload_keys()
        self._save_token()

    @property
    def _credentials_path(self) -> Path:
        return self.store_path / CREDENTIALS_FILE

    def _saved_token(self) -> str | None:
        try:
            saved = json.loads(self._credentials_path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict) or saved.get("user_id") != self.user_id:
            return None
        token = saved.get("access_token")
        return token if isinstance(token, str) and token else None

    def _save_token(self) -> None:
        record = {
            "user_id": self.user_id,
            "device_id": self.nio.device_id,
            "access_token": self.nio.access_token,
        }
        temporary = self._credentials_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        temporary.chmod(0o600)
        os.replace(temporary, self._credentials_path)

    async def _token_login(self, token: str) -> None:
        self.nio.access_token = token
        whoami = await _call("whoami", self.nio.whoami())
        if whoami.user_id != self.user_id:
            raise MatrixError(
                f"whoami: the access token belongs to {whoami.user_id}, not {self.user_id}",
                code="M_FORBIDDEN",
            )
        if not whoami.device_id:
            raise MatrixError("whoami: the access token has no device", code="M_UNKNOWN")
        self.nio.restore_login(self.user_id, whoami.device_id, token)
        await self._upload_keys()

    async def _upload_keys(self) -> None:
        if self.nio.olm is None:
            raise MatrixError("login: the E2EE store did not load", code="M_UNKNOWN")
        if self.nio.should_upload_keys:
            await _call("keys_upload", self.nio.keys_upload())

    async def first_sync(self) -> None:
        """One full-state sync, then join every pending invite."""
        await _call("sync", self.nio.sync(timeout=0, full_state=True))
        await self._join_invites()
        self._synced.set()

    async def _join_invites(self) -> None:
        for room_id, room in list(self.nio.invited_rooms.items()):
            await self._answer_invite(room_id, room.inviter)

    async def _answer_invite(self, room_id: str, inviter: str | None) -> None:
        # Users invite the oracle into their room and into group rooms (SRV-67, group
        # chats); only an invite sent by a user of a trusted homeserver is one of those.
        if inviter is None or not self.is_trusted(inviter):
            logger.warning(
                "matrix.invite_refused: declined an invite from server %r, which is not "
                "trusted; list it in MATRIX_TRUSTED_HOMESERVERS to accept its users",
                (inviter or "").partition(":")[2],
            )
            with contextlib.suppress(MatrixError):
                await _call("leave", self.nio.room_leave(room_id))
            return
        try:
            await _call("join", self.nio.join(room_id))
        except MatrixError as exc:
            logger.warning("matrix.join_failed: could not join an invited room (%s)", exc.code)

    def start_sync(self) -> None:
        """Run the sync loop in the background (reconnects with backoff)."""
        if self._sync_task is None:
            self.nio.add_event_callback(self._on_invite, nio.InviteMemberEvent)
            self.nio.add_event_callback(self._on_message, nio.RoomMessage)
            self.nio.add_event_callback(self._on_timeline_event, nio.Event)
            self.nio.add_response_callback(self._on_sync, nio.SyncResponse)
            self._sync_task = asyncio.get_running_loop().create_task(
                self._sync_loop(), name="matrix-sync"
            )

    async def _sync_loop(self) -> None:
        delay = RECONNECT_FIRST_DELAY
        while not self._closed:
            try:
                await self.nio.sync_forever(timeout=SYNC_TIMEOUT_MS, full_state=False)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "matrix.sync_interrupted: %s; reconnecting in %.0f s", type(exc).__name__, delay
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)

    async def _on_sync(self, _response: nio.SyncResponse) -> None:
        async with self._sync_seen:
            self._sync_seen.notify_all()

    async def _on_invite(self, room: nio.MatrixRoom, event: nio.InviteMemberEvent) -> None:
        if event.state_key == self.user_id and event.membership == "invite":
            await self._answer_invite(room.room_id, event.sender)

    async def _on_message(self, room: nio.MatrixRoom, event: nio.Event) -> None:
        # The handler may run a whole turn: never hold the sync loop while it does.
        if self.on_room_message is not None:
            task = asyncio.get_running_loop().create_task(self._handle(room, event))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    def listen(self, room_id: str, listener: RoomListener) -> Callable[[], None]:
        """Call ``listener`` with each new timeline event of the room (decrypted when the
        client holds the key), as JSON; the returned function stops it. A listener must
        not block: it runs inside the sync loop."""
        self._room_listeners.setdefault(room_id, set()).add(listener)

        def stop() -> None:
            listeners = self._room_listeners.get(room_id)
            if listeners is not None:
                listeners.discard(listener)
                if not listeners:
                    del self._room_listeners[room_id]

        return stop

    async def _on_timeline_event(self, room: nio.MatrixRoom, event: nio.Event) -> None:
        listeners = self._room_listeners.get(room.room_id)
        if not listeners:
            return
        source = {**event.source, "room_id": room.room_id}
        for listener in list(listeners):
            listener(source)

    async def _handle(self, room: nio.MatrixRoom, event: nio.Event) -> None:
        assert self.on_room_message is not None
        try:
            await self.on_room_message(room, event)
        except Exception as exc:
            logger.warning(
                "matrix.message_handler_failed: %s", getattr(exc, "code", type(exc).__name__)
            )

    async def wait_for_room(self, room_id: str, timeout: float = 30.0) -> nio.MatrixRoom:  # noqa: ASYNC109
        """The room once a sync has shown it to the client (after a create or a join).

        Raises:
            MatrixError: ``network`` when no sync showed the room in time.
        """

        def known() -> bool:
            return room_id in self.nio.rooms

        if not known():
            try:
                async with asyncio.timeout(timeout), self._sync_seen:
                    await self._sync_seen.wait_for(known)
            except TimeoutError as exc:
                raise MatrixError(f"room {room_id} not seen by sync", code="network") from exc
        return self.nio.rooms[room_id]

    async def wait_for_member(self, room_id: str, user_id: str, timeout: float = 10.0) -> bool:  # noqa: ASYNC109
        """Wait until a sync shows ``user_id`` in the room (joined or invited)."""

        def present() -> bool:
            room = self.nio.rooms.get(room_id)
            return room is not None and user_id in room.users

        if present():
            return True
        try:
            async with asyncio.timeout(timeout), self._sync_seen:
                await self._sync_seen.wait_for(present)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop the sync loop and close the HTTP session and the crypto store."""
        self._closed = True
        self.nio.stop_sync_forever()
        tasks = [*self._handlers, *([self._sync_task] if self._sync_task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.nio.close()
        store = self.nio.store
        database = getattr(store, "database", None)
        if database is not None:
            with contextlib.suppress(Exception):
                database.close()

    # --- rooms -----------------------------------------------------------------------

    async def resolve_alias(self, alias: str) -> str | None:
        """The room id behind ``alias``, or ``None`` when the alias does not exist."""
        try:
            response = await _call("resolve_alias", self.nio.room_resolve_alias(alias))
        except MatrixError as exc:
            if exc.code == "M_NOT_FOUND":
                return None
            raise
        return str(response.room_id)

    async def create_room(
        self,
        *,
        alias_localpart: str | None,
        name: str,
        invite: Sequence[str] = (),
        encrypted: bool = True,
        topic: str | None = None,
        extra_state: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """Create a private room (encrypted by default) and return its id; ``extra_state``
        adds initial state events."""
        initial_state: list[dict[str, Any]] = [dict(event) for event in extra_state]
        if encrypted:
            initial_state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        response = await _call(
            "room_create",
            self.nio.room_create(
                alias=alias_localpart,
                name=name,
                topic=topic,
                invite=list(invite),
                initial_state=initial_state,
                preset=nio.RoomPreset.private_chat,
            ),
        )
        return str(response.room_id)

    async def invite(self, room_id: str, user_id: str) -> None:
        """Invite ``user_id`` into the room."""
        await _call("invite", self.nio.room_invite(room_id, user_id))

    async def send(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        """Send an event (encrypted in an encrypted room) and return its id."""
        room = await self.wait_for_room(room_id)
        if room.encrypted and self.nio.should_query_keys:
            # Members new since the last sync (an invite just sent) get the room key only
            # if their devices are known before the group session is shared.
            await _call("keys_query", self.nio.keys_query())
        try:
            response = await _call(
                "room_send",
                self.nio.room_send(
                    room_id, event_type, dict(content), ignore_unverified_devices=True
                ),
            )
        except (nio.LocalProtocolError, nio.SendRetryError) as exc:
            raise MatrixError(f"room_send: {exc}", code="M_UNKNOWN") from exc
        return str(response.event_id)

    async def state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        """The content of one state event, or ``None`` when the room has none."""
        try:
            response = await _call(
                "get_state_event", self.nio.room_get_state_event(room_id, event_type, state_key)
            )
        except MatrixError as exc:
            if exc.code == "M_NOT_FOUND":
                return None
            raise
        return dict(response.content)

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        """Every current state event of the room."""
        response = await _call("get_state", self.nio.room_get_state(room_id))
        return [dict(event) for event in response.events]

    async def put_state(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        """Set a state event and return its id."""
        response = await _call(
            "put_state", self.nio.room_put_state(room_id, event_type, dict(content), state_key)
        )
        return str(response.event_id)

    async def redact(self, room_id: str, event_id: str, reason: str) -> None:
        """Redact an event."""
        await _call("redact", self.nio.room_redact(room_id, event_id, reason=reason))

    async def get_event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        """One event as JSON (decrypted when the client holds its key), or ``None``."""
        try:
            response = await _call("get_event", self.nio.room_get_event(room_id, event_id))
        except MatrixError as exc:
            if exc.code == "M_NOT_FOUND":
                return None
            raise
        event = response.event
        if isinstance(event, nio.MegolmEvent):
            with contextlib.suppress(Exception):
                decrypted = self.nio.decrypt_event(event)
                return {**event.source, "decrypted": dict(decrypted.source)}
        return dict(event.source)

    async def messages(
        self, room_id: str, *, limit: int, before: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Up to ``limit`` events before the ``before`` token (the latest when ``None``),
        oldest first and decrypted where the client holds the key, and the token of the
        page before them (``None`` at the start of the room)."""
        response = await _call(
            "room_messages", self.nio.room_messages(room_id, start=before, limit=limit)
        )
        events = []
        for event in reversed(response.chunk):
            if isinstance(event, nio.MegolmEvent):
                with contextlib.suppress(Exception):
                    event = self.nio.decrypt_event(event)  # noqa: PLW2901 - the decrypted form
            events.append({**event.source, "room_id": room_id})
        # The homeserver leaves out `end` at the start of the room.
        return events, (str(response.end) if response.chunk and response.end else None)

    async def is_member(self, room_id: str, user_id: str) -> bool:
        """Whether ``user_id`` is joined to (or invited into) the room."""
        room = self.nio.rooms.get(room_id)
        if room is not None and user_id in room.users:
            return True
        # The homeserver's own state: a sync may not have shown a fresh invite yet.
        try:
            content = await self.state_event(room_id, "m.room.member", user_id)
        except MatrixError as exc:
            if exc.code in {"M_FORBIDDEN", "M_NOT_FOUND"}:
                return False
            raise
        return (content or {}).get("membership") in {"join", "invite"}

    # --- media -----------------------------------------------------------------------

    async def upload(self, data: bytes, *, content_type: str, filename: str) -> str:
        """Upload bytes and return their ``mxc://`` URI."""
        try:
            response, _keys = await self.nio.upload(
                io.BytesIO(data), content_type=content_type, filename=filename, filesize=len(data)
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MatrixError(
                f"upload: homeserver unreachable ({type(exc).__name__})", code="network"
            ) from exc
        return str(_ok("upload", response).content_uri)

    async def download(self, mxc: str) -> bytes:
        """The bytes behind an ``mxc://`` URI."""
        response = await _call("download", self.nio.download(mxc))
        body = response.body
        if isinstance(body, bytes):
            return body
        raise MatrixError("download: unexpected response body", code="M_UNKNOWN")
