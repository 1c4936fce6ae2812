"""Single-use service invocations (UCAN-26, UCAN-27): ucanto ``claim()`` parity.

The reference chain is root → alice → bob → invocation: root grants ``memory/*`` on
``urn:mem/*`` with ``limit`` 10, alice narrows to ``memory/read`` on ``urn:mem/alice/*``
with ``limit`` 5, and bob invokes ``memory/read`` on ``urn:mem/alice/notes`` with
``limit`` 3.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import pytest
from multiformats.cid import CID
from multiformats.multihash import Multihash
from pydantic import BaseModel, Field

from oracle_ucan import (
    MAX_CHAIN_DEPTH,
    CapabilityDef,
    ChainVerifier,
    CompositeResolver,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    LocalResolver,
    Ucan,
    ValidateResult,
    cid_for,
    dag_cbor,
    delegate,
    encode_car,
    invoke,
    issue,
    validate_invocation,
)
from oracle_ucan.cid import RAW

NOW = 1_700_000_000
DAY = 24 * 3600
SERVICE = "did:web:memory.example.org"
RESOURCE = "urn:mem/alice/notes"


class Clock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def at_most_limit(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
    """A claim may ask for at most the granted ``limit``."""
    limit = (granted.get("nb") or {}).get("limit")
    if limit is None:
        return None
    wanted = (claimed.get("nb") or {}).get("limit")
    if not isinstance(wanted, int) or wanted > limit:
        return f"limit {wanted} exceeds {limit}"
    return None


READ = CapabilityDef("memory/read", derives=at_most_limit)


class Principals:
    def __init__(self) -> None:
        self.root = Ed25519Signer.generate()
        self.alice = Ed25519Signer.generate()
        self.bob = Ed25519Signer.generate()


@pytest.fixture
def who() -> Principals:
    return Principals()


def _grant(
    issuer: Ed25519Signer,
    audience: str,
    capability: Mapping[str, Any],
    *,
    expiration: int | None = NOW + 3600,
    proofs: Sequence[Delegation] = (),
) -> Delegation:
    return delegate(
        issuer,
        audience=audience,
        capabilities=[capability],
        expiration=expiration,
        proofs=proofs,
    )


def _chain(
    who: Principals,
    *,
    root_grant: Mapping[str, Any] | None = None,
    alice_grant: Mapping[str, Any] | None = None,
    claim: Mapping[str, Any] | None = None,
    expirations: tuple[int | None, int | None, int | None] = (NOW + 3600,) * 3,
    audience: str = SERVICE,
) -> Delegation:
    to_alice = _grant(
        who.root,
        who.alice.did(),
        root_grant or {"with": "urn:mem/*", "can": "memory/*", "nb": {"limit": 10}},
        expiration=expirations[0],
    )
    to_bob = _grant(
        who.alice,
        who.bob.did(),
        alice_grant or {"with": "urn:mem/alice/*", "can": "memory/read", "nb": {"limit": 5}},
        expiration=expirations[1],
        proofs=[to_alice],
    )
    return invoke(
        who.bob,
        audience=audience,
        capability=claim or {"with": RESOURCE, "can": "memory/read", "nb": {"limit": 3}},
        expiration=expirations[2],
        proofs=[to_bob],
    )


async def _check(
    token: str | bytes | Delegation,
    *,
    root_issuers: Collection[str],
    capability: CapabilityDef = READ,
    resource: str = RESOURCE,
    store: InMemoryInvocationStore | None = None,
    now: int = NOW,
    verifier: ChainVerifier | None = None,
    audience: str = SERVICE,
) -> ValidateResult:
    return await validate_invocation(
        token,
        capability,
        resource,
        audience=audience,
        root_issuers=root_issuers,
        store=store if store is not None else InMemoryInvocationStore(clock=Clock(now)),
        now=now,
        verifier=verifier,
    )


def _refused(result: ValidateResult, code: str) -> str:
    assert result.ok is False
    assert result.error is not None
    assert result.error.code == code
    assert result.invoker is None
    assert result.capability is None
    return result.error.message


# --- the reference chain -----------------------------------------------------------------


async def test_root_alice_bob_chain_with_attenuated_limit(who: Principals) -> None:
    token = _chain(who, expirations=(NOW + 3000, NOW + 2000, NOW + 1000))
    store = InMemoryInvocationStore(clock=Clock())

    result = await _check(token.to_base64(), root_issuers=[who.root.did()], store=store)

    assert result.ok is True
    assert result.error is None
    assert result.invoker == who.bob.did()
    assert result.capability == {"with": RESOURCE, "can": "memory/read", "nb": {"limit": 3}}
    assert result.proof_chain == (who.root.did(), who.alice.did(), who.bob.did())
    assert result.expiration == NOW + 1000
    assert result.facts == ()
    assert result.to_dict()["proof_chain"] == [who.root.did(), who.alice.did(), who.bob.did()]
    assert await store.has(token.ucan.replay_key()) is True
    assert len(store) == 1


async def test_claiming_exactly_the_granted_limit_is_accepted(who: Principals) -> None:
    token = _chain(who, claim={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 5}})
    assert (await _check(token, root_issuers=[who.root.did()])).ok is True


async def test_over_the_limit_is_a_caveat_violation(who: Principals) -> None:
    token = _chain(who, claim={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 6}})
    store = InMemoryInvocationStore(clock=Clock())
    result = await _check(token, root_issuers=[who.root.did()], store=store)
    assert _refused(result, "CAVEAT_VIOLATION") == "limit 6 exceeds 5"
    assert len(store) == 0


async def test_a_middle_link_exceeding_its_own_grant_is_a_caveat_violation(
    who: Principals,
) -> None:
    token = _chain(
        who, alice_grant={"with": "urn:mem/alice/*", "can": "memory/read", "nb": {"limit": 20}}
    )
    result = await _check(token, root_issuers=[who.root.did()])
    assert _refused(result, "CAVEAT_VIOLATION") == "limit 20 exceeds 10"


async def test_a_crashing_caveat_check_is_a_caveat_violation(who: Principals) -> None:
    def crashes(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
        raise RuntimeError("bug in caller code")

    result = await _check(
        _chain(who),
        root_issuers=[who.root.did()],
        capability=CapabilityDef("memory/read", derives=crashes),
    )
    assert _refused(result, "CAVEAT_VIOLATION") == "caveat check failed: RuntimeError"


# --- replay ------------------------------------------------------------------------------


async def test_second_use_is_a_replay(who: Principals) -> None:
    token = _chain(who).to_base64()
    store = InMemoryInvocationStore(clock=Clock())
    first = await _check(token, root_issuers=[who.root.did()], store=store)
    second = await _check(token, root_issuers=[who.root.did()], store=store)
    assert first.ok is True
    assert _refused(second, "REPLAY") == "Invocation has already been used"
    # Another store has not seen it: single use is the store's memory.
    assert (await _check(token, root_issuers=[who.root.did()])).ok is True


def _archive(top_block: bytes, link: CID, others: Delegation) -> str:
    """A ucanto-shaped archive whose root links ``top_block`` by ``link``, with the blocks
    of ``others``' proofs."""
    variant = dag_cbor.encode({"ucan@0.9.1": link})
    proofs = [(cid, data) for cid, data in others.iterate_blocks() if cid != others.cid]
    blocks = [*proofs, (link, top_block), (cid_for(variant), variant)]
    return base64.b64encode(encode_car([cid_for(variant)], blocks)).decode()


