"""One scenario for every ``MatrixService``: what a plugin may rely on, checked end to end.

:func:`check_matrix_accessor` drives an accessor through rooms, timelines, subscriptions,
state, members, power levels, spaces and media, with a :class:`MatrixPeer` playing the
human in the room. The local store passes it with :class:`LocalMatrixPeer`; the server's
Matrix layer passes it against a real homeserver with a matrix-nio user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from oracle_core._matrix import (
    LocalMatrixService,
    MatrixAccessor,
    MatrixEvent,
    MatrixRequestError,
)

__all__ = ["LocalMatrixPeer", "MatrixPeer", "check_matrix_accessor"]

NOTE = "org.example.note"


class MatrixPeer(Protocol):
    """The human member of the rooms the oracle creates for them."""

    @property
    def user_id(self) -> str:
        """Their Matrix id (the one the accessor's user maps to)."""
        ...

    async def join(self, room_id: str) -> None:
        """Accept the oracle's invite."""
        ...

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        """Send an event as the human; its id."""
        ...


@dataclass
class LocalMatrixPeer:
    """A human of the local store."""

    store: LocalMatrixService
    user_id: str

    async def join(self, room_id: str) -> None:
        await self.store.join(room_id, self.user_id, display_name="Peer")

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        return (await self.store.send_as(self.user_id, room_id, event_type, content)).event_id


async def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:  # noqa: ASYNC109
    try:
        async with asyncio.timeout(timeout):
            while not condition():  # noqa: ASYNC110 - handlers append; nothing to wait on
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:.0f} s: {what}") from None


async def _refused(attempt: Awaitable[Any], code: str, what: str) -> None:
    try:
        await attempt
    except MatrixRequestError as exc:
        if exc.code != code:
            raise AssertionError(f"{what}: {exc.code}, not {code}") from exc
    else:
        raise AssertionError(f"{what}: not refused")


async def check_matrix_accessor(
    matrix: MatrixAccessor,
    peer: MatrixPeer,
    *,
    outsider: MatrixAccessor,
    invitee: str,
    timeout: float = 30.0,  # noqa: ASYNC109
) -> None:
    """Run the scenario; an ``AssertionError`` names what does not hold.

    Args:
        matrix: The accessor of the user ``peer`` plays.
        peer: That user in person.
        outsider: Another user's accessor, which must be refused the rooms.
        invitee: A third Matrix user to invite.
        timeout: Seconds to wait for each delivery.
    """
    room = await _room_for_the_user(matrix, peer)
    seen: list[MatrixEvent] = []

    async def collect(event: MatrixEvent) -> None:
        seen.append(event)

    subscription = await matrix.subscribe(room, collect)
    sent, said = await _events_are_delivered(matrix, peer, room, seen, timeout)
    await _timeline_pages_back_to_the_start(matrix, room, sent, said)
    await _state_levels_and_invites(matrix, peer, room, invitee)
    space = await _rooms_in_a_space(matrix)
    await _media(matrix)
    for attempt in (
        outsider.get_timeline(room),
        outsider.send_event(room, NOTE, {"n": -1}),
        outsider.get_power_levels(room),
        outsider.subscribe(room, collect),
        outsider.create_room(name="Stolen", space_id=space),
    ):
        await _refused(attempt, "matrix.room_forbidden", "another user's access")

    # A closed subscription hears nothing more; an open one still does.
    subscription.close()
    later: list[MatrixEvent] = []

    async def collect_later(event: MatrixEvent) -> None:
        later.append(event)

    second = await matrix.subscribe(room, collect_later)
    after = await matrix.send_event(room, NOTE, {"n": 3})
    await _until(lambda: any(e.event_id == after for e in later), timeout, "delivered")
    assert all(event.event_id != after for event in seen), "closed means closed"
    second.close()


