"""The Matrix layer: background login, signing key, chat log, backups (SRV-6, 9, 10, 64 … 68).

:class:`MatrixLayer` starts from the ASGI lifespan and never delays serving: it logs in,
reads the oracle's signing mnemonic from the account room, syncs once, then keeps a
sync loop running. Until it is ``loaded`` (and the signing key is there) the server
answers protected routes with 401. A failed start is retried with backoff 5 s → 5 min.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from joserfc.jwk import ECKey

from oracle_core import (
    MATRIX_MAX_MEDIA_BYTES,
    MatrixEvent,
    MatrixEventHandler,
    MatrixRequestError,
    MatrixSubscription,
    PluginStatusChangeEvent,
    PowerLevels,
    RoomMember,
    ServiceUnavailableError,
    SessionEvent,
    TimelinePage,
    UserInfo,
)
from oracle_server._auth.keys import OracleKey
from oracle_server._matrix.backup import CheckpointBackup
from oracle_server._matrix.chatlog import ChatLog, message_content
from oracle_server._matrix.client import MatrixClient, MatrixError
from oracle_server._matrix.rooms import UserRooms, matrix_user_id
from oracle_server._matrix.secrets import MatrixSecretsService, load_secrets_key
from oracle_server._matrix.transport import MatrixTransport
from oracle_server._matrix.values import (
    MNEMONIC_STATE_KEY,
    SECURE_STATE_TYPE,
    ValueDecryptionError,
    decrypt_mnemonic,
)
from oracle_server._persistence import (
    MatrixFileEvents,
    StorageUnavailableError,
    UserDatabases,
)
from oracle_server._settings import ServerSettings
from oracle_server._turns.runner import ActiveTurn, TurnInput
from oracle_ucan import Ed25519Signer

__all__ = ["MatrixLayer", "MatrixStatus", "NioMatrixService"]

logger = logging.getLogger("oracle.server.matrix")

MatrixStatus = Literal["pending", "loaded", "failed"]
FIRST_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 300.0
MNEMONIC_RECHECK_SECONDS = 60.0
SETUP_HINT = "qiforge-cli setup-encryption-key"


class MatrixLayer:
    """The oracle's Matrix presence, started in the background.

    Built before the runtime (whose plugins reach Matrix through :meth:`service`), then
    bound to it with :meth:`bind` and started by the ASGI lifespan.

    Args:
        settings: The server settings (``MATRIX_*``).
        sessions: The session store (where each session's thread is remembered).
        user_dbs: The per-user databases to back up (``None`` in shared mode).
        files: The last upload of each backed-up file.
        key: The oracle's signing key: one from ``ORACLE_SIGNING_MNEMONIC`` wins over the
            account room's; the layer sets it when it reads the room's.
    """

    def __init__(
        self,
        settings: ServerSettings,
        *,
        sessions: Any,
        user_dbs: UserDatabases | None,
        files: MatrixFileEvents,
        key: OracleKey,
    ) -> None:
        self.settings = settings
        self.oracle_name = settings.oracle_name or "Oracle"
        self.sessions = sessions
        self.user_dbs = user_dbs
        self.files = files
        self.key = key
        # The oracle's P-256 key: users' secrets are encrypted to it (read at start).
        self.secrets_key: ECKey | None = None
        self._on_status: Callable[[PluginStatusChangeEvent], None] | None = None
        self._on_error: Callable[[BaseException, str], None] | None = None
        self.start_turn: Callable[[TurnInput], Awaitable[ActiveTurn]] | None = None
        self.announce: Callable[[SessionEvent], Awaitable[None]] | None = None
        self.state: MatrixStatus = "pending"
        self.client: MatrixClient | None = None
        self.rooms: UserRooms | None = None
        self.chatlog: ChatLog | None = None
        self.backup: CheckpointBackup | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Kept apart from `_tasks`: it never ends on its own, and `flush` waits for those.
        self._recheck_task: asyncio.Task[None] | None = None
        self._init_task: asyncio.Task[None] | None = None
        self._closed = False
        if user_dbs is not None and settings.matrix_checkpoint_sync:
            user_dbs.restorer = self

    def bind(
        self,
        *,
        on_status: Callable[[PluginStatusChangeEvent], None],
        on_error: Callable[[BaseException, str], None],
        start_turn: Callable[[TurnInput], Awaitable[ActiveTurn]],
        announce: Callable[[SessionEvent], Awaitable[None]] | None = None,
    ) -> None:
        """Attach what the layer reports to and starts turns with, once they exist.

        Args:
            on_status: Receives each status change (the runtime's plugin status events).
            on_error: Receives ``(exc, "matrix-init")`` for each failed start.
            start_turn: Starts a turn for a user's message in their room (SRV-69).
            announce: Tells plugins and sockets of the sessions Matrix messages create.
        """
        self._on_status = on_status
        self._on_error = on_error
        self.start_turn = start_turn
        self.announce = announce

    @property
    def signer(self) -> Ed25519Signer | None:
        """The oracle's signing key, once known."""
        return self.key.signer

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Begin initialisation in the background (idempotent)."""
        if self._init_task is None and not self._closed:
            self._init_task = asyncio.get_running_loop().create_task(
                self._init_loop(), name="matrix-init"
            )

    def _set_state(self, state: MatrixStatus, reason: str | None = None) -> None:
        if state == self.state:
            return
        event = PluginStatusChangeEvent(plugin="matrix", from_=self.state, to=state, reason=reason)
        self.state = state
        if self._on_status is not None:
            self._on_status(event)

    async def _init_loop(self) -> None:
        delay = FIRST_RETRY_DELAY
        while not self._closed:
            try:
                await self._init()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._discard_client()
                self._set_state("failed", f"{type(exc).__name__}: {exc}")
                if self._on_error is not None:
                    self._on_error(exc, "matrix-init")
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            self._set_state("loaded")
            return

    async def _init(self) -> None:
        settings = self.settings
        client = MatrixClient(
            base_url=str(settings.matrix_base_url),
            user_id=str(settings.matrix_oracle_admin_user_id),
            store_path=Path(settings.matrix_store_path) / "nio",
            access_token=settings.matrix_oracle_admin_access_token,
            password=settings.matrix_oracle_admin_password,
            trusted_homeservers=settings.trusted_homeservers(
                str(settings.matrix_oracle_admin_user_id).partition(":")[2]
            ),
        )
        self.client = client
        await client.login()
        if self.signer is None:
            await self._load_signer(client)
            if self.signer is None:
                self._recheck_task = asyncio.get_running_loop().create_task(
                    self._recheck_signer(client), name="matrix-signing-key-recheck"
                )
        if self.secrets_key is None:
            await self._load_secrets_key(client)
        await client.first_sync()
        client.start_sync()
        rooms = UserRooms(
            client, entity_did=str(settings.oracle_entity_did or ""), oracle_name=self.oracle_name
        )
        self.rooms = rooms
        self.chatlog = ChatLog(client, rooms, self.sessions)
        if self.start_turn is not None:
            transport = MatrixTransport(
                client,
                rooms,
                self.sessions,
                self.start_turn,
                (self.oracle_name, str(settings.oracle_did or ""), settings.oracle_entity_did),
                announce=self.announce,
            )
            client.on_room_message = transport.on_message
        if self.user_dbs is not None and settings.matrix_checkpoint_sync:
            backup = CheckpointBackup(
                client,
                rooms,
                self.user_dbs,
                self.files,
                secret=self._backup_secret,
                debounce=settings.matrix_backup_debounce_seconds,
            )
            backup.start()
            self.backup = backup

    async def _discard_client(self) -> None:
        recheck, self._recheck_task = self._recheck_task, None
        if recheck is not None:
            recheck.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await recheck
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    def _backup_secret(self) -> bytes | None:
        # The signing key is the oracle's identity: a node that has it can read the
        # backups, and no other secret has to be provisioned.
        return None if self.signer is None else self.signer.format().encode()

    async def _load_signer(self, client: MatrixClient) -> None:
        room_id = self.settings.matrix_account_room_id
        pin = self.settings.matrix_value_pin
        if not room_id or not pin:
            logger.warning(
                "matrix.signing_key_missing: MATRIX_ACCOUNT_ROOM_ID or MATRIX_VALUE_PIN unset"
            )
            return
        content = await client.state_event(room_id, SECURE_STATE_TYPE, MNEMONIC_STATE_KEY)
        value = (content or {}).get("encrypted_mnemonic")
        if not isinstance(value, str) or not value:
            logger.warning(
                "matrix.signing_key_missing: no signing mnemonic in the account room; "
                "provision one with `%s` (the oracle stays not ready until then)",
                SETUP_HINT,
            )
            return
        try:
            mnemonic = decrypt_mnemonic(value, pin)
            signer = Ed25519Signer.from_mnemonic(mnemonic)
        except (ValueDecryptionError, ValueError) as exc:
            logger.error("matrix.signing_key_unreadable: %s", str(exc).split(":")[0])
            return
        self.key.signer = signer

    async def _load_secrets_key(self, client: MatrixClient) -> None:
        room_id, pin = self.settings.matrix_account_room_id, self.settings.matrix_value_pin
        if not room_id or not pin:
            return  # warned about with the signing key
        try:
            self.secrets_key = await load_secrets_key(client, room_id, pin)
        except MatrixError as exc:  # degraded only: the names are still listed
            logger.warning("matrix.secrets_key_check_failed: %s", exc.code)

    async def _recheck_signer(self, client: MatrixClient) -> None:
        while self.signer is None and not self._closed:
            await asyncio.sleep(MNEMONIC_RECHECK_SECONDS)
            try:
                await self._load_signer(client)
            except MatrixError as exc:
                logger.warning("matrix.signing_key_check_failed: %s", exc.code)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Upload every changed user database and finish pending chat-log posts."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        if self.backup is not None:
            await self.backup.flush()

    async def aclose(self) -> None:
        """Stop every task, then the sync loop and the client (SRV-12 step 5)."""
        self._closed = True
        tasks = list(self._tasks)
        if self._init_task is not None:
            tasks.append(self._init_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.backup is not None:
            await self.backup.aclose()
        await self._discard_client()

    # --- per user --------------------------------------------------------------------

    async def restore(self, user_did: str, storage_key: str, dest: Path) -> bool:
        """:class:`~oracle_server._persistence.UserRestorer`: restore from the backup."""
        if self.backup is None:
            raise StorageUnavailableError("the Matrix layer is still starting")
        return await self.backup.restore(user_did, storage_key, dest)

    def after_turn(
        self,
        *,
        user_did: str,
        session_id: str,
        message: str,
        reply: str | None,
        home_server: str | None,
        client: str = "portal",
    ) -> None:
        """Log the turn to the user's room (unless disabled) and schedule its backup.

        Turns that came from Matrix are not logged: their messages are in the room.
        """
        if self.backup is not None:
            self.backup.schedule(user_did)
        chatlog = self.chatlog
        if chatlog is None or self.settings.skip_logging_chat_history_to_matrix:
            return
        if client == "matrix":
            return

        async def log() -> None:
            try:
                await chatlog.log_turn(
                    user_did=user_did,
                    session_id=session_id,
                    user_message=message,
                    reply=reply,
                    home_server=home_server,
                )
            except Exception as exc:
                logger.warning(
                    "matrix.chat_log_failed: %s", getattr(exc, "code", type(exc).__name__)
                )

        self._spawn(log())

    async def ask_to_reauthorise(self, user_did: str) -> None:
        """Post a re-authorisation request into the user's room (UCAN-32); the caller
        throttles it. Nothing happens while Matrix is down or the user has no room."""
        client, rooms = self.client, self.rooms
        if client is None or rooms is None or self.state != "loaded":
            return
        try:
            room_id = await rooms.find(user_did)
            if room_id is None:
                return
            text = (
                f"{self.oracle_name} can no longer act for you on other services: your "
                "authorisation is missing or has expired. Please re-authorise this oracle "
                "from your client."
            )
            await client.send(room_id, "m.room.message", message_content(text))
        except MatrixError as exc:
            logger.warning("matrix.reauth_prompt_failed: %s", exc.code)

    def service(self) -> NioMatrixService:
        """``RuntimeContext.matrix`` for plugins."""
        return NioMatrixService(self)

    def secrets(self) -> MatrixSecretsService:
        """``RuntimeContext.secrets``: users' secrets in their rooms."""
        return MatrixSecretsService(self)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """The client's errors as the plugin API's: transient ones mean "down for now"."""
    try:
        yield
    except MatrixError as exc:
        if exc.transient:
            raise ServiceUnavailableError(
                f"Matrix {what} failed: the homeserver is unreachable or busy",
                hint="retry later",
            ) from exc
        code = {"M_FORBIDDEN": "matrix.forbidden", "M_NOT_FOUND": "matrix.not_found"}.get(
            exc.code, "matrix.failed"
        )
        raise MatrixRequestError(f"Matrix {what} failed ({exc.code})", code=code) from exc


class _NioSubscription:
    """Delivers a room's events to a plugin's handler, in order, off the sync loop."""

    def __init__(self, client: MatrixClient, room_id: str, handler: MatrixEventHandler) -> None:
        self._room_id = room_id
        self._handler = handler
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._stop = client.listen(room_id, self._queue.put_nowait)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="matrix-sub")

    async def _run(self) -> None:
        while True:
            source = await self._queue.get()
            try:
                await self._handler(MatrixEvent.from_json(source, self._room_id))
            except Exception as exc:
                logger.warning("matrix.subscriber_failed: %s", type(exc).__name__)

    def close(self) -> None:
        self._stop()
        self._task.cancel()


class _ScopedMatrix:
    """The Matrix operations a plugin may run for one user: only in that user's rooms."""

    def __init__(self, layer: MatrixLayer, user: UserInfo) -> None:
        self._layer = layer
        self._user = user

    def _client(self) -> tuple[MatrixClient, UserRooms]:
        client, rooms = self._layer.client, self._layer.rooms
        if client is None or rooms is None or self._layer.state != "loaded":
            raise ServiceUnavailableError(
                "Matrix is not ready", hint="the Matrix layer is still starting or failed"
            )
        return client, rooms

    def _member_id(self, client: MatrixClient) -> str | None:
        return self._user.matrix_user_id or matrix_user_id(self._user.did, client.server_name)

    async def _check(self, room_id: str) -> MatrixClient:
        client, rooms = self._client()
        with _translated("room check"):
            if room_id == await rooms.find(self._user.did):
                return client
            member = self._member_id(client)
            if member is not None and await client.is_member(room_id, member):
                return client
        raise MatrixRequestError(
            "the user is not a member of that room", code="matrix.room_forbidden"
        )

    async def oracle_user_id(self) -> str:
        client, _rooms = self._client()
        return client.user_id

    async def post_to_room(self, room_id: str, content: Mapping[str, Any]) -> str:
        return await self.send_event(room_id, "m.room.message", content)

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        client = await self._check(room_id)
        with _translated("send"):
            return await client.send(room_id, event_type, content)

    async def get_room_state(self, room_id: str) -> list[dict[str, Any]]:
        client = await self._check(room_id)
        with _translated("state read"):
            return await client.room_state(room_id)

    async def get_event_by_id(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        client = await self._check(room_id)
        with _translated("event read"):
            return await client.get_event(room_id, event_id)

    async def user_room_id(self) -> str | None:
        _client, rooms = self._client()
        with _translated("room lookup"):
            return await rooms.find(self._user.did)

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        client = await self._check(room_id)
        with _translated("state read"):
            return await client.state_event(room_id, event_type, state_key)

    async def set_state_event(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        client = await self._check(room_id)
        with _translated("state write"):
            return await client.put_state(room_id, event_type, content, state_key)

    async def get_timeline(
        self, room_id: str, *, limit: int = 50, before: str | None = None
    ) -> TimelinePage:
        client = await self._check(room_id)
        with _translated("timeline read"):
            events, token = await client.messages(
                room_id, limit=TimelinePage.page_size(limit), before=before
            )
        return TimelinePage(
            events=[MatrixEvent.from_json(event, room_id) for event in events], before=token
        )

    async def subscribe(self, room_id: str, handler: MatrixEventHandler) -> MatrixSubscription:
        client = await self._check(room_id)
        return _NioSubscription(client, room_id, handler)

    async def create_room(
        self,
        *,
        name: str,
        topic: str | None = None,
        invite: Sequence[str] = (),
        user_power_level: int | None = None,
        encrypted: bool = True,
        space_id: str | None = None,
        initial_state: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        client, _rooms = self._client()
        member = self._member_id(client)
        if member is None:
            raise MatrixRequestError(
                "the user has no Matrix id to invite", code="matrix.user_unknown"
            )
        if space_id is not None:
            await self._check(space_id)
        via = {"via": [client.server_name]}
        state = list(initial_state)
        if space_id is not None:
            state.append(
                {
                    "type": "m.space.parent",
                    "state_key": space_id,
                    "content": {**via, "canonical": True},
                }
            )
        with _translated("room creation"):
            room_id = await client.create_room(
                alias_localpart=None,
                name=name,
                topic=topic,
                invite=list(dict.fromkeys([member, *invite])),
                encrypted=encrypted,
                extra_state=state,
            )
            if space_id is not None:
                await client.put_state(space_id, "m.space.child", via, room_id)
        if user_power_level is not None:
            # Set afterwards, not as an override at creation: the override replaces the
            # whole `users` map, which holds the creator before room version 12 and must
            # not from version 12 on; amending the room's own levels is right for both.
            await self.set_power_level(room_id, member, user_power_level)
        return room_id

    async def invite(self, room_id: str, user_id: str) -> None:
        client = await self._check(room_id)
        with _translated("invite"):
            await client.invite(room_id, user_id)

    async def members(self, room_id: str) -> list[RoomMember]:
        return RoomMember.from_state(await self.get_room_state(room_id))

    async def get_power_levels(self, room_id: str) -> PowerLevels:
        return PowerLevels.from_state(await self.get_room_state(room_id))

    async def set_power_level(self, room_id: str, user_id: str, level: int) -> str:
        content = dict((await self.get_power_levels(room_id)).content)
        content["users"] = {**dict(content.get("users") or {}), user_id: int(level)}
        return await self.set_state_event(room_id, "m.room.power_levels", content)

    async def upload(self, data: bytes, *, content_type: str, filename: str) -> str:
        client, _rooms = self._client()
        if len(data) > MATRIX_MAX_MEDIA_BYTES:
            raise MatrixRequestError("the media is too large", code="matrix.too_large")
        with _translated("upload"):
            return await client.upload(data, content_type=content_type, filename=filename)

    async def download(
        self,
        mxc: str,
        *,
        max_bytes: int = MATRIX_MAX_MEDIA_BYTES,
        encryption: Mapping[str, Any] | None = None,
    ) -> bytes:
        client, _rooms = self._client()
        if not mxc.startswith("mxc://"):
            raise MatrixRequestError(f"not an mxc:// URI: {mxc[:80]}", code="matrix.not_found")
        with _translated("download"):
            data = await client.download(mxc)
        if len(data) > max_bytes:
            raise MatrixRequestError("the media is too large", code="matrix.too_large")
        return data if encryption is None else _decrypted(data, encryption)


def _decrypted(data: bytes, encryption: Mapping[str, Any]) -> bytes:
    """Media of an encrypted room, decrypted and checked against its hash."""
    import nio
    from nio.crypto.attachments import decrypt_attachment

    try:
        key = encryption["key"]["k"]
        digest = encryption["hashes"]["sha256"]
        return bytes(decrypt_attachment(data, key, digest, encryption["iv"]))
    except (KeyError, TypeError, ValueError, nio.EncryptionError) as exc:
        raise MatrixRequestError(
            "the media does not decrypt with its event's key", code="matrix.failed"
        ) from exc


class NioMatrixService:
    """``MatrixService`` over the oracle's client; each user reaches only their rooms."""

    def __init__(self, layer: MatrixLayer) -> None:
        self._layer = layer

    def for_user(self, user: UserInfo) -> _ScopedMatrix:
        """The accessor scoped to ``user``."""
        return _ScopedMatrix(self._layer, user)