def _with_empty_nonce(block: bytes) -> bytes:
    """``block`` with ``nnc: ""`` added, signature kept: the signed payload omits it."""
    data = dag_cbor.decode(block)
    data["nnc"] = ""
    return dag_cbor.encode(data)


def _cid_v0(block: bytes) -> CID:
    return CID(0, 0x70, Multihash.from_bytes(bytes([0x12, 32]) + hashlib.sha256(block).digest()))


async def test_an_empty_nonce_added_to_a_used_invocation_is_a_replay(who: Principals) -> None:
    token = _chain(who)
    block = _with_empty_nonce(token.ucan.block)
    variant = _archive(block, cid_for(block), token)
    assert Ucan.decode(block).cid != token.cid  # a second CID for the same signed bytes
    store = InMemoryInvocationStore(clock=Clock())

    assert (await _check(token.to_base64(), root_issuers=[who.root.did()], store=store)).ok
    replayed = await _check(variant, root_issuers=[who.root.did()], store=store)

    assert _refused(replayed, "REPLAY") == "Invocation has already been used"
    # On its own the variant is a valid invocation: only its single use was spent.
    assert (await _check(variant, root_issuers=[who.root.did()])).ok is True


async def test_an_empty_nonce_removed_from_a_used_invocation_is_a_replay(who: Principals) -> None:
    to_alice = _grant(who.root, who.alice.did(), {"with": "urn:mem/*", "can": "memory/*"})
    token = invoke(
        who.alice,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=[to_alice],
        nonce="",
    )
    data = dag_cbor.decode(token.ucan.block)
    del data["nnc"]
    block = dag_cbor.encode(data)
    store = InMemoryInvocationStore(clock=Clock())
    capability = CapabilityDef("memory/read")

    first = await _check(token, root_issuers=[who.root.did()], store=store, capability=capability)
    replayed = await _check(
        _archive(block, cid_for(block), token),
        root_issuers=[who.root.did()],
        store=store,
        capability=capability,
    )

    assert first.ok is True
    assert _refused(replayed, "REPLAY") == "Invocation has already been used"