async def _room_for_the_user(matrix: MatrixAccessor, peer: MatrixPeer) -> str:
    oracle = await matrix.oracle_user_id()
    room = await matrix.create_room(name="Checks", topic="what plugins use", user_power_level=50)
    members = {m.user_id: m.membership for m in await matrix.members(room)}
    assert members.get(oracle) == "join", members
    assert members.get(peer.user_id) == "invite", members
    levels = await matrix.get_power_levels(room)
    assert levels.user_level(oracle) >= 100
    assert levels.can_send(oracle, "m.room.power_levels", state=True)
    assert levels.user_level(peer.user_id) == 50
    await peer.join(room)
    return room


async def _events_are_delivered(
    matrix: MatrixAccessor,
    peer: MatrixPeer,
    room: str,
    seen: list[MatrixEvent],
    timeout: float,  # noqa: ASYNC109
) -> tuple[list[str], str]:
    oracle = await matrix.oracle_user_id()
    sent = [await matrix.send_event(room, NOTE, {"n": n}) for n in range(3)]
    said = await peer.send(room, "m.room.message", {"msgtype": "m.text", "body": "hi"})
    await _until(
        lambda: {*sent, said} <= {event.event_id for event in seen},
        timeout,
        "the subscription delivers every new event",
    )
    notes = [event for event in seen if event.type == NOTE]
    assert [event.content["n"] for event in notes] == [0, 1, 2], "in order"
    assert all(event.sender == oracle for event in notes)
    [message] = [event for event in seen if event.event_id == said]
    assert message.sender == peer.user_id
    assert message.content["body"] == "hi", "decrypted for the plugin"
    return sent, said


async def _timeline_pages_back_to_the_start(
    matrix: MatrixAccessor, room: str, sent: list[str], said: str
) -> None:
    page = await matrix.get_timeline(room, limit=2)
    assert len(page.events) == 2
    assert page.events[-1].event_id == said, "the latest page ends with the latest event"
    collected = list(page.events)
    token = page.before
    while token is not None:
        page = await matrix.get_timeline(room, limit=2, before=token)
        collected = [*page.events, *collected]
        token = page.before
    ids = [event.event_id for event in collected]
    assert ids.index(sent[0]) < ids.index(sent[1]) < ids.index(sent[2]) < ids.index(said)
    assert collected[0].type == "m.room.create", "paged back to the room's start"
    stamps = [event.origin_server_ts for event in collected]
    assert stamps == sorted(stamps)
    note = await matrix.get_event_by_id(room, sent[0])
    assert note is not None


async def _state_levels_and_invites(
    matrix: MatrixAccessor, peer: MatrixPeer, room: str, invitee: str
) -> None:
    await matrix.set_state_event(room, "org.example.state", {"v": 1}, "k")
    assert await matrix.get_state_event(room, "org.example.state", "k") == {"v": 1}
    assert await matrix.get_state_event(room, "org.example.state", "other") is None
    await matrix.set_power_level(room, peer.user_id, 60)
    assert (await matrix.get_power_levels(room)).user_level(peer.user_id) == 60
    await matrix.invite(room, invitee)
    members = {m.user_id: m.membership for m in await matrix.members(room)}
    assert members.get(peer.user_id) == "join"
    assert members.get(invitee) == "invite"


async def _rooms_in_a_space(matrix: MatrixAccessor) -> str:
    space = await matrix.create_room(name="Space", encrypted=False)
    child = await matrix.create_room(name="Page", space_id=space)
    space_state = await matrix.get_room_state(space)
    assert any(e["type"] == "m.space.child" and e["state_key"] == child for e in space_state)
    assert await matrix.get_state_event(child, "m.space.parent", space) is not None
    return space


async def _media(matrix: MatrixAccessor) -> None:
    data = b"\x89PNG not really" * 50
    mxc = await matrix.upload(data, content_type="image/png", filename="x.png")
    assert mxc.startswith("mxc://")
    assert await matrix.download(mxc) == data
    await _refused(matrix.download(mxc, max_bytes=10), "matrix.too_large", "past max_bytes")
