"""Matrix for plugins (``rt_ctx.matrix``): the accessor, its values and a local store.

A plugin reaches Matrix only through :class:`MatrixAccessor`, scoped to the user of the
request: it may act in rooms that user is in (joined or invited) and in rooms it creates
for them, always as the oracle. The server's implementation is the matrix-nio client of
its Matrix layer. :class:`LocalMatrixService` is a homeserver in miniature for one
machine (``ORACLE_BACKEND=local``): rooms, timelines, state, members, power levels and
media in one SQLite file, with subscriptions delivered in process. It enforces power
levels as a homeserver does, so a plugin that works locally meets the same refusals on
Matrix.

The local store has no "user's room": ``user_room_id()`` raises ``NotConfiguredError``, as
with no Matrix at all. That room is the IXO client's, and plugins that keep data there
fall back to their own local store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from oracle_core._errors import NotConfiguredError, OracleError

if TYPE_CHECKING:
    from oracle_core._context import UserInfo
    from oracle_core._sqlite_connection import PooledConnection

__all__ = [
    "LOCAL_SERVER_NAME",
    "MATRIX_MAX_MEDIA_BYTES",
    "LocalMatrixService",
    "MatrixAccessor",
    "MatrixEvent",
    "MatrixEventHandler",
    "MatrixRequestError",
    "MatrixService",
    "MatrixSubscription",
    "PowerLevels",
    "RoomMember",
    "TimelinePage",
    "UnavailableMatrixService",
    "local_matrix_user_id",
]

logger = logging.getLogger("oracle.matrix")

LOCAL_SERVER_NAME = "localhost"
MAX_TIMELINE_PAGE = 200
MATRIX_MAX_MEDIA_BYTES = 50 * 1024 * 1024


class MatrixRequestError(OracleError):
    """A Matrix operation was refused or failed; the message starts with the code.

    ``code`` is one of ``matrix.room_forbidden`` (the user is not in that room),
    ``matrix.forbidden`` (the room's power levels refuse it), ``matrix.not_found`` (no
    such room, event or media), ``matrix.too_large`` (media over the limit),
    ``matrix.user_unknown`` (the user has no Matrix id to invite) or ``matrix.failed``
    (anything else the homeserver answered).
    """

    code = "matrix.failed"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(f"{code or self.code}: {message}", code=code, hint=hint)


# --- values ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixEvent:
    """One room event as a plugin sees it (decrypted when the oracle holds the key).

    Attributes:
        event_id: The event's id.
        room_id: The room it is in.
        type: Its event type (``m.room.message``, ``matrix-crdt.doc_update``…); an event
            the oracle cannot decrypt stays ``m.room.encrypted``.
        sender: The Matrix user who sent it.
        content: Its content.
        origin_server_ts: Milliseconds since the epoch, by the homeserver's clock.
        state_key: Set for state events.
    """

    event_id: str
    room_id: str
    type: str
    sender: str
    content: dict[str, Any]
    origin_server_ts: int
    state_key: str | None = None

    @classmethod
    def from_json(cls, source: Mapping[str, Any], room_id: str) -> MatrixEvent:
        """From the client-server API's JSON form of an event."""
        state_key = source.get("state_key")
        return cls(
            event_id=str(source.get("event_id", "")),
            room_id=str(source.get("room_id") or room_id),
            type=str(source.get("type", "")),
            sender=str(source.get("sender", "")),
            content=dict(source.get("content") or {}),
            origin_server_ts=int(source.get("origin_server_ts") or 0),
            state_key=None if state_key is None else str(state_key),
        )

    def to_json(self) -> dict[str, Any]:
        """The client-server API's JSON form."""
        out: dict[str, Any] = {
            "event_id": self.event_id,
            "room_id": self.room_id,
            "type": self.type,
            "sender": self.sender,
            "content": dict(self.content),
            "origin_server_ts": self.origin_server_ts,
        }
        if self.state_key is not None:
            out["state_key"] = self.state_key
        return out


@dataclass(frozen=True)
class TimelinePage:
    """Events of a room's timeline, oldest first.

    Attributes:
        events: The page, oldest first.
        before: Pass it as ``before`` for the page of older events; ``None`` when this
            page reaches the start of the room.
    """

    events: list[MatrixEvent]
    before: str | None

    @staticmethod
    def page_size(limit: int) -> int:
        """A requested page size within 1 … :data:`MAX_TIMELINE_PAGE`."""
        return max(1, min(int(limit), MAX_TIMELINE_PAGE))