async def test_a_caveat_rewritten_as_an_equal_float_is_a_replay(who: Principals) -> None:
    # JavaScript prints 3.0 as 3: an integer caveat and the equal float sign the same bytes.
    token = _chain(
        who,
        root_grant={"with": "urn:mem/*", "can": "memory/*"},
        alice_grant={"with": "urn:mem/alice/*", "can": "memory/read"},
    )
    data = dag_cbor.decode(token.ucan.block)
    data["att"] = [{**data["att"][0], "nb": {"limit": 3.0}}]
    block = dag_cbor.encode(data)
    assert Ucan.decode(block).signing_input() == token.ucan.signing_input()
    store = InMemoryInvocationStore(clock=Clock())
    equality = CapabilityDef("memory/read")

    first = await _check(token, root_issuers=[who.root.did()], store=store, capability=equality)
    replayed = await _check(
        _archive(block, cid_for(block), token),
        root_issuers=[who.root.did()],
        store=store,
        capability=equality,
    )

    assert first.ok is True
    assert _refused(replayed, "REPLAY") == "Invocation has already been used"


@pytest.mark.parametrize(
    "relink",
    [pytest.param(lambda block: cid_for(block, RAW), id="raw"), pytest.param(_cid_v0, id="v0")],
)
async def test_a_ucan_block_linked_by_another_cid_is_refused(
    who: Principals, relink: Callable[[bytes], CID]
) -> None:
    token = _chain(who)
    variant = _archive(token.ucan.block, relink(token.ucan.block), token)
    store = InMemoryInvocationStore(clock=Clock())

    assert (await _check(token, root_issuers=[who.root.did()], store=store)).ok is True
    after_use = await _check(variant, root_issuers=[who.root.did()], store=store)
    unused = await _check(variant, root_issuers=[who.root.did()])

    for result in (after_use, unused):
        assert _refused(result, "INVALID_FORMAT") == (
            "a UCAN block must be linked by a DAG-CBOR CIDv1 (sha2-256)"
        )


async def test_a_proof_linked_by_another_cid_is_refused(who: Principals) -> None:
    to_alice = _grant(who.root, who.alice.did(), {"with": "urn:mem/*", "can": "memory/*"})
    raw_link = cid_for(to_alice.ucan.block, RAW)
    top = issue(
        who.alice,
        audience=SERVICE,
        capabilities=[{"with": RESOURCE, "can": "memory/read"}],
        expiration=NOW + 60,
        proofs=[raw_link],
    )
    assert top.cid is not None
    variant = dag_cbor.encode({"ucan@0.9.1": top.cid})
    blocks = [(raw_link, to_alice.ucan.block), (top.cid, top.block), (cid_for(variant), variant)]
    token = base64.b64encode(encode_car([cid_for(variant)], blocks)).decode()

    result = await _check(
        token, root_issuers=[who.root.did()], capability=CapabilityDef("memory/read")
    )

    assert _refused(result, "INVALID_FORMAT") == (
        "a UCAN block must be linked by a DAG-CBOR CIDv1 (sha2-256)"
    )


def test_every_encoding_of_one_signed_ucan_has_one_replay_key(who: Principals) -> None:
    token = _chain(who)
    block = _with_empty_nonce(token.ucan.block)
    assert Ucan.decode(block).replay_key() == token.ucan.replay_key()
    assert Ucan.decode(block).cid != token.cid
    # Ed25519 is deterministic: the same fields are the same invocation, other fields not.
    assert _chain(who).ucan.replay_key() == token.ucan.replay_key()
    other = _chain(who, claim={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 2}})
    assert other.ucan.replay_key() != token.ucan.replay_key()


async def test_replay_is_recorded_until_the_chain_expires(who: Principals) -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    token = _chain(who, expirations=(NOW + 3600, NOW + 120, None))
    assert (await _check(token, root_issuers=[who.root.did()], store=store)).ok is True
    clock.now = NOW + 119
    assert await store.has(token.ucan.replay_key()) is True
    clock.now = NOW + 120
    assert await store.has(token.ucan.replay_key()) is False


