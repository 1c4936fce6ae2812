"""One capability rule: local mode, ixo mode and the validator answer every claim alike.

Each row of ``RULE`` is a user's grants, a claimed resource and ability, and whether the
grants cover the claim. Every row is asked of core's local-mode UCAN service
(``PermissiveUcanService``), of the server's ixo-mode service over a real delegation
from the user to the oracle, and of ``oracle_ucan.validate_invocation`` over an
invocation the oracle signs with that delegation as its proof. If any of them drifted
from ucanto's rule, its answer would part from the row's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from oracle_core import CapabilityDeniedError, CapabilityGrant, PermissiveUcanService, UserInfo
from oracle_server import IxoUcanService
from oracle_ucan import (
    CapabilityDef,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    delegate,
    invoke,
    validate_delegation,
    validate_invocation,
)

NOW = 1_700_000_000
SERVICE = "did:web:service.example"


@dataclass(frozen=True)
class Row:
    """Grants ``(with, can)``, the claim, and whether the grants cover it."""

    grants: tuple[tuple[str, str], ...]
    resource: str
    ability: str
    covered: bool


RULE: dict[str, Row] = {
    # Resources: only `ucan:*` means any resource; a bare `*` is literal.
    "bare * is not any resource": Row((("*", "*"),), "ixo:memory", "memory/read", False),
    "bare * with an exact ability": Row(
        (("*", "memory/read"),), "ixo:memory", "memory/read", False
    ),
    "ucan:* covers ixo:memory": Row((("ucan:*", "*"),), "ixo:memory", "memory/read", True),
    "ucan:* covers an entity": Row((("ucan:*", "*"),), "ixo:entity:1", "*", True),
    "ucan:* covers a urn": Row((("ucan:*", "*"),), "urn:anything/at/all", "mcp/call", True),
    "ucan:* covers a url": Row((("ucan:*", "*"),), "https://svc.example/a", "mcp/call", True),
    "ucan:* keeps the ability": Row((("ucan:*", "memory/read"),), "ixo:x", "memory/write", False),
    # `:*` and `/*` wildcards cover what starts with their prefix, and only that.
    "ixo:entity:* covers one": Row(
        (("ixo:entity:*", "entity/read"),), "ixo:entity:1", "entity/read", True
    ),
    "ixo:entity:* not the bare ns": Row(
        (("ixo:entity:*", "entity/read"),), "ixo:entity", "entity/read", False
    ),
    "ixo:entity:* not a sibling": Row(
        (("ixo:entity:*", "entity/read"),), "ixo:entityx:1", "entity/read", False
    ),
    "url /* covers a path": Row(
        (("https://svc.example/*", "mcp/call"),), "https://svc.example/tools/a", "mcp/call", True
    ),
    "url /* not a longer host": Row(
        (("https://svc.example/*", "mcp/call"),), "https://svc.example.evil/a", "mcp/call", False
    ),
    # Exact resources are equality, not prefixes.
    "exact resource": Row((("ixo:entity:1", "entity/read"),), "ixo:entity:1", "entity/read", True),
    "prefix trap :1 vs :10": Row(
        (("ixo:entity:1", "entity/read"),), "ixo:entity:10", "entity/read", False
    ),
    "prefix trap memory2": Row(
        (("ixo:memory", "memory/read"),), "ixo:memory2", "memory/read", False
    ),
    # Abilities: exact, `ns/*`, `*`.
    "exact ability": Row((("ixo:memory", "memory/read"),), "ixo:memory", "memory/read", True),
    "other exact ability": Row(
        (("ixo:memory", "memory/read"),), "ixo:memory", "memory/write", False
    ),
    "ns/* covers its ns": Row((("ixo:memory", "memory/*"),), "ixo:memory", "memory/read", True),
    "ns/* covers deeper": Row((("ixo:memory", "memory/*"),), "ixo:memory", "memory/sub/op", True),
    "ns/* covers itself": Row((("ixo:memory", "memory/*"),), "ixo:memory", "memory/*", True),
    "ns/* not a sibling ns": Row(
        (("ixo:memory", "memory/*"),), "ixo:memory", "memoryx/read", False
    ),
    "ns/* not the bare ns": Row((("ixo:memory", "memory/*"),), "ixo:memory", "memory", False),
    "claim * against ns/*": Row((("ixo:memory", "memory/*"),), "ixo:memory", "*", False),
    "claim * against exact": Row((("ixo:memory", "memory/read"),), "ixo:memory", "*", False),
    "claim ns/* against exact": Row(
        (("ixo:memory", "memory/read"),), "ixo:memory", "memory/*", False
    ),
    "* covers claim *": Row((("ixo:memory", "*"),), "ixo:memory", "*", True),
    "* covers any ability": Row((("ixo:memory", "*"),), "ixo:memory", "anything/goes", True),
    # Several grants: one grant must cover the whole claim; grants do not mix.
    "grants do not mix": Row(
        (("ixo:memory", "memory/read"), ("ixo:entity:*", "entity/write")),
        "ixo:memory",
        "entity/write",
        False,
    ),
    "second grant covers": Row(
        (("ixo:memory", "memory/read"), ("ixo:entity:*", "entity/write")),
        "ixo:entity:7",
        "entity/write",
        True,
    ),
}


@pytest.fixture(scope="module")
def user() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture(scope="module")
def oracle() -> Ed25519Signer:
    return Ed25519Signer.generate()


def _delegation(user: Ed25519Signer, oracle: Ed25519Signer, row: Row) -> Delegation:
    return delegate(
        user,
        audience=oracle.did(),
        capabilities=[{"with": with_, "can": can} for with_, can in row.grants],
        expiration=NOW + 3600,
    )


@pytest.mark.parametrize("row", list(RULE.values()), ids=list(RULE))
def test_local_mode_follows_the_rule(row: Row) -> None:
    grants = [CapabilityGrant(with_=with_, can=can) for with_, can in row.grants]
    ucan = PermissiveUcanService(grants=grants).for_user(UserInfo(did="did:key:z6MkUser"))

    assert ucan.has_capability(row.resource, row.ability) is row.covered
    if row.covered:
        ucan.require_capability(row.resource, row.ability)
    else:
        with pytest.raises(CapabilityDeniedError):
            ucan.require_capability(row.resource, row.ability)


@pytest.mark.parametrize("row", list(RULE.values()), ids=list(RULE))
async def test_ixo_mode_follows_the_rule(
    row: Row, user: Ed25519Signer, oracle: Ed25519Signer
) -> None:
    delegation = _delegation(user, oracle, row)
    adopted = await validate_delegation(delegation.to_base64(), audience=oracle.did(), now=NOW)
    assert adopted.ok, adopted.error
    service = IxoUcanService(oracle_did=oracle.did(), signer=lambda: oracle, clock=lambda: NOW)
    ucan = service.for_user(UserInfo(did=user.did(), ucan_delegation=delegation.to_base64()))

    assert ucan.has_capability(row.resource, row.ability) is row.covered


@pytest.mark.parametrize("row", list(RULE.values()), ids=list(RULE))
async def test_the_validator_follows_the_rule(
    row: Row, user: Ed25519Signer, oracle: Ed25519Signer
) -> None:
    invocation = invoke(
        oracle,
        audience=SERVICE,
        capability={"with": row.resource, "can": row.ability},
        expiration=NOW + 600,
        proofs=[_delegation(user, oracle, row)],
    )

    result = await validate_invocation(
        invocation.to_base64(),
        # An empty protocol accepts every resource scheme the table uses.
        CapabilityDef(can=row.ability, protocol=""),
        row.resource,
        audience=SERVICE,
        root_issuers=[user.did()],
        store=InMemoryInvocationStore(clock=lambda: NOW),
        now=NOW,
    )

    assert result.ok is row.covered, result.error
    if row.covered:
        assert result.proof_chain == (user.did(), oracle.did())
    else:
        # Refused by the derivation itself, not by a malformed token or claim.
        assert result.error is not None
        assert result.error.code == "UNAUTHORIZED"
        assert "is not authorized: no proof grants it" in result.error.message
