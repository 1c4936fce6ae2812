"""Stored user delegations, revocations and re-authorisation prompts (SRV-34/35, UCAN-32)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from oracle_server._persistence.tables import (
    insert_for,
    reauth_prompts,
    revoked_delegations,
    user_delegations,
)

__all__ = ["DelegationStore", "ReauthPrompts", "StoredDelegation"]


@dataclass(frozen=True)
class StoredDelegation:
    """The delegation a user granted the oracle, kept for minting downstream invocations.

    ``raw`` is a bearer credential: it is left out of ``repr`` so it never reaches a log.

    Attributes:
        user_did: The issuing user; one stored delegation per user.
        raw: Base64 CAR of the delegation.
        cid: The key the delegation is revoked under: its signed payload's CID
            (``Ucan.replay_key``), the same for every re-encoding of it. Rows stored
            before hold the root block's CID.
        issuer: ``iss`` of the delegation (equals ``user_did``).
        audience: ``aud`` of the delegation (``ORACLE_DID``).
        capabilities: ``att`` as JSON objects (``{"with", "can", "nb"?}``).
        expiration: ``exp`` in Unix seconds, ``None`` when it never expires.
        stored_at: When it was stored (aware, UTC).
    """

    user_did: str
    raw: str = field(repr=False)
    cid: str
    issuer: str
    audience: str
    capabilities: list[dict[str, Any]]
    expiration: int | None
    stored_at: datetime


def _delegation(row: RowMapping) -> StoredDelegation:
    return StoredDelegation(
        user_did=row["user_did"],
        raw=row["raw"],
        cid=row["cid"],
        issuer=row["issuer"],
        audience=row["audience"],
        capabilities=list(row["capabilities"]),
        expiration=row["expiration"],
        stored_at=row["stored_at"],
    )


class DelegationStore:
    """One stored delegation per user, plus the CIDs users revoked.

    Args:
        engine: The server database.
        clock: Unix time in seconds, used for revocation times.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    async def get(self, user_did: str) -> StoredDelegation | None:
        """The user's stored delegation, expired or not (callers check ``expiration``)."""
        query = select(user_delegations).where(user_delegations.c.user_did == user_did)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).mappings().one_or_none()
        return None if row is None else _delegation(row)

    async def put(self, delegation: StoredDelegation) -> None:
        """Store ``delegation`` as the user's, replacing any previous one."""
        values = {
            "user_did": delegation.user_did,
            "raw": delegation.raw,
            "cid": delegation.cid,
            "issuer": delegation.issuer,
            "audience": delegation.audience,
            "capabilities": delegation.capabilities,
            "expiration": delegation.expiration,
            "stored_at": delegation.stored_at,
        }
        statement = insert_for(self._engine.dialect.name, user_delegations).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[user_delegations.c.user_did],
            set_={name: statement.excluded[name] for name in values if name != "user_did"},
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def delete(self, user_did: str) -> StoredDelegation | None:
        """Remove the user's delegation and return it (``None`` when there was none).

        Does not revoke it: call :meth:`revoke` with its CID for that (SRV-35).
        """
        statement = (
            delete(user_delegations)
            .where(user_delegations.c.user_did == user_did)
            .returning(user_delegations)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(statement)).mappings().one_or_none()
        return None if row is None else _delegation(row)

    async def revoke(self, cid: str, user_did: str) -> None:
        """Record ``cid`` as revoked by ``user_did``; revoking twice keeps the first record."""
        statement = (
            insert_for(self._engine.dialect.name, revoked_delegations)
            .values(
                cid=cid,
                user_did=user_did,
                revoked_at=datetime.fromtimestamp(self._clock(), UTC),
            )
            .on_conflict_do_nothing(index_elements=[revoked_delegations.c.cid])
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def is_revoked(self, *cids: str) -> bool:
        """Whether any user revoked a delegation under one of these keys.

        Pass every key of the delegation: its signed payload's key (``replay_key``, the
        same for every re-encoding) and its block's CID (what older rows hold).
        """
        query = select(revoked_delegations.c.cid).where(revoked_delegations.c.cid.in_(cids))
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).first() is not None

    async def usable(self, user_did: str) -> str | None:
        """The user's stored delegation (raw) unless it was revoked; ``None`` otherwise.

        What a turn adopts when its request brought no delegation (SRV-42). Expiry is
        left to the UCAN service, which asks the user to re-authorise.
        """
        revoked = (
            select(revoked_delegations.c.cid)
            .where(revoked_delegations.c.cid == user_delegations.c.cid)
            .exists()
        )
        query = select(user_delegations.c.raw).where(
            user_delegations.c.user_did == user_did, ~revoked
        )
        async with self._engine.connect() as conn:
            raw = (await conn.execute(query)).scalar_one_or_none()
        return None if raw is None else str(raw)


class ReauthPrompts:
    """Throttles re-authorisation prompts per user across replicas (UCAN-32).

    Args:
        engine: The server database.
        clock: Unix time in seconds.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    async def should_prompt(self, user_did: str, throttle_seconds: int) -> bool:
        """Whether to prompt ``user_did`` now; when ``True`` the prompt time is recorded.

        One statement decides and records, so two replicas asking at once never both
        get ``True``.
        """
        now = datetime.fromtimestamp(self._clock(), UTC)
        insert = insert_for(self._engine.dialect.name, reauth_prompts).values(
            user_did=user_did, last_prompt_at=now
        )
        statement = insert.on_conflict_do_update(
            index_elements=[reauth_prompts.c.user_did],
            set_={"last_prompt_at": insert.excluded.last_prompt_at},
            where=reauth_prompts.c.last_prompt_at <= now - timedelta(seconds=throttle_seconds),
        ).returning(reauth_prompts.c.user_did)
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).first() is not None
