"""A user's delegation to the oracle (UCAN-23, UCAN-25): chains, audiences, time bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from oracle_ucan import (
    MAX_CHAIN_DEPTH,
    ChainVerifier,
    CompositeResolver,
    Delegation,
    Ed25519Signer,
    LocalResolver,
    ValidateResult,
    cid_for,
    dag_cbor,
    delegate,
    encode_car,
    issue,
    validate_delegation,
)

NOW = 1_700_000_000
ORACLE = "did:ixo:ixo1oracle00000000000000000000000000000"
MEMORY = {"with": "ixo:memory", "can": "memory/*"}


def _chain(
    signers: Sequence[Ed25519Signer],
    *,
    audience: str = ORACLE,
    expirations: Sequence[int | None] | None = None,
    capabilities: Sequence[dict[str, Any]] = (MEMORY,),
) -> list[Delegation]:
    """``signers[0]`` → ``signers[1]`` → … → ``audience``; each link proven by the last."""
    links: list[Delegation] = []
    for index, signer in enumerate(signers):
        next_audience = signers[index + 1].did() if index + 1 < len(signers) else audience
        expiration = NOW + 3600 if expirations is None else expirations[index]
        links.append(
            delegate(
                signer,
                audience=next_audience,
                capabilities=capabilities,
                expiration=expiration,
                proofs=links[-1:],
            )
        )
    return links


async def _check(token: str | bytes | Delegation, **options: Any) -> ValidateResult:
    options.setdefault("audience", ORACLE)
    options.setdefault("now", NOW)
    return await validate_delegation(token, **options)


def _refused(result: ValidateResult, code: str) -> str:
    assert result.ok is False
    assert result.error is not None
    assert result.error.code == code
    assert result.invoker is None
    assert result.proof_chain == ()
    return result.error.message


def _signers(count: int) -> list[Ed25519Signer]:
    return [Ed25519Signer.generate() for _ in range(count)]


# --- valid chains ------------------------------------------------------------------------


async def test_single_link_delegation() -> None:
    user = Ed25519Signer.generate()
    token = delegate(
        user,
        audience=ORACLE,
        capabilities=[MEMORY, {"with": "ixo:sandbox", "can": "*"}],
        expiration=NOW + 600,
        facts=[{"origin": "portal"}],
    )

    result = await _check(token.to_base64())

    assert result.ok is True
    assert result.error is None
    assert result.invoker == user.did()
    assert result.capability == MEMORY  # the first capability
    assert result.expiration == NOW + 600
    assert result.proof_chain == (user.did(),)
    assert result.facts == ({"origin": "portal"},)
    assert result.delegation is not None
    assert result.delegation.cid == token.cid


async def test_three_link_chain() -> None:
    root, alice, bob = _signers(3)
    *_, token = _chain([root, alice, bob], expirations=[NOW + 900, NOW + 500, NOW + 700])

    result = await _check(token.to_base64())

    assert result.ok is True
    assert result.invoker == bob.did()
    assert result.proof_chain == (root.did(), alice.did(), bob.did())
    assert result.expiration == NOW + 500  # the earliest in the chain
    assert result.to_dict()["proof_chain"] == [root.did(), alice.did(), bob.did()]


async def test_expiration_is_none_when_nothing_expires() -> None:
    *_, token = _chain(_signers(2), expirations=[None, None])
    result = await _check(token)
    assert result.ok is True
    assert result.expiration is None


async def test_expiration_ignores_links_that_never_expire() -> None:
    *_, token = _chain(_signers(3), expirations=[None, NOW + 42, None])
    result = await _check(token)
    assert result.ok is True
    assert result.expiration == NOW + 42


async def test_attenuation_is_not_checked() -> None:
    root, alice = _signers(2)
    narrow = delegate(
        root,
        audience=alice.did(),
        capabilities=[{"with": "ixo:memory", "can": "memory/read"}],
        expiration=NOW + 60,
    )
    broad = delegate(
        alice,
        audience=ORACLE,
        capabilities=[{"with": "ucan:*", "can": "*"}],
        expiration=NOW + 60,
        proofs=[narrow],
    )
    result = await _check(broad)
    assert result.ok is True
    assert result.capability == {"with": "ucan:*", "can": "*"}


async def test_proof_chain_follows_the_first_proof() -> None:
    first_root, second_root, alice = _signers(3)
    first = delegate(first_root, audience=alice.did(), capabilities=[MEMORY], expiration=None)
    second = delegate(second_root, audience=alice.did(), capabilities=[MEMORY], expiration=NOW + 30)
    token = delegate(
        alice, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[first, second]
    )
    result = await _check(token.to_base64())
    assert result.ok is True
    assert result.proof_chain == (first_root.did(), alice.did())
    assert result.expiration == NOW + 30  # every proof counts for the earliest expiry


async def test_ixo_issuer_in_the_chain() -> None:
    user_key = Ed25519Signer.generate()
    user_ixo = "did:ixo:ixo1user000000000000000000000000000000000"
    local = LocalResolver()
    local.register(user_ixo, user_key.did().removeprefix("did:key:"))
    token = delegate(
        user_key.with_did(user_ixo), audience=ORACLE, capabilities=[MEMORY], expiration=None
    )

    result = await _check(token, verifier=ChainVerifier(CompositeResolver([local])))
    without_resolver = await _check(token)

    assert result.ok is True
    assert result.invoker == user_ixo
    assert result.proof_chain == (user_ixo,)
    _refused(without_resolver, "INVALID_SIGNATURE")


async def test_a_proof_shared_by_two_branches_is_checked_once() -> None:
    root, alice, bob = _signers(3)
    shared = delegate(root, audience=alice.did(), capabilities=[MEMORY], expiration=NOW + 77)
    left = delegate(
        alice, audience=bob.did(), capabilities=[MEMORY], expiration=None, proofs=[shared]
    )
    right = delegate(
        alice, audience=bob.did(), capabilities=[MEMORY], expiration=NOW + 900, proofs=[shared]
    )
    token = delegate(
        bob, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[left, right]
    )
    result = await _check(token.to_base64())
    assert result.ok is True
    assert result.proof_chain == (root.did(), alice.did(), bob.did())
    assert result.expiration == NOW + 77


# --- audience ----------------------------------------------------------------------------


async def test_audience_mismatch_is_unauthorized() -> None:
    user = Ed25519Signer.generate()
    token = delegate(user, audience="did:ixo:ixo1other", capabilities=[MEMORY], expiration=None)
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == f"delegation is addressed to did:ixo:ixo1other, not {ORACLE}"


async def test_proof_not_addressed_to_the_child_issuer_is_unauthorized() -> None:
    root, alice, mallory = _signers(3)
    to_alice = delegate(root, audience=alice.did(), capabilities=[MEMORY], expiration=None)
    # Mallory presents a proof addressed to Alice.
    token = delegate(
        mallory, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[to_alice]
    )
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == f"proof {to_alice.cid} is addressed to {alice.did()}, not {mallory.did()}"


async def test_misaddressed_proof_deep_in_the_chain_is_unauthorized() -> None:
    root, alice, bob, mallory = _signers(4)
    to_alice = delegate(root, audience=alice.did(), capabilities=[MEMORY], expiration=None)
    stolen = delegate(
        mallory, audience=bob.did(), capabilities=[MEMORY], expiration=None, proofs=[to_alice]
    )
    token = delegate(bob, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[stolen])
    message = _refused(await _check(token), "UNAUTHORIZED")
    assert message == f"proof {to_alice.cid} is addressed to {alice.did()}, not {mallory.did()}"


async def test_proof_addressed_to_an_ixo_did_listing_the_child_signing_key() -> None:
    user, oracle_key = _signers(2)
    oracle_ixo = "did:ixo:ixo1middle0000000000000000000000000000"
    to_oracle = delegate(user, audience=oracle_ixo, capabilities=[MEMORY], expiration=None)
    # The oracle re-delegates signing as its bare did:key, not as its did:ixo.
    onward = delegate(
        oracle_key, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[to_oracle]
    )
    assert onward.issuer == oracle_key.did() != to_oracle.audience
    listing = LocalResolver()
    listing.register(oracle_ixo, oracle_key.did().removeprefix("did:key:"))
    elsewhere = LocalResolver()
    elsewhere.register(oracle_ixo, Ed25519Signer.generate().did().removeprefix("did:key:"))

    accepted = await _check(onward, verifier=ChainVerifier(CompositeResolver([listing])))
    other_key = await _check(onward, verifier=ChainVerifier(CompositeResolver([elsewhere])))
    unresolvable = await _check(onward)

    assert accepted.ok is True
    assert accepted.proof_chain == (user.did(), oracle_key.did())
    expected = f"proof {to_oracle.cid} is addressed to {oracle_ixo}, not {oracle_key.did()}"
    assert _refused(other_key, "UNAUTHORIZED") == expected
    assert _refused(unresolvable, "UNAUTHORIZED") == expected


# --- time bounds and signatures of every link ------------------------------------------


@pytest.mark.parametrize("expired_link", [0, 1, 2])
async def test_any_expired_ucan_in_the_chain_is_expired(expired_link: int) -> None:
    expirations: list[int | None] = [NOW + 100, None, NOW + 100]
    expirations[expired_link] = NOW - 1
    links = _chain(_signers(3), expirations=expirations)
    message = _refused(await _check(links[-1].to_base64()), "EXPIRED")
    assert message == f"UCAN {links[expired_link].cid} expired at {NOW - 1}"


async def test_a_proof_not_yet_valid_is_refused() -> None:
    root, alice = _signers(2)
    early = delegate(
        root,
        audience=alice.did(),
        capabilities=[MEMORY],
        expiration=None,
        not_before=NOW + 3600,
    )
    token = delegate(alice, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[early])
    message = _refused(await _check(token), "UNAUTHORIZED")
    assert message == f"UCAN {early.cid} is not valid before {NOW + 3600}"
    assert (await _check(token, now=NOW + 3600)).ok is True


async def test_forged_proof_signature_is_invalid() -> None:
    root, alice, bob = _signers(3)
    forged = delegate(
        bob.with_did(root.did()), audience=alice.did(), capabilities=[MEMORY], expiration=None
    )
    token = delegate(
        alice, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[forged]
    )
    message = _refused(await _check(token.to_base64()), "INVALID_SIGNATURE")
    assert message == f"UCAN {forged.cid} from {root.did()}: signature does not verify"


async def test_forged_top_signature_is_invalid() -> None:
    user, other = _signers(2)
    token = delegate(
        other.with_did(user.did()), audience=ORACLE, capabilities=[MEMORY], expiration=None
    )
    _refused(await _check(token), "INVALID_SIGNATURE")


# --- archives that lack what they link -------------------------------------------------


async def test_missing_proof_block_is_refused() -> None:
    root, alice = _signers(2)
    proof = delegate(root, audience=alice.did(), capabilities=[MEMORY], expiration=None)
    # The archive carries the delegation but not its proof's block.
    bare = Delegation(
        issue(
            alice,
            audience=ORACLE,
            capabilities=[MEMORY],
            expiration=None,
            proofs=[proof.cid],
        )
    )
    assert bare.proofs() == [proof.cid]
    message = _refused(await _check(bare.to_base64()), "INVALID_FORMAT")
    assert message == f"proof {proof.cid} is not in the archive"


async def test_proof_block_that_is_not_a_ucan_is_invalid_format() -> None:
    alice = Ed25519Signer.generate()
    not_a_ucan = dag_cbor.encode({"hello": "world"})
    link = cid_for(not_a_ucan)
    ucan = issue(alice, audience=ORACLE, capabilities=[MEMORY], expiration=None, proofs=[link])
    assert ucan.cid is not None
    variant = dag_cbor.encode({"ucan@0.9.1": ucan.cid})
    root = cid_for(variant)
    car = encode_car([root], [(link, not_a_ucan), (ucan.cid, ucan.block), (root, variant)])

    result = await _check(car)

    assert _refused(result, "INVALID_FORMAT") == "UCAN block has keys ['hello']"
    assert result.delegation is not None
    assert result.delegation.cid == ucan.cid


# --- chain depth -------------------------------------------------------------------------


def test_max_chain_depth_is_eight() -> None:
    assert MAX_CHAIN_DEPTH == 8


async def test_longest_accepted_chain() -> None:
    signers = _signers(MAX_CHAIN_DEPTH + 1)  # the delegation and eight proofs below it
    *_, token = _chain(signers)
    result = await _check(token.to_base64())
    assert result.ok is True
    assert result.proof_chain == tuple(s.did() for s in signers)


async def test_chain_longer_than_the_limit_is_unauthorized() -> None:
    *_, token = _chain(_signers(MAX_CHAIN_DEPTH + 2))
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == f"proof chain is longer than {MAX_CHAIN_DEPTH}"