@pytest.mark.parametrize(
    "expirations",
    [(NOW + 3 * DAY, NOW + 2 * DAY, NOW + 2 * DAY), (None, None, None)],
    ids=["far-expiry", "never-expires"],
)
async def test_replay_is_recorded_for_at_most_a_day(
    who: Principals, expirations: tuple[int | None, int | None, int | None]
) -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    token = _chain(who, expirations=expirations)
    assert (await _check(token, root_issuers=[who.root.did()], store=store)).ok is True
    clock.now = NOW + DAY - 1
    assert await store.has(token.ucan.replay_key()) is True
    clock.now = NOW + DAY
    assert await store.has(token.ucan.replay_key()) is False


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (
            {"claim": {"with": RESOURCE, "can": "memory/read", "nb": {"limit": 99}}},
            "CAVEAT_VIOLATION",
        ),
        (
            {"claim": {"with": "urn:mem/bob/notes", "can": "memory/read", "nb": {"limit": 1}}},
            "UNAUTHORIZED",
        ),
        ({"expirations": (NOW - 1, NOW + 60, NOW + 60)}, "EXPIRED"),
        ({"audience": "did:web:elsewhere.example.org"}, "UNAUTHORIZED"),
    ],
    ids=["caveat", "resource", "expired", "audience"],
)
async def test_a_refused_invocation_is_not_recorded(
    who: Principals, change: dict[str, Any], code: str
) -> None:
    store = InMemoryInvocationStore(clock=Clock())
    token = _chain(who, **change)
    _refused(await _check(token, root_issuers=[who.root.did()], store=store), code)
    assert len(store) == 0
    assert await store.has(token.ucan.replay_key()) is False


async def test_concurrent_uses_of_one_invocation_accept_only_one(who: Principals) -> None:
    # The oracle invokes as its did:ixo; the first resolution of its keys awaits the
    # resolver, as a Blocksync lookup would, so the two requests interleave.
    oracle_ixo = "did:ixo:ixo1oracle00000000000000000000000000000"
    to_oracle = _grant(who.root, oracle_ixo, {"with": "urn:mem/*", "can": "memory/*"})
    token = invoke(
        who.bob.with_did(oracle_ixo),
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=[to_oracle],
    ).to_base64()
    local = LocalResolver()
    local.register(oracle_ixo, who.bob.did().removeprefix("did:key:"))
    verifier = ChainVerifier(CompositeResolver([local]))
    store = InMemoryInvocationStore(clock=Clock())

    results = await asyncio.gather(
        *(
            _check(token, root_issuers=[who.root.did()], store=store, verifier=verifier)
            for _ in range(2)
        )
    )

    # A single-use invocation must be accepted once, whatever the timing.
    assert sorted(r.ok for r in results) == [False, True]
    assert [r.error.code for r in results if r.error is not None] == ["REPLAY"]


# --- abilities and resources -----------------------------------------------------------


@pytest.mark.parametrize("granted", ["memory/read", "memory/*", "*"])
async def test_ability_covered(who: Principals, granted: str) -> None:
    token = _chain(
        who,
        root_grant={"with": "urn:mem/*", "can": granted},
        alice_grant={"with": "urn:mem/*", "can": granted},
        claim={"with": RESOURCE, "can": "memory/read"},
    )
    assert (await _check(token, root_issuers=[who.root.did()])).ok is True


@pytest.mark.parametrize("granted", ["memory/write", "store/*", "memory", "memory/read/x"])
async def test_ability_not_covered(who: Principals, granted: str) -> None:
    token = _chain(
        who,
        root_grant={"with": "urn:mem/*", "can": granted},
        alice_grant={"with": "urn:mem/*", "can": granted},
        claim={"with": RESOURCE, "can": "memory/read"},
    )
    message = _refused(await _check(token, root_issuers=[who.root.did()]), "UNAUTHORIZED")
    assert message == f"memory/read on {RESOURCE} is not authorized: no proof grants it"


async def test_wildcard_ability_claimed_on_a_namespace_grant_is_unauthorized(
    who: Principals,
) -> None:
    everything = CapabilityDef("*", protocol="ixo:")
    grant = {"with": "ixo:memory", "can": "memory/*"}
    token = _chain(
        who, root_grant=grant, alice_grant=grant, claim={"with": "ixo:memory", "can": "*"}
    )
    result = await _check(
        token, root_issuers=[who.root.did()], capability=everything, resource="ixo:memory"
    )
    assert _refused(result, "UNAUTHORIZED") == (
        "* on ixo:memory is not authorized: no proof grants it"
    )