@dataclass(frozen=True)
class RoomMember:
    """A member of a room.

    Attributes:
        user_id: Their Matrix id.
        membership: ``join`` or ``invite`` (users who left or were banned are not listed).
        display_name: Their display name in the room, when they set one.
    """

    user_id: str
    membership: Literal["join", "invite"]
    display_name: str | None = None

    @staticmethod
    def from_state(state: Sequence[Mapping[str, Any]]) -> list[RoomMember]:
        """The joined and invited members among a room's state events."""
        members = []
        for event in state:
            if event.get("type") != "m.room.member":
                continue
            content = event.get("content") or {}
            membership = content.get("membership")
            if membership in {"join", "invite"}:
                name = content.get("displayname")
                members.append(
                    RoomMember(
                        user_id=str(event.get("state_key")),
                        membership=membership,
                        display_name=name if isinstance(name, str) and name else None,
                    )
                )
        return members


@dataclass(frozen=True)
class PowerLevels:
    """A room's ``m.room.power_levels`` content, read with the spec's defaults.

    Attributes:
        content: The power levels event's content.
        creators: The room's creators where the room version gives them unlimited power
            (version 12 on): they are never listed in ``users``.
    """

    content: dict[str, Any] = field(default_factory=dict)
    creators: frozenset[str] = frozenset()

    CREATOR_LEVEL: ClassVar[int] = 2**53 - 1
    """What :meth:`user_level` says for a creator of a version-12 room (unlimited)."""

    @classmethod
    def from_state(cls, state: Sequence[Mapping[str, Any]]) -> PowerLevels:
        """From a room's state events (``m.room.power_levels`` and ``m.room.create``)."""
        content: dict[str, Any] = {}
        creators: set[str] = set()
        for event in state:
            if event.get("state_key") != "":
                continue
            if event.get("type") == "m.room.power_levels":
                content = dict(event.get("content") or {})
            elif event.get("type") == "m.room.create":
                create = event.get("content") or {}
                version = str(create.get("room_version") or "1")
                if version.isdigit() and int(version) >= 12:
                    extra = create.get("additional_creators") or []
                    creators = {str(event.get("sender")), *(str(u) for u in extra)}
        return cls(content, frozenset(creators))

    def _int(self, value: Any, default: int) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    def user_level(self, user_id: str) -> int:
        """The user's power level (``users_default`` when not listed)."""
        if user_id in self.creators:
            return self.CREATOR_LEVEL
        users = self.content.get("users") or {}
        return self._int(users.get(user_id), self._int(self.content.get("users_default"), 0))

    def event_level(self, event_type: str, *, state: bool = False) -> int:
        """The level needed to send ``event_type`` (as a state event when ``state``)."""
        events = self.content.get("events") or {}
        default_key = "state_default" if state else "events_default"
        return self._int(
            events.get(event_type), self._int(self.content.get(default_key), 50 if state else 0)
        )

    def action_level(self, action: Literal["invite", "kick", "ban", "redact"]) -> int:
        """The level needed to invite, kick, ban or redact others' events."""
        return self._int(self.content.get(action), 0 if action == "invite" else 50)

    def can_send(self, user_id: str, event_type: str, *, state: bool = False) -> bool:
        """Whether ``user_id`` may send ``event_type``."""
        return self.user_level(user_id) >= self.event_level(event_type, state=state)

    def can(self, user_id: str, action: Literal["invite", "kick", "ban", "redact"]) -> bool:
        """Whether ``user_id`` may take ``action``."""
        return self.user_level(user_id) >= self.action_level(action)


MatrixEventHandler = Callable[[MatrixEvent], Awaitable[None]]
"""Receives each new event of a subscribed room (the oracle's own included)."""


class MatrixSubscription(Protocol):
    """A live subscription to a room's new events; ``close()`` ends it."""

    def close(self) -> None:
        """Stop delivering events (idempotent)."""
        ...


# --- the accessor ----------------------------------------------------------------------


