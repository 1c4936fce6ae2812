"""Delegations and invocations as archives (``oracle_ucan.delegation``, UCAN-3, 5, 11, 12).

Archives marked "ucanto" were produced by ``@ucanto/core`` 10.4.6 ``delegate(...).archive()``
with ``@ucanto/principal`` 9.0.3 keys derived from the same seeds.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

import pytest
from multiformats.cid import CID

from oracle_ucan import dag_cbor
from oracle_ucan.car import MAX_CAR_BYTES, decode_car, encode_car
from oracle_ucan.cid import cid_for
from oracle_ucan.delegation import Delegation, decode_base64, delegate, invoke
from oracle_ucan.errors import InvalidFormat
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier
from oracle_ucan.ucan import Ucan, issue

ROOT = Ed25519Signer(bytes(range(32)))
ALICE = Ed25519Signer(b"\x01" * 32)
BOB = Ed25519Signer(b"\x02" * 32)
SERVICE = Ed25519Signer(b"\x03" * 32)
SANDBOX = {"with": "ixo:sandbox", "can": "*"}
EXP = 2_000_000_000

# ucanto: ROOT → ALICE, [SANDBOX], exp EXP
UCANTO_CAR = bytes.fromhex(
    "3aa265726f6f747381d82a58250001711220e491ec688b373c01d59b53e7cea9e82e6b1908600ccb54ddee"
    "4d086092a2b0986776657273696f6e01f001017112202bf847a4aa4256e233efec6e4c6d4e61d8caf44699"
    "14165d2ab83f5035d5ec77a761735844eda103408a2afdacf6fc0fddd5ae78601e646e506ea6a332e3e786"
    "2e604afd7791a34fa7bf28e333f1855f6fad15f86c6ab3e625b5df2b6a57bc25a699d2d7f1d7956c096176"
    "65302e392e316361747481a26363616e612a64776974686b69786f3a73616e64626f78636175645822ed01"
    "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c636578701a7735940063"
    "6973735822ed0103a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8637072"
    "66805901711220e491ec688b373c01d59b53e7cea9e82e6b1908600ccb54ddee4d086092a2b098a16a7563"
    "616e40302e392e31d82a582500017112202bf847a4aa4256e233efec6e4c6d4e61d8caf4469914165d2ab8"
    "3f5035d5ec77"
)
# ucanto: ALICE → BOB with the delegation above as proof, nb {limit: 3}, fct [{k: "v"}],
# nnc "n1", nbf 5, expiration Infinity (exp null)
CHAIN_CID = "bafyreid2a2um5cfprg5yid6vbmn2jlgm7r5j5t56tt7afhcpysqv67vhxm"
CHAIN_CAR_SHA256 = "7aa768795de07424ac5adc9f242a5b6b7d90aa380960d380d52a541257abe61f"


def root_to_alice() -> Delegation:
    return delegate(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP)


def alice_to_bob(proof: Delegation) -> Delegation:
    return delegate(
        ALICE,
        audience=BOB.did(),
        capabilities=[{"with": "ixo:sandbox", "can": "sandbox/*", "nb": {"limit": 3}}],
        expiration=None,
        proofs=[proof],
        facts=[{"k": "v"}],
        nonce="n1",
        not_before=5,
    )


def variant_block(ucan_cid: CID, version: str = "0.9.1") -> tuple[CID, bytes]:
    data = dag_cbor.encode({f"ucan@{version}": ucan_cid})
    return cid_for(data), data


# ---------------------------------------------------------------------------
# Archives, byte for byte
# ---------------------------------------------------------------------------


def test_archive_matches_ucanto() -> None:
    delegation = root_to_alice()
    assert delegation.archive() == UCANTO_CAR
    assert delegation.to_base64() == base64.b64encode(UCANTO_CAR).decode()


def test_chain_archive_matches_ucanto() -> None:
    chain = alice_to_bob(root_to_alice())
    assert str(chain.cid) == CHAIN_CID
    assert hashlib.sha256(chain.archive()).hexdigest() == CHAIN_CAR_SHA256


def test_extract_then_archive_is_byte_identical() -> None:
    assert Delegation.extract(UCANTO_CAR).archive() == UCANTO_CAR
    chain_car = alice_to_bob(root_to_alice()).archive()
    assert Delegation.extract(chain_car).archive() == chain_car
    token = base64.b64encode(chain_car).decode()
    assert Delegation.from_base64(token).to_base64() == token


def test_archive_layout_is_proofs_ucan_then_variant_root() -> None:
    proof = root_to_alice()
    chain = alice_to_bob(proof)
    car = decode_car(chain.archive())
    variant_cid, variant = variant_block(chain.cid)
    assert car.roots == (variant_cid,)
    assert list(car.blocks) == [proof.cid, chain.cid, variant_cid]
    assert car.blocks[variant_cid] == variant
    assert dag_cbor.decode(variant) == {"ucan@0.9.1": chain.cid}


def test_block_order_is_depth_first_with_duplicates_once() -> None:
    first = root_to_alice()
    second = delegate(
        ROOT, audience=ALICE.did(), capabilities=[{"with": "ixo:memory", "can": "*"}], expiration=1
    )
    middle = delegate(
        ALICE, audience=BOB.did(), capabilities=[SANDBOX], expiration=2, proofs=[first]
    )
    top = delegate(
        BOB,
        audience=SERVICE.did(),
        capabilities=[SANDBOX],
        expiration=3,
        proofs=[middle, second, first],
    )
    order = list(dict.fromkeys(cid for cid, _ in top.iterate_blocks()))
    assert order == [first.cid, middle.cid, second.cid, top.cid]
    car = decode_car(top.archive())
    assert list(car.blocks) == [first.cid, middle.cid, second.cid, top.cid, car.roots[0]]
    again = Delegation.extract(top.archive())
    assert again.archive() == top.archive()


# ---------------------------------------------------------------------------
# The decoded delegation
# ---------------------------------------------------------------------------


def test_extracted_fields_and_proofs() -> None:
    proof = root_to_alice()
    chain = Delegation.extract(alice_to_bob(proof).archive())
    assert str(chain.cid) == CHAIN_CID
    assert chain.issuer == ALICE.did()
    assert chain.audience == BOB.did()
    assert chain.capabilities == ({"with": "ixo:sandbox", "can": "sandbox/*", "nb": {"limit": 3}},)
    assert chain.expiration is None
    assert chain.ucan.not_before == 5
    assert chain.ucan.nonce == "n1"
    assert chain.ucan.facts == ({"k": "v"},)
    proofs = chain.proofs()
    assert len(proofs) == 1
    assert isinstance(proofs[0], Delegation)
    assert proofs[0].cid == proof.cid
    assert proofs[0].issuer == ROOT.did()
    assert proofs[0].expiration == EXP
    assert [d.cid for d in chain.chain()] == [chain.cid, proof.cid]
    assert repr(chain) == f"Delegation({CHAIN_CID}, iss={ALICE.did()!r}, aud={BOB.did()!r})"


def test_every_signature_in_an_extracted_chain_verifies() -> None:
    chain = Delegation.extract(alice_to_bob(root_to_alice()).archive())
    for link in chain.chain():
        assert link.ucan.verify_with(Ed25519Verifier.from_did(link.issuer))


def test_a_proof_whose_block_is_missing_stays_a_cid() -> None:
    proof = root_to_alice()
    chain = alice_to_bob(proof)
    variant_cid, variant = variant_block(chain.cid)
    car = encode_car([variant_cid], [(chain.cid, chain.ucan.block), (variant_cid, variant)])
    extracted = Delegation.extract(car)
    assert extracted.proofs() == [proof.cid]
    assert [d.cid for d in extracted.chain()] == [chain.cid]
    assert extracted.archive() == car


def test_a_proof_block_that_is_not_a_ucan_fails_typed_when_resolved() -> None:
    junk = dag_cbor.encode({"not": "a ucan"})
    junk_cid = cid_for(junk)
    ucan = issue(
        ALICE, audience=BOB.did(), capabilities=[SANDBOX], expiration=EXP, proofs=[junk_cid]
    )
    variant_cid, variant = variant_block(ucan.cid or cid_for(ucan.block))
    car = encode_car(
        [variant_cid], [(junk_cid, junk), (cid_for(ucan.block), ucan.block), (variant_cid, variant)]
    )
    extracted = Delegation.extract(car)
    with pytest.raises(InvalidFormat):
        extracted.proofs()


def test_readers_accept_any_block_order_and_extra_blocks() -> None:
    proof = root_to_alice()
    chain = alice_to_bob(proof)
    variant_cid, variant = variant_block(chain.cid)
    extra = dag_cbor.encode({"unrelated": True})
    car = encode_car(
        [variant_cid],
        [
            (variant_cid, variant),
            (cid_for(extra), extra),
            (chain.cid, chain.ucan.block),
            (proof.cid, proof.ucan.block),
        ],
    )
    extracted = Delegation.extract(car)
    assert [d.cid for d in extracted.chain()] == [chain.cid, proof.cid]
    assert extracted.archive() == chain.archive()


def test_invoke_issues_one_capability_to_the_service() -> None:
    proof = root_to_alice()
    invocation = invoke(
        ALICE, audience=BOB.did(), capability=SANDBOX, expiration=EXP, proofs=[proof]
    )
    assert invocation.capabilities == (SANDBOX,)
    assert invocation.audience == BOB.did()
    assert invocation.ucan.proofs == (proof.cid,)
    assert Delegation.extract(invocation.archive()).archive() == invocation.archive()
    same = delegate(
        ALICE, audience=BOB.did(), capabilities=[SANDBOX], expiration=EXP, proofs=[proof]
    )
    assert same.archive() == invocation.archive()


# ---------------------------------------------------------------------------
# Base64 transport (UCAN-3)
# ---------------------------------------------------------------------------


def _url_safe(text: str) -> str:
    return text.replace("+", "-").replace("/", "_")


@pytest.mark.parametrize(
    "transform",
    [
        lambda t: t,
        lambda t: t.rstrip("="),
        _url_safe,
        lambda t: _url_safe(t).rstrip("="),
        lambda t: "\n".join(t[i : i + 76] for i in range(0, len(t), 76)),
        lambda t: f"  {t[:10]} \t {t[10:]}\r\n",
    ],
    ids=["padded", "unpadded", "url-safe", "url-safe-unpadded", "wrapped", "spaces"],
)
def test_from_base64_accepts_every_transport_form(transform: Callable[[str], str]) -> None:
    token = base64.b64encode(UCANTO_CAR).decode()
    assert "+" in token or "/" in token  # so the url-safe forms differ
    transformed = transform(token)
    assert Delegation.from_base64(transformed).archive() == UCANTO_CAR
    assert decode_base64(transformed) == UCANTO_CAR


@pytest.mark.parametrize("text", ["*", "abc$", "YQ=a", "é" * 8, "Y", "YQ===x"])
def test_decode_base64_rejects_what_is_not_base64(text: str) -> None:
    with pytest.raises(InvalidFormat, match="not base64"):
        decode_base64(text)


def test_oversized_tokens_are_refused_before_decoding() -> None:
    with pytest.raises(InvalidFormat, match="larger than the CAR size limit"):
        decode_base64("A" * (MAX_CAR_BYTES * 2))
    with pytest.raises(InvalidFormat, match="larger than the CAR size limit"):
        decode_base64("A" * (MAX_CAR_BYTES * 4 // 3 + 12))
    with pytest.raises(InvalidFormat, match="larger than the CAR size limit"):
        Delegation.from_base64(" " * (MAX_CAR_BYTES * 4))


def test_a_decoded_token_above_the_car_limit_is_refused() -> None:
    token = base64.b64encode(b"\x00" * (MAX_CAR_BYTES + 3)).decode()
    with pytest.raises(InvalidFormat, match="limit"):
        Delegation.from_base64(token)


# ---------------------------------------------------------------------------
# Archives that do not hold a delegation (UCAN-5)
# ---------------------------------------------------------------------------


def test_extraction_without_the_variant_root_fails() -> None:
    ucan = root_to_alice()
    car = encode_car([ucan.cid], [(ucan.cid, ucan.ucan.block)])
    with pytest.raises(InvalidFormat, match="does not contain a delegation") as caught:
        Delegation.extract(car)
    assert caught.value.code == "INVALID_FORMAT"


def _archive_with_root(root_value: object, ucan: Delegation) -> bytes:
    root = dag_cbor.encode(root_value)
    return encode_car([cid_for(root)], [(ucan.cid, ucan.ucan.block), (cid_for(root), root)])


@pytest.mark.parametrize(
    "root_value",
    [
        {"ucan@0.9": "LINK"},
        {"ucan": "LINK"},
        {"UCAN@0.9.1": "LINK"},
        {"ucan@0.9.1": "LINK", "extra": "LINK"},
        {},
        {"ucan@0.9.1": "text"},
        {"ucan@0.9.1": ["LINK"]},
        ["LINK"],
        "LINK",
    ],
    ids=[
        "short-version",
        "no-version",
        "upper-case",
        "two-keys",
        "empty",
        "text-value",
        "list-value",
        "list",
        "bare-link",
    ],
)
def test_extraction_with_a_malformed_variant_root_fails(root_value: object) -> None:
    ucan = root_to_alice()

    def link(value: object) -> object:
        if value == "LINK":
            return ucan.cid
        if isinstance(value, dict):
            return {k: link(v) for k, v in value.items()}
        if isinstance(value, list):
            return [link(v) for v in value]
        return value

    with pytest.raises(InvalidFormat, match="does not contain a delegation"):
        Delegation.extract(_archive_with_root(link(root_value), ucan))


def test_extraction_with_the_root_block_missing_fails() -> None:
    ucan = root_to_alice()
    variant_cid, _ = variant_block(ucan.cid)
    car = encode_car([variant_cid], [(ucan.cid, ucan.ucan.block)])
    with pytest.raises(InvalidFormat, match="does not contain a delegation"):
        Delegation.extract(car)


def test_extraction_with_the_ucan_block_missing_fails() -> None:
    ucan = root_to_alice()
    variant_cid, variant = variant_block(ucan.cid)
    car = encode_car([variant_cid], [(variant_cid, variant)])
    with pytest.raises(InvalidFormat, match="does not contain a delegation"):
        Delegation.extract(car)


def test_extraction_accepts_other_ucan_versions_in_the_variant() -> None:
    ucan = root_to_alice()
    variant_cid, variant = variant_block(ucan.cid, "0.10.0")
    car = encode_car([variant_cid], [(ucan.cid, ucan.ucan.block), (variant_cid, variant)])
    assert Delegation.extract(car).cid == ucan.cid


def test_extraction_of_a_variant_pointing_at_a_non_ucan_fails() -> None:
    junk = dag_cbor.encode({"not": "a ucan"})
    variant_cid, variant = variant_block(cid_for(junk))
    car = encode_car([variant_cid], [(cid_for(junk), junk), (variant_cid, variant)])
    with pytest.raises(InvalidFormat):
        Delegation.extract(car)


def test_decoded_ucan_is_the_issued_one() -> None:
    delegation = root_to_alice()
    decoded = Ucan.decode(delegation.ucan.block)
    assert decoded.signing_input() == delegation.ucan.signing_input()
    assert decoded.cid == delegation.cid