async def test_wildcard_ability_claimed_on_a_wildcard_grant(who: Principals) -> None:
    everything = CapabilityDef("*", protocol="ixo:")
    grant = {"with": "ixo:memory", "can": "*"}
    token = _chain(
        who, root_grant=grant, alice_grant=grant, claim={"with": "ixo:memory", "can": "*"}
    )
    result = await _check(
        token, root_issuers=[who.root.did()], capability=everything, resource="ixo:memory"
    )
    assert result.ok is True
    assert result.capability == {"with": "ixo:memory", "can": "*"}


@pytest.mark.parametrize("granted", [RESOURCE, "urn:mem/*", "urn:mem/alice/*", "urn:*", "ucan:*"])
async def test_resource_covered(who: Principals, granted: str) -> None:
    token = _chain(
        who,
        root_grant={"with": granted, "can": "memory/read"},
        alice_grant={"with": granted, "can": "memory/read"},
        claim={"with": RESOURCE, "can": "memory/read"},
    )
    assert (await _check(token, root_issuers=[who.root.did()])).ok is True


@pytest.mark.parametrize("granted", ["urn:mem/bob/*", "urn:mem/alice", "urn:me/*", "*"])
async def test_resource_not_covered(who: Principals, granted: str) -> None:
    token = _chain(
        who,
        root_grant={"with": granted, "can": "memory/read"},
        alice_grant={"with": "urn:mem/alice/*", "can": "memory/read"},
        claim={"with": RESOURCE, "can": "memory/read"},
    )
    _refused(await _check(token, root_issuers=[who.root.did()]), "UNAUTHORIZED")


async def test_a_middle_link_widening_the_resource_is_unauthorized(who: Principals) -> None:
    token = _chain(
        who,
        root_grant={"with": "urn:mem/alice/*", "can": "memory/read"},
        alice_grant={"with": "urn:mem/*", "can": "memory/read"},
        claim={"with": "urn:mem/bob/notes", "can": "memory/read"},
    )
    _refused(
        await _check(token, root_issuers=[who.root.did()], resource="urn:mem/bob/notes"),
        "UNAUTHORIZED",
    )


async def test_a_wildcard_claim_covers_the_requested_resource(who: Principals) -> None:
    token = _chain(who, claim={"with": "urn:mem/alice/*", "can": "memory/read", "nb": {"limit": 1}})
    result = await _check(token, root_issuers=[who.root.did()])
    assert result.ok is True
    assert result.capability is not None
    assert result.capability["with"] == "urn:mem/alice/*"


async def test_invocation_for_another_resource_is_unauthorized(who: Principals) -> None:
    token = _chain(who)
    result = await _check(token, root_issuers=[who.root.did()], resource="urn:mem/alice/other")
    assert _refused(result, "UNAUTHORIZED") == (
        f"the invocation is for {RESOURCE}, not urn:mem/alice/other"
    )


async def test_invocation_not_claiming_the_ability_is_unauthorized(who: Principals) -> None:
    token = _chain(who)
    result = await _check(
        token, root_issuers=[who.root.did()], capability=CapabilityDef("memory/write")
    )
    assert _refused(result, "UNAUTHORIZED") == "the invocation does not claim memory/write"


# --- root issuers ------------------------------------------------------------------------


async def test_any_issuer_is_a_root_with_a_star(who: Principals) -> None:
    token = invoke(
        who.bob,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
    )
    result = await _check(token, root_issuers=["*"])
    assert result.ok is True
    assert result.proof_chain == (who.bob.did(),)
    assert result.expiration == NOW + 60


async def test_listed_issuer_is_a_root(who: Principals) -> None:
    token = _chain(who)
    by_alice = await _check(token, root_issuers=["did:key:z6MkSomeoneElse", who.alice.did()])
    assert by_alice.ok is True
    assert by_alice.proof_chain == (who.alice.did(), who.bob.did())


async def test_issuer_that_is_no_root_is_unauthorized(who: Principals) -> None:
    token = _chain(who)
    result = await _check(token, root_issuers=[Ed25519Signer.generate().did()])
    assert _refused(result, "UNAUTHORIZED") == (
        f"memory/read on {RESOURCE} is not authorized: no proof grants it"
    )
    _refused(await _check(token, root_issuers=[]), "UNAUTHORIZED")