class MatrixAccessor(Protocol):
    """Scoped Matrix operations; plugins never get the raw client.

    The accessor acts as the oracle, in rooms the user of the request is in (joined or
    invited); any other room raises ``MatrixRequestError`` (``matrix.room_forbidden``).
    Every operation may raise ``NotConfiguredError`` when this oracle has no Matrix and
    ``ServiceUnavailableError`` when Matrix is configured but cannot be reached right now.
    """

    async def oracle_user_id(self) -> str:
        """The oracle's own Matrix id (to spot mentions and its own events)."""
        ...

    async def post_to_room(self, room_id: str, content: Mapping[str, Any]) -> str:
        """Post an ``m.room.message`` and return its event id."""
        ...

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        """Send a timeline event of any type (``ixo.action.log``…); its event id."""
        ...

    async def get_room_state(self, room_id: str) -> list[dict[str, Any]]:
        """The room's current state events."""
        ...

    async def get_event_by_id(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        """One event of the room, or ``None``."""
        ...

    async def user_room_id(self) -> str | None:
        """The room between this user and the oracle, or ``None`` when there is none."""
        ...

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        """The content of one state event, or ``None`` when the room has none."""
        ...

    async def set_state_event(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        """Set a state event; its event id."""
        ...

    async def get_timeline(
        self, room_id: str, *, limit: int = 50, before: str | None = None
    ) -> TimelinePage:
        """Up to ``limit`` events before ``before`` (the latest when ``None``), oldest
        first; ``limit`` is capped at 200."""
        ...

    async def subscribe(self, room_id: str, handler: MatrixEventHandler) -> MatrixSubscription:
        """Deliver each new event of the room to ``handler`` until the subscription is
        closed. Handlers run one event at a time per subscription, in order; one that
        raises is logged and keeps its subscription."""
        ...

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
        """Create a room owned by the oracle with the user invited; its id.

        Args:
            name: The room's name.
            topic: Its topic.
            invite: Other Matrix users to invite.
            user_power_level: The user's power level in the room (default: the room's
                ``users_default``, 0).
            encrypted: Whether the room is end-to-end encrypted.
            space_id: A space (one the user is in) to add the room to, as its child.
            initial_state: More state events (``{"type", "state_key", "content"}``).
        """
        ...

    async def invite(self, room_id: str, user_id: str) -> None:
        """Invite ``user_id`` into the room."""
        ...

    async def members(self, room_id: str) -> list[RoomMember]:
        """The room's joined and invited members."""
        ...

    async def get_power_levels(self, room_id: str) -> PowerLevels:
        """The room's power levels."""
        ...

    async def set_power_level(self, room_id: str, user_id: str, level: int) -> str:
        """Set one user's power level; the event id of the new power levels."""
        ...

    async def upload(self, data: bytes, *, content_type: str, filename: str) -> str:
        """Upload media; its ``mxc://`` URI."""
        ...

    async def download(
        self,
        mxc: str,
        *,
        max_bytes: int = MATRIX_MAX_MEDIA_BYTES,
        encryption: Mapping[str, Any] | None = None,
    ) -> bytes:
        """The bytes behind an ``mxc://`` URI (``matrix.too_large`` past ``max_bytes``).

        ``encryption`` is the ``file`` object of an event in an encrypted room (its
        ``key``, ``iv`` and ``hashes``): the media is decrypted and its hash checked.
        """
        ...


class MatrixService(Protocol):
    """Gives each user a Matrix accessor."""

    def for_user(self, user: UserInfo) -> MatrixAccessor:
        """The accessor scoped to ``user``."""
        ...


# --- no Matrix -------------------------------------------------------------------------


class _UnavailableMatrix:
    """Every operation raises ``NotConfiguredError``."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        async def fail(*_args: Any, **_kwargs: Any) -> Any:
            # "Off", not "down": plugins with a local fallback switch to it on this
            # error, while ServiceUnavailableError stays reserved for a configured Matrix
            # that cannot be reached right now.
            raise NotConfiguredError(
                "Matrix is not configured for this oracle",
                hint="set ORACLE_BACKEND=ixo and the MATRIX_* variables to use Matrix",
            )

        return fail


class UnavailableMatrixService:
    """No Matrix (an IXO deployment with Matrix turned off).

    Every operation raises ``NotConfiguredError`` (code ``service.not_configured``):
    Matrix is off, and retrying will not help. A server's Matrix layer that is
    configured but not reachable yet raises ``ServiceUnavailableError`` instead, so a
    plugin can tell "off" (use a local fallback) from "down" (degrade for now).
    """

    def for_user(self, user: UserInfo) -> MatrixAccessor:
        return _UnavailableMatrix()


# --- the local store -------------------------------------------------------------------


def local_matrix_user_id(did: str) -> str:
    """A user's id in the local store: ``did:key:z6Mk…`` → ``@did-key-z6Mk…:localhost``."""
    return f"@{did.replace(':', '-')}:{LOCAL_SERVER_NAME}"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS matrix_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    room_id TEXT NOT NULL,
    type TEXT NOT NULL,
    state_key TEXT,
    sender TEXT NOT NULL,
    content TEXT NOT NULL,
    ts INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS matrix_events_room ON matrix_events (room_id, seq);
CREATE TABLE IF NOT EXISTS matrix_state (
    room_id TEXT NOT NULL,
    type TEXT NOT NULL,
    state_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (room_id, type, state_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS matrix_media (
    media_id TEXT PRIMARY KEY,
    content_type TEXT NOT NULL,
    filename TEXT NOT NULL,
    data BLOB NOT NULL
);
"""


class _LocalSubscription:
    def __init__(self, store: LocalMatrixService, room_id: str, handler: MatrixEventHandler):
        self._store = store
        self.room_id = room_id
        self._handler = handler
        self._queue: asyncio.Queue[MatrixEvent] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="matrix-local-sub")

    def deliver(self, event: MatrixEvent) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._handler(event)
            except Exception as exc:
                logger.warning("matrix.subscriber_failed: %s", type(exc).__name__)

    def close(self) -> None:
        self._store._subscriptions.discard(self)
        self._task.cancel()


class LocalMatrixService:
    """A homeserver in miniature for one machine, in one SQLite file.

    Args:
        path: The database file (``:memory:`` for tests).
        oracle_user_id: The oracle's id in the store.

    Besides :meth:`for_user` (the plugins' accessor), :meth:`send_as`, :meth:`join` and
    :meth:`create_room_as` act as other users: a local console, a test, or a transport
    speaking for a human.
    """

    def __init__(
        self,
        path: Path | str = ":memory:",
        *,
        oracle_user_id: str = f"@oracle:{LOCAL_SERVER_NAME}",
    ) -> None:
        self._path = path
        self.oracle_user_id = oracle_user_id
        self._db: PooledConnection | None = None
        self._lock = asyncio.Lock()
        self._subscriptions: set[_LocalSubscription] = set()

    def for_user(self, user: UserInfo) -> MatrixAccessor:
        """The accessor scoped to ``user``."""
        return _LocalMatrixAccessor(self, user.matrix_user_id or local_matrix_user_id(user.did))

    async def aclose(self) -> None:
        """End every subscription and close the database."""
        for subscription in list(self._subscriptions):
            subscription.close()
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    async def _connection(self) -> PooledConnection:
        if self._db is None:
            from oracle_core._sqlite_connection import connect_sqlite

            self._db = await connect_sqlite(self._path, schema=_SCHEMA)
        return self._db

    # --- reading ---------------------------------------------------------------------

    @staticmethod
    def _row_event(row: Any) -> MatrixEvent:
        return MatrixEvent(
            event_id=row[0],
            room_id=row[1],
            type=row[2],
            state_key=row[3],
            sender=row[4],
            content=json.loads(row[5]),
            origin_server_ts=int(row[6]),
        )

    async def state(self, room_id: str) -> list[MatrixEvent]:
        """Every current state event of the room (empty when there is no such room)."""
        db = await self._connection()
        async with db.execute(
            "SELECT e.event_id, e.room_id, e.type, e.state_key, e.sender, e.content, e.ts"
            " FROM matrix_state s JOIN matrix_events e ON e.seq = s.seq"
            " WHERE s.room_id = ? ORDER BY e.seq",
            (room_id,),
        ) as cursor:
            rows = await cursor.fetchall()
        return [self._row_event(row) for row in rows]

    async def state_event(
        self, room_id: str, event_type: str, state_key: str
    ) -> MatrixEvent | None:
        """One current state event, or ``None``."""
        db = await self._connection()
        async with db.execute(
            "SELECT e.event_id, e.room_id, e.type, e.state_key, e.sender, e.content, e.ts"
            " FROM matrix_state s JOIN matrix_events e ON e.seq = s.seq"
            " WHERE s.room_id = ? AND s.type = ? AND s.state_key = ?",
            (room_id, event_type, state_key),
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else self._row_event(row)

    async def membership(self, room_id: str, user_id: str) -> str | None:
        """``join``, ``invite``, ``leave``… or ``None`` when never a member."""
        event = await self.state_event(room_id, "m.room.member", user_id)
        return None if event is None else str(event.content.get("membership"))

    async def power_levels(self, room_id: str) -> PowerLevels:
        """The room's power levels."""
        state = await self.state(room_id)
        if not state:
            raise MatrixRequestError(f"no room {room_id}", code="matrix.not_found")
        return PowerLevels.from_state([event.to_json() for event in state])

    async def timeline(self, room_id: str, limit: int, before: str | None) -> TimelinePage:
        """A page of the room's timeline; see :meth:`MatrixAccessor.get_timeline`."""
        limit = TimelinePage.page_size(limit)
        bound = _token_seq(before)
        db = await self._connection()
        async with db.execute(
            "SELECT event_id, room_id, type, state_key, sender, content, ts, seq"
            " FROM matrix_events WHERE room_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (room_id, bound, limit + 1),
        ) as cursor:
            rows = list(await cursor.fetchall())
        more = len(rows) > limit
        rows = rows[:limit]
        events = [self._row_event(row) for row in reversed(rows)]
        token = f"s{rows[-1][7]}" if more and rows else None
        return TimelinePage(events=events, before=token)

    async def event(self, room_id: str, event_id: str) -> MatrixEvent | None:
        """One event of the room, or ``None``."""
        db = await self._connection()
        async with db.execute(
            "SELECT event_id, room_id, type, state_key, sender, content, ts"
            " FROM matrix_events WHERE room_id = ? AND event_id = ?",
            (room_id, event_id),
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else self._row_event(row)

    # --- writing ---------------------------------------------------------------------

    async def _append(
        self,
        room_id: str,
        sender: str,
        event_type: str,
        content: Mapping[str, Any],
        state_key: str | None,
    ) -> MatrixEvent:
        event = MatrixEvent(
            event_id=f"${secrets.token_urlsafe(18)}",
            room_id=room_id,
            type=event_type,
            sender=sender,
            content=json.loads(json.dumps(dict(content))),
            origin_server_ts=int(time.time() * 1000),
            state_key=state_key,
        )
        db = await self._connection()
        cursor = await db.execute(
            "INSERT INTO matrix_events (event_id, room_id, type, state_key, sender, content, ts)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                event.event_id,
                room_id,
                event_type,
                state_key,
                sender,
                json.dumps(event.content),
                event.origin_server_ts,
            ),
        )
        if state_key is not None:
            await db.execute(
                "INSERT OR REPLACE INTO matrix_state (room_id, type, state_key, seq)"
                " VALUES (?, ?, ?, ?)",
                (room_id, event_type, state_key, cursor.lastrowid),
            )
        await db.commit()
        for subscription in list(self._subscriptions):
            if subscription.room_id == room_id:
                subscription.deliver(event)
        return event

    async def _require_joined(self, room_id: str, user_id: str) -> None:
        if await self.state_event(room_id, "m.room.create", "") is None:
            raise MatrixRequestError(f"no room {room_id}", code="matrix.not_found")
        if await self.membership(room_id, user_id) != "join":
            raise MatrixRequestError(
                f"{user_id} is not joined to {room_id}", code="matrix.forbidden"
            )

    async def send_as(
        self,
        sender: str,
        room_id: str,
        event_type: str,
        content: Mapping[str, Any],
        *,
        state_key: str | None = None,
    ) -> MatrixEvent:
        """Send an event as ``sender``, checked against the room's power levels.

        Raises:
            MatrixRequestError: ``matrix.not_found`` (no room) or ``matrix.forbidden``
                (not joined, or below the level the event needs).
        """
        async with self._lock:
            await self._require_joined(room_id, sender)
            levels = await self.power_levels(room_id)
            if not levels.can_send(sender, event_type, state=state_key is not None):
                raise MatrixRequestError(
                    f"{sender} may not send {event_type} in {room_id}", code="matrix.forbidden"
                )
            return await self._append(room_id, sender, event_type, content, state_key)

    async def join(self, room_id: str, user_id: str, *, display_name: str | None = None) -> None:
        """``user_id`` accepts an invite (or joins a room they were never refused)."""
        async with self._lock:
            if await self.state_event(room_id, "m.room.create", "") is None:
                raise MatrixRequestError(f"no room {room_id}", code="matrix.not_found")
            if await self.membership(room_id, user_id) not in {"invite", "join"}:
                raise MatrixRequestError(
                    f"{user_id} was not invited to {room_id}", code="matrix.forbidden"
                )
            content: dict[str, Any] = {"membership": "join"}
            if display_name:
                content["displayname"] = display_name
            await self._append(room_id, user_id, "m.room.member", content, user_id)

    async def invite_as(self, sender: str, room_id: str, user_id: str) -> None:
        """``sender`` invites ``user_id``, checked against the room's invite level."""
        async with self._lock:
            await self._require_joined(room_id, sender)
            if not (await self.power_levels(room_id)).can(sender, "invite"):
                raise MatrixRequestError(
                    f"{sender} may not invite in {room_id}", code="matrix.forbidden"
                )
            if await self.membership(room_id, user_id) == "join":
                return
            await self._append(room_id, sender, "m.room.member", {"membership": "invite"}, user_id)

    async def create_room_as(
        self,
        creator: str,
        *,
        name: str,
        topic: str | None = None,
        invite: Sequence[str] = (),
        power_users: Mapping[str, int] | None = None,
        encrypted: bool = True,
        initial_state: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """Create a room as ``creator`` (joined at level 100); its id."""
        room_id = f"!{secrets.token_urlsafe(12)}:{LOCAL_SERVER_NAME}"
        users = {creator: 100, **dict(power_users or {})}
        async with self._lock:
            await self._append(room_id, creator, "m.room.create", {"creator": creator}, "")
            await self._append(room_id, creator, "m.room.member", {"membership": "join"}, creator)
            await self._append(
                room_id,
                creator,
                "m.room.power_levels",
                {
                    "users": users,
                    "users_default": 0,
                    "events_default": 0,
                    "state_default": 50,
                    "invite": 0,
                    "kick": 50,
                    "ban": 50,
                    "redact": 50,
                },
                "",
            )
            await self._append(room_id, creator, "m.room.name", {"name": name}, "")
            if topic:
                await self._append(room_id, creator, "m.room.topic", {"topic": topic}, "")
            if encrypted:
                await self._append(
                    room_id,
                    creator,
                    "m.room.encryption",
                    {"algorithm": "m.megolm.v1.aes-sha2"},
                    "",
                )
            for state in initial_state:
                await self._append(
                    room_id,
                    creator,
                    str(state["type"]),
                    dict(state.get("content") or {}),
                    str(state.get("state_key", "")),
                )
            for user_id in dict.fromkeys(invite):
                if user_id != creator:
                    await self._append(
                        room_id, creator, "m.room.member", {"membership": "invite"}, user_id
                    )
        return room_id

    async def upload(self, data: bytes, *, content_type: str, filename: str) -> str:
        """Store media; its ``mxc://`` URI (content-addressed)."""
        if len(data) > MATRIX_MAX_MEDIA_BYTES:
            raise MatrixRequestError("the media is too large", code="matrix.too_large")
        media_id = hashlib.sha256(data).hexdigest()[:32]
        db = await self._connection()
        await db.execute(
            "INSERT OR IGNORE INTO matrix_media (media_id, content_type, filename, data)"
            " VALUES (?, ?, ?, ?)",
            (media_id, content_type, filename, data),
        )
        await db.commit()
        return f"mxc://{LOCAL_SERVER_NAME}/{media_id}"

    async def download(self, mxc: str, *, max_bytes: int = MATRIX_MAX_MEDIA_BYTES) -> bytes:
        """The bytes behind an ``mxc://`` URI of this store."""
        server, _, media_id = mxc.removeprefix("mxc://").partition("/")
        if not mxc.startswith("mxc://") or server != LOCAL_SERVER_NAME or not media_id:
            raise MatrixRequestError(f"no media {mxc}", code="matrix.not_found")
        db = await self._connection()
        async with db.execute(
            "SELECT data FROM matrix_media WHERE media_id = ?", (media_id,)
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            raise MatrixRequestError(f"no media {mxc}", code="matrix.not_found")
        data = bytes(row[0])
        if len(data) > max_bytes:
            raise MatrixRequestError("the media is too large", code="matrix.too_large")
        return data

    def subscribe(self, room_id: str, handler: MatrixEventHandler) -> MatrixSubscription:
        """Deliver the room's new events to ``handler`` (in this process)."""
        subscription = _LocalSubscription(self, room_id, handler)
        self._subscriptions.add(subscription)
        return subscription


def _token_seq(token: str | None) -> int:
    if token is None:
        return 2**62
    if token.startswith("s") and token[1:].isdigit():
        return int(token[1:])
    raise MatrixRequestError(f"not a timeline token: {token!r}", code="matrix.failed")


class _LocalMatrixAccessor:
    """One user's view of the local store: the oracle acting in that user's rooms."""

    def __init__(self, store: LocalMatrixService, user_id: str) -> None:
        self._store = store
        self._user_id = user_id

    async def _check(self, room_id: str) -> None:
        if await self._store.membership(room_id, self._user_id) not in {"join", "invite"}:
            raise MatrixRequestError(
                "the user is not a member of that room", code="matrix.room_forbidden"
            )

    async def oracle_user_id(self) -> str:
        return self._store.oracle_user_id

    async def post_to_room(self, room_id: str, content: Mapping[str, Any]) -> str:
        return await self.send_event(room_id, "m.room.message", content)

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        await self._check(room_id)
        event = await self._store.send_as(self._store.oracle_user_id, room_id, event_type, content)
        return event.event_id

    async def get_room_state(self, room_id: str) -> list[dict[str, Any]]:
        await self._check(room_id)
        return [event.to_json() for event in await self._store.state(room_id)]

    async def get_event_by_id(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        await self._check(room_id)
        event = await self._store.event(room_id, event_id)
        return None if event is None else event.to_json()

    async def user_room_id(self) -> str | None:
        raise NotConfiguredError(
            "the local Matrix store has no user rooms",
            hint="the user's room belongs to the IXO client; keep such data locally",
        )

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        await self._check(room_id)
        event = await self._store.state_event(room_id, event_type, state_key)
        return None if event is None else dict(event.content)

    async def set_state_event(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        await self._check(room_id)
        event = await self._store.send_as(
            self._store.oracle_user_id, room_id, event_type, content, state_key=state_key
        )
        return event.event_id

    async def get_timeline(
        self, room_id: str, *, limit: int = 50, before: str | None = None
    ) -> TimelinePage:
        await self._check(room_id)
        return await self._store.timeline(room_id, limit, before)

    async def subscribe(self, room_id: str, handler: MatrixEventHandler) -> MatrixSubscription:
        await self._check(room_id)
        return self._store.subscribe(room_id, handler)

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
        if space_id is not None:
            await self._check(space_id)
        oracle = self._store.oracle_user_id
        state = list(initial_state)
        if space_id is not None:
            state.append(
                {"type": "m.space.parent", "state_key": space_id, "content": {"canonical": True}}
            )
        room_id = await self._store.create_room_as(
            oracle,
            name=name,
            topic=topic,
            invite=[self._user_id, *invite],
            power_users=None if user_power_level is None else {self._user_id: user_power_level},
            encrypted=encrypted,
            initial_state=state,
        )
        if space_id is not None:
            await self._store.send_as(
                oracle, space_id, "m.space.child", {"via": [LOCAL_SERVER_NAME]}, state_key=room_id
            )
        return room_id

    async def invite(self, room_id: str, user_id: str) -> None:
        await self._check(room_id)
        await self._store.invite_as(self._store.oracle_user_id, room_id, user_id)

    async def members(self, room_id: str) -> list[RoomMember]:
        await self._check(room_id)
        return RoomMember.from_state([e.to_json() for e in await self._store.state(room_id)])

    async def get_power_levels(self, room_id: str) -> PowerLevels:
        await self._check(room_id)
        return await self._store.power_levels(room_id)

    async def set_power_level(self, room_id: str, user_id: str, level: int) -> str:
        await self._check(room_id)
        content = dict((await self._store.power_levels(room_id)).content)
        content["users"] = {**dict(content.get("users") or {}), user_id: int(level)}
        return await self.set_state_event(room_id, "m.room.power_levels", content)

    async def upload(self, data: bytes, *, content_type: str, filename: str) -> str:
        return await self._store.upload(data, content_type=content_type, filename=filename)

    async def download(
        self,
        mxc: str,
        *,
        max_bytes: int = MATRIX_MAX_MEDIA_BYTES,
        encryption: Mapping[str, Any] | None = None,
    ) -> bytes:
        if encryption is not None:  # the local store keeps media in the clear
            raise MatrixRequestError(
                "the local store has no encrypted media", code="matrix.not_found"
            )
        return await self._store.download(mxc, max_bytes=max_bytes)
