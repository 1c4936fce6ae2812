"""Session rows: ownership, ordering, paging and the ChatSession wire shape (SRV-17 … 21)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy.exc import StatementError

from oracle_server._persistence import DuplicateSessionError, SessionRecord, Storage, to_js_iso

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def session(session_id: str, user_did: str = ALICE, minutes: int = 0) -> SessionRecord:
    """A session created at ``T0`` and last updated ``minutes`` later."""
    return SessionRecord(
        session_id=session_id,
        user_did=user_did,
        title="Untitled",
        created_at=T0,
        last_updated_at=T0 + timedelta(minutes=minutes),
        oracle_name="Test Oracle",
        oracle_did="did:ixo:ixo1oracle",
        oracle_entity_did="did:ixo:entity:oracle",
    )


async def test_create_then_get_returns_the_record(storage: Storage) -> None:
    record = session("s-1")
    assert await storage.sessions.create(record) == record
    assert await storage.sessions.get(ALICE, "s-1") == record


async def test_another_users_session_is_invisible(storage: Storage) -> None:
    await storage.sessions.create(session("s-1", ALICE))
    assert await storage.sessions.get(BOB, "s-1") is None
    assert await storage.sessions.list(BOB) == ([], 0)


async def test_unknown_session_is_none(storage: Storage) -> None:
    assert await storage.sessions.get(ALICE, "missing") is None


async def test_duplicate_session_id_is_refused(storage: Storage) -> None:
    await storage.sessions.create(session("s-1", ALICE))
    with pytest.raises(DuplicateSessionError, match=r"persistence\.session_exists"):
        await storage.sessions.create(session("s-1", BOB))
    assert await storage.sessions.get(BOB, "s-1") is None


async def test_list_is_newest_first_with_pages_and_total(storage: Storage) -> None:
    for minutes in (3, 1, 4, 0, 2):
        await storage.sessions.create(session(f"s-{minutes}", minutes=minutes))
    await storage.sessions.create(session("bob-1", BOB, minutes=9))

    first, total = await storage.sessions.list(ALICE, limit=2)
    second, _ = await storage.sessions.list(ALICE, limit=2, offset=2)
    last, _ = await storage.sessions.list(ALICE, limit=2, offset=4)
    beyond, beyond_total = await storage.sessions.list(ALICE, limit=2, offset=10)

    assert total == 5
    assert [r.session_id for r in first + second + last] == ["s-4", "s-3", "s-2", "s-1", "s-0"]
    assert (beyond, beyond_total) == ([], 5)


async def test_list_defaults_to_twenty(storage: Storage) -> None:
    for index in range(25):
        await storage.sessions.create(session(f"s-{index:02d}", minutes=index))
    page, total = await storage.sessions.list(ALICE)
    assert (len(page), total) == (20, 25)
    assert page[0].session_id == "s-24"


async def test_list_filters_by_room(storage: Storage) -> None:
    await storage.sessions.create(dataclasses.replace(session("main-1"), room_id="!main:hs"))
    await storage.sessions.create(
        dataclasses.replace(session("task-1", minutes=1), room_id="!task:hs")
    )
    page, total = await storage.sessions.list(ALICE, room_id="!main:hs")
    assert ([r.session_id for r in page], total) == (["main-1"], 1)


async def test_list_rejects_negative_paging(storage: Storage) -> None:
    with pytest.raises(ValueError, match=r"persistence\.bad_page"):
        await storage.sessions.list(ALICE, offset=-1)


async def test_touch_moves_a_session_to_the_front(storage: Storage) -> None:
    await storage.sessions.create(session("old", minutes=0))
    await storage.sessions.create(session("new", minutes=5))
    await storage.sessions.touch(ALICE, "old", T0 + timedelta(minutes=10))

    page, _ = await storage.sessions.list(ALICE)
    assert [r.session_id for r in page] == ["old", "new"]
    assert page[0].last_updated_at == T0 + timedelta(minutes=10)


async def test_touch_without_a_time_uses_the_clock(
    storage: Storage, clock: Callable[[], float], advance_clock: Callable[[float], None]
) -> None:
    await storage.sessions.create(session("s-1"))
    advance_clock(60.5)
    await storage.sessions.touch(ALICE, "s-1")
    touched = await storage.sessions.get(ALICE, "s-1")
    assert touched is not None
    assert touched.last_updated_at == datetime.fromtimestamp(clock(), UTC)


async def test_touch_ignores_another_users_session(storage: Storage) -> None:
    await storage.sessions.create(session("s-1", ALICE))
    await storage.sessions.touch(BOB, "s-1", T0 + timedelta(days=1))
    unchanged = await storage.sessions.get(ALICE, "s-1")
    assert unchanged is not None
    assert unchanged.last_updated_at == T0


async def test_set_title_changes_only_the_owners_session(storage: Storage) -> None:
    await storage.sessions.create(session("s-1", ALICE))
    await storage.sessions.set_title(BOB, "s-1", "Hijacked")
    await storage.sessions.set_title(ALICE, "s-1", "Trip to Lisbon")
    titled = await storage.sessions.get(ALICE, "s-1")
    assert titled is not None
    assert titled.title == "Trip to Lisbon"


async def test_delete_removes_only_the_owners_session(storage: Storage) -> None:
    await storage.sessions.create(session("s-1", ALICE))
    await storage.sessions.create(session("s-2", ALICE))

    assert await storage.sessions.delete(BOB, "s-1") is False
    assert await storage.sessions.delete(ALICE, "s-1") is True
    assert await storage.sessions.delete(ALICE, "s-1") is False

    assert await storage.sessions.get(ALICE, "s-1") is None
    assert await storage.sessions.list(ALICE) == ([session("s-2")], 1)


async def test_user_context_and_optionals_round_trip(storage: Storage) -> None:
    context = {"locale": "pt-PT", "nested": {"list": [1, 2.5, None, True], "emoji": "🦉"}}
    record = dataclasses.replace(
        session("s-1"),
        title=None,
        last_processed_count=7,
        user_context=context,
        room_id="!room:hs",
        slack_thread_ts="1700000000.000100",
        client="slack",
    )
    await storage.sessions.create(record)
    assert await storage.sessions.get(ALICE, "s-1") == record


async def test_timestamps_come_back_as_aware_utc(storage: Storage) -> None:
    lisbon_summer = timezone(timedelta(hours=1))
    created = datetime(2026, 7, 1, 10, 30, 15, 123456, tzinfo=lisbon_summer)
    await storage.sessions.create(
        dataclasses.replace(session("s-1"), created_at=created, last_updated_at=created)
    )
    stored = await storage.sessions.get(ALICE, "s-1")
    assert stored is not None
    assert stored.created_at == created
    assert stored.created_at.tzinfo is UTC
    assert stored.created_at.hour == 9
    assert stored.created_at.microsecond == 123456


async def test_naive_timestamps_are_refused(storage: Storage) -> None:
    with pytest.raises(StatementError, match=r"persistence\.naive_datetime"):
        await storage.sessions.create(
            dataclasses.replace(session("s-1"), created_at=datetime(2026, 1, 1))
        )


async def test_stored_session_serialises_to_chat_session(storage: Storage) -> None:
    await storage.sessions.create(dataclasses.replace(session("s-1", minutes=90)))
    stored = await storage.sessions.get(ALICE, "s-1")
    assert stored is not None
    assert stored.to_wire() == {
        "sessionId": "s-1",
        "title": "Untitled",
        "lastUpdatedAt": "2026-01-01T10:30:00.000Z",
        "createdAt": "2026-01-01T09:00:00.000Z",
        "oracleName": "Test Oracle",
        "oracleDid": "did:ixo:ixo1oracle",
        "oracleEntityDid": "did:ixo:entity:oracle",
    }


def test_to_wire_includes_present_optionals() -> None:
    record = dataclasses.replace(
        session("s-1"),
        last_processed_count=0,
        user_context={"a": 1},
        room_id="!room:hs",
        slack_thread_ts="1.2",
    )
    wire = record.to_wire()
    assert wire["lastProcessedCount"] == 0
    assert wire["userContext"] == {"a": 1}
    assert wire["roomId"] == "!room:hs"
    assert wire["slackThreadTs"] == "1.2"
    assert "client" not in wire


def test_to_wire_omits_a_missing_title() -> None:
    wire = dataclasses.replace(session("s-1"), title=None).to_wire()
    assert "title" not in wire
    assert list(wire) == [
        "sessionId",
        "lastUpdatedAt",
        "createdAt",
        "oracleName",
        "oracleDid",
        "oracleEntityDid",
    ]


def test_js_iso_truncates_to_milliseconds_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert to_js_iso(datetime(2026, 1, 1, 11, 0, 0, 999999, tzinfo=plus_two)) == (
        "2026-01-01T09:00:00.999Z"
    )
    assert to_js_iso(datetime(2026, 1, 1, 9, 0, 0, 1000, tzinfo=UTC)) == "2026-01-01T09:00:00.001Z"


def test_js_iso_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match=r"persistence\.naive_datetime"):
        to_js_iso(datetime(2026, 1, 1))