async def test_issuer_whose_did_is_in_the_resource_is_a_root(who: Principals) -> None:
    tool = CapabilityDef("mcp/call", protocol="ixo:")
    resource = f"ixo:oracle/{who.root.did()}/mcp/files/read"
    direct = invoke(
        who.root,
        audience=SERVICE,
        capability={"with": resource, "can": "mcp/call"},
        expiration=NOW + 60,
    )
    to_alice = _grant(who.root, who.alice.did(), {"with": "ixo:oracle/*", "can": "mcp/call"})
    delegated = invoke(
        who.alice,
        audience=SERVICE,
        capability={"with": resource, "can": "mcp/call"},
        expiration=NOW + 60,
        proofs=[to_alice],
    )

    direct_result = await _check(direct, root_issuers=[], capability=tool, resource=resource)
    delegated_result = await _check(delegated, root_issuers=[], capability=tool, resource=resource)

    assert direct_result.ok is True
    assert direct_result.proof_chain == (who.root.did(),)
    # The grant's own resource, "ixo:oracle/*", does not contain the root's DID.
    _refused(delegated_result, "UNAUTHORIZED")
    to_alice_exact = _grant(who.root, who.alice.did(), {"with": resource, "can": "mcp/call"})
    exact = invoke(
        who.alice,
        audience=SERVICE,
        capability={"with": resource, "can": "mcp/call"},
        expiration=NOW + 60,
        proofs=[to_alice_exact],
    )
    exact_result = await _check(exact, root_issuers=[], capability=tool, resource=resource)
    assert exact_result.ok is True
    assert exact_result.proof_chain == (who.root.did(), who.alice.did())


VICTIM = "did:web:victim.co"


def _victim_verifier(victim: Ed25519Signer) -> ChainVerifier:
    local = LocalResolver()
    local.register(VICTIM, victim.did().removeprefix("did:key:"))
    return ChainVerifier(CompositeResolver([local]))


@pytest.mark.parametrize(
    "resource",
    [
        f"ixo:memory/{VICTIM}",
        f"ixo:memory/{VICTIM}/notes",
        f"ixo:{VICTIM}",
        VICTIM,
        f"{VICTIM}/notes",
    ],
)
async def test_the_did_as_a_whole_segment_self_issues(resource: str) -> None:
    victim = Ed25519Signer.generate()
    token = invoke(
        victim.with_did(VICTIM),
        audience=SERVICE,
        capability={"with": resource, "can": "mcp/call"},
        expiration=NOW + 60,
    )
    tool = CapabilityDef("mcp/call", protocol="")
    verifier = _victim_verifier(victim)
    result = await _check(
        token, root_issuers=[], capability=tool, resource=resource, verifier=verifier
    )
    assert result.ok is True
    assert result.proof_chain == (VICTIM,)


@pytest.mark.parametrize(
    "resource",
    [
        # Another DID: did:web's ":" is a path separator, so this is victim.co/users/alice.
        f"ixo:memory/{VICTIM}:users:alice",
        f"ixo:memory/{VICTIM}?owner=1",
        f"ixo:memory/{VICTIM}#notes",
        f"ixo:memory/x{VICTIM}",
        f"ixo:memory/{VICTIM}.evil.example",
        f"ixo:memory?owner=/{VICTIM}",
        f"ixo:memory#/{VICTIM}",
        f"ixo:oracle:{VICTIM}:mcp/files/read",
    ],
)
async def test_a_did_that_is_not_a_whole_segment_does_not_self_issue(resource: str) -> None:
    # The issuer is the DID's rightful owner here: even so, none of these resources is its.
    owner = Ed25519Signer.generate()
    token = invoke(
        owner.with_did(VICTIM),
        audience=SERVICE,
        capability={"with": resource, "can": "mcp/call"},
        expiration=NOW + 60,
    )
    tool = CapabilityDef("mcp/call", protocol="")
    verifier = _victim_verifier(owner)
    result = await _check(
        token, root_issuers=[], capability=tool, resource=resource, verifier=verifier
    )
    assert _refused(result, "UNAUTHORIZED") == (
        f"mcp/call on {resource} is not authorized: no proof grants it"
    )


# --- CapabilityDef: protocol, nb_model, default caveats ------------------------------------


class LimitCaveats(BaseModel):
    limit: int = Field(ge=1, le=100)


async def test_nb_model_violation_is_refused(who: Principals) -> None:
    modelled = CapabilityDef("memory/read", nb_model=LimitCaveats, derives=at_most_limit)
    valid = _chain(who)
    invalid = _chain(who, claim={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 0}})
    assert (await _check(valid, root_issuers=[who.root.did()], capability=modelled)).ok is True
    result = await _check(invalid, root_issuers=[who.root.did()], capability=modelled)
    message = _refused(result, "INVALID_FORMAT")
    assert message.startswith("invalid caveats: ")
    assert "greater than or equal to 1" in message


