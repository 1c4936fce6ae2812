"""Stored delegations, revocations (SRV-34/35) and the re-authorisation throttle (UCAN-32)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from oracle_server._persistence import Storage, StoredDelegation

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"
ORACLE = "did:ixo:ixo1oracle"
STORED_AT = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def delegation(
    user_did: str = ALICE, cid: str = "bafyreia", expiration: int | None = 1_900_000_000
) -> StoredDelegation:
    """A delegation from ``user_did`` to the oracle."""
    return StoredDelegation(
        user_did=user_did,
        raw="OqJlcm9vdHOB2CpYJQABcRIg-secret-car",
        cid=cid,
        issuer=user_did,
        audience=ORACLE,
        capabilities=[
            {"with": "ixo:oracle:*", "can": "*"},
            {"with": "memory/*", "can": "memory/read", "nb": {"limit": 10, "tags": ["a", "b"]}},
        ],
        expiration=expiration,
        stored_at=STORED_AT,
    )


async def test_put_then_get_round_trips_every_field(storage: Storage) -> None:
    stored = delegation()
    await storage.delegations.put(stored)
    assert await storage.delegations.get(ALICE) == stored


async def test_get_is_per_user(storage: Storage) -> None:
    await storage.delegations.put(delegation(ALICE))
    assert await storage.delegations.get(BOB) is None


async def test_put_replaces_the_users_delegation(storage: Storage) -> None:
    await storage.delegations.put(delegation(cid="bafyold"))
    newer = dataclasses.replace(
        delegation(cid="bafynew", expiration=None),
        capabilities=[{"with": "ixo:oracle:*", "can": "chat/send"}],
    )
    await storage.delegations.put(newer)
    assert await storage.delegations.get(ALICE) == newer


async def test_large_expiration_survives(storage: Storage) -> None:
    far = delegation(expiration=2**40)
    await storage.delegations.put(far)
    fetched = await storage.delegations.get(ALICE)
    assert fetched is not None
    assert fetched.expiration == 2**40


async def test_delete_returns_the_removed_delegation(storage: Storage) -> None:
    stored = delegation()
    await storage.delegations.put(stored)
    assert await storage.delegations.delete(ALICE) == stored
    assert await storage.delegations.get(ALICE) is None
    assert await storage.delegations.delete(ALICE) is None


async def test_delete_does_not_revoke(storage: Storage) -> None:
    await storage.delegations.put(delegation(cid="bafyone"))
    await storage.delegations.delete(ALICE)
    assert await storage.delegations.is_revoked("bafyone") is False


async def test_revoke_marks_the_cid(storage: Storage) -> None:
    assert await storage.delegations.is_revoked("bafyone") is False
    await storage.delegations.revoke("bafyone", ALICE)
    await storage.delegations.revoke("bafyone", ALICE)
    assert await storage.delegations.is_revoked("bafyone") is True
    assert await storage.delegations.is_revoked("bafytwo") is False


async def test_usable_is_the_stored_raw_until_its_cid_is_revoked(storage: Storage) -> None:
    await storage.delegations.put(delegation(ALICE, cid="bafyalice"))
    await storage.delegations.put(delegation(BOB, cid="bafybob"))
    assert await storage.delegations.usable(ALICE) == delegation().raw
    await storage.delegations.revoke("bafyalice", ALICE)
    assert await storage.delegations.usable(ALICE) is None
    assert await storage.delegations.usable(BOB) == delegation().raw
    assert await storage.delegations.usable("did:key:z6MkNobody") is None
    # A new delegation under another CID is usable again.
    await storage.delegations.put(delegation(ALICE, cid="bafyalice2"))
    assert await storage.delegations.usable(ALICE) == delegation().raw


def test_repr_never_shows_the_raw_delegation() -> None:
    assert "secret-car" not in repr(delegation())


async def test_reauth_prompt_is_throttled_per_user(
    storage: Storage, advance_clock: Callable[[float], None]
) -> None:
    assert await storage.reauth.should_prompt(ALICE, 21600) is True
    assert await storage.reauth.should_prompt(ALICE, 21600) is False
    assert await storage.reauth.should_prompt(BOB, 21600) is True
    advance_clock(21599)
    assert await storage.reauth.should_prompt(ALICE, 21600) is False
    advance_clock(1)
    assert await storage.reauth.should_prompt(ALICE, 21600) is True
    assert await storage.reauth.should_prompt(ALICE, 21600) is False


async def test_concurrent_reauth_checks_prompt_once(
    open_storage: Callable[[], Awaitable[Storage]],
) -> None:
    first, second = await open_storage(), await open_storage()
    results = await asyncio.gather(
        *(store.reauth.should_prompt(ALICE, 3600) for store in [first, second] * 10)
    )
    assert results.count(True) == 1