async def test_resource_of_another_scheme_is_refused(who: Principals) -> None:
    ixo_only = CapabilityDef("memory/read", protocol="ixo:")
    result = await _check(_chain(who), root_issuers=[who.root.did()], capability=ixo_only)
    assert _refused(result, "INVALID_FORMAT") == "resource must be a ixo: URI"


async def test_default_caveats_require_equal_values(who: Principals) -> None:
    plain = CapabilityDef("memory/read")  # derives=None: ucanto's equality rule
    grant = {"with": "urn:mem/*", "can": "memory/read", "nb": {"limit": 5}}
    fewer = _chain(
        who,
        root_grant=grant,
        alice_grant=grant,
        claim={**grant, "with": RESOURCE, "nb": {"limit": 3}},
    )
    equal = _chain(who, root_grant=grant, alice_grant=grant, claim={**grant, "with": RESOURCE})
    missing = _chain(
        who, root_grant=grant, alice_grant=grant, claim={"with": RESOURCE, "can": "memory/read"}
    )
    assert (await _check(equal, root_issuers=[who.root.did()], capability=plain)).ok is True
    fewer_result = await _check(fewer, root_issuers=[who.root.did()], capability=plain)
    assert _refused(fewer_result, "CAVEAT_VIOLATION") == "limit: 3 violates 5"
    missing_result = await _check(missing, root_issuers=[who.root.did()], capability=plain)
    assert _refused(missing_result, "CAVEAT_VIOLATION") == "limit: None violates 5"


# --- audience, time bounds, signatures and proofs ----------------------------------------


async def test_audience_mismatch_is_unauthorized(who: Principals) -> None:
    token = _chain(who, audience="did:web:elsewhere.example.org")
    result = await _check(token, root_issuers=[who.root.did()])
    assert _refused(result, "UNAUTHORIZED") == (
        f"invocation is addressed to did:web:elsewhere.example.org, not {SERVICE}"
    )


@pytest.mark.parametrize("expired_link", [0, 1, 2])
async def test_expired_ucan_in_the_chain_is_expired(who: Principals, expired_link: int) -> None:
    expirations: list[int | None] = [NOW + 600, NOW + 600, NOW + 600]
    expirations[expired_link] = NOW
    token = _chain(who, expirations=(expirations[0], expirations[1], expirations[2]))
    message = _refused(await _check(token, root_issuers=[who.root.did()]), "EXPIRED")
    assert message.endswith(f"expired at {NOW}")


async def test_forged_proof_is_an_invalid_signature(who: Principals) -> None:
    forged = _grant(
        who.bob.with_did(who.root.did()), who.bob.did(), {"with": "urn:mem/*", "can": "memory/*"}
    )
    token = invoke(
        who.bob,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=[forged],
    )
    message = _refused(await _check(token, root_issuers=[who.root.did()]), "INVALID_SIGNATURE")
    assert message == f"UCAN {forged.cid} from {who.root.did()}: signature does not verify"


async def test_proof_addressed_to_someone_else_is_unauthorized(who: Principals) -> None:
    to_alice = _grant(who.root, who.alice.did(), {"with": "urn:mem/*", "can": "memory/*"})
    token = invoke(
        who.bob,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=[to_alice],
    )
    message = _refused(await _check(token, root_issuers=[who.root.did()]), "UNAUTHORIZED")
    assert message == (
        f"memory/read on {RESOURCE} is not authorized: "
        f"proof {to_alice.cid} is not addressed to {who.bob.did()}"
    )


async def test_proof_addressed_to_an_ixo_did_listing_the_invoker_key(who: Principals) -> None:
    bob_ixo = "did:ixo:ixo1bob0000000000000000000000000000000"
    to_bob = _grant(who.root, bob_ixo, {"with": "urn:mem/*", "can": "memory/*"})
    token = invoke(
        who.bob,  # signs as its bare did:key
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=[to_bob],
    )
    local = LocalResolver()
    local.register(bob_ixo, who.bob.did().removeprefix("did:key:"))
    verifier = ChainVerifier(CompositeResolver([local]))

    result = await _check(token, root_issuers=[who.root.did()], verifier=verifier)

    assert result.ok is True
    assert result.proof_chain == (who.root.did(), who.bob.did())
    _refused(await _check(token, root_issuers=[who.root.did()]), "UNAUTHORIZED")


async def test_missing_proof_block_is_refused(who: Principals) -> None:
    to_bob = _grant(who.root, who.bob.did(), {"with": "urn:mem/*", "can": "memory/*"})
    bare = Delegation(
        issue(
            who.bob,
            audience=SERVICE,
            capabilities=[{"with": RESOURCE, "can": "memory/read"}],
            expiration=NOW + 60,
            proofs=[to_bob.cid],
        )
    )
    store = InMemoryInvocationStore(clock=Clock())
    result = await _check(bare.to_base64(), root_issuers=[who.root.did()], store=store)
    assert _refused(result, "INVALID_FORMAT") == f"proof {to_bob.cid} is not in the archive"
    assert len(store) == 0


async def test_proof_block_that_is_not_a_ucan_is_invalid_format(who: Principals) -> None:
    not_a_ucan = dag_cbor.encode({"hello": "world"})
    link = cid_for(not_a_ucan)
    ucan = issue(
        who.bob,
        audience=SERVICE,
        capabilities=[{"with": RESOURCE, "can": "memory/read"}],
        expiration=NOW + 60,
        proofs=[link],
    )
    assert ucan.cid is not None
    variant = dag_cbor.encode({"ucan@0.9.1": ucan.cid})
    root = cid_for(variant)
    car = encode_car([root], [(link, not_a_ucan), (ucan.cid, ucan.block), (root, variant)])
    store = InMemoryInvocationStore(clock=Clock())

    result = await _check(car, root_issuers=[who.root.did()], store=store)

    assert _refused(result, "INVALID_FORMAT") == "UCAN block has keys ['hello']"
    assert len(store) == 0


async def test_every_proof_is_tried(who: Principals) -> None:
    unrelated = _grant(who.root, who.bob.did(), {"with": "urn:other/*", "can": "memory/*"})
    too_small = _grant(
        who.root, who.bob.did(), {"with": "urn:mem/*", "can": "memory/read", "nb": {"limit": 1}}
    )
    enough = _grant(
        who.root, who.bob.did(), {"with": "urn:mem/*", "can": "memory/read", "nb": {"limit": 9}}
    )
    token = invoke(
        who.bob,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 3}},
        expiration=NOW + 60,
        proofs=[unrelated, too_small, enough],
    )
    result = await _check(token, root_issuers=[who.root.did()])
    assert result.ok is True
    assert result.proof_chain == (who.root.did(), who.bob.did())


async def test_caveat_violations_are_reported_over_other_failures(who: Principals) -> None:
    misaddressed = _grant(who.root, who.alice.did(), {"with": "urn:mem/*", "can": "memory/*"})
    too_small = _grant(
        who.root, who.bob.did(), {"with": "urn:mem/*", "can": "memory/read", "nb": {"limit": 1}}
    )
    token = invoke(
        who.bob,
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read", "nb": {"limit": 3}},
        expiration=NOW + 60,
        proofs=[misaddressed, too_small],
    )
    result = await _check(token, root_issuers=[who.root.did()])
    assert _refused(result, "CAVEAT_VIOLATION") == "limit 3 exceeds 1"


# --- chain depth -------------------------------------------------------------------------


def _long_chain(links: int) -> tuple[Ed25519Signer, Delegation]:
    """An invocation proven by ``links`` delegations; returns the root and the invocation."""
    signers = [Ed25519Signer.generate() for _ in range(links + 1)]
    proofs: list[Delegation] = []
    for issuer, audience in itertools.pairwise(signers):
        proofs = [
            _grant(issuer, audience.did(), {"with": "urn:mem/*", "can": "memory/*"}, proofs=proofs)
        ]
    invocation = invoke(
        signers[-1],
        audience=SERVICE,
        capability={"with": RESOURCE, "can": "memory/read"},
        expiration=NOW + 60,
        proofs=proofs,
    )
    return signers[0], invocation


async def test_longest_accepted_chain() -> None:
    root, token = _long_chain(MAX_CHAIN_DEPTH)
    result = await _check(token.to_base64(), root_issuers=[root.did()])
    assert result.ok is True
    assert len(result.proof_chain) == MAX_CHAIN_DEPTH + 1
    assert result.proof_chain[0] == root.did()


async def test_chain_longer_than_the_limit_is_unauthorized() -> None:
    root, token = _long_chain(MAX_CHAIN_DEPTH + 1)
    message = _refused(await _check(token.to_base64(), root_issuers=[root.did()]), "UNAUTHORIZED")
    assert message == f"proof chain is longer than {MAX_CHAIN_DEPTH}"


async def test_a_longest_chain_must_end_at_a_root() -> None:
    _, token = _long_chain(MAX_CHAIN_DEPTH)
    message = _refused(await _check(token, root_issuers=[]), "UNAUTHORIZED")
    assert message == (
        f"memory/read on {RESOURCE} is not authorized: proof chain is longer than {MAX_CHAIN_DEPTH}"
    )
