"""The UCAN 0.9.1 block (``oracle_ucan.ucan``, UCAN-6 … 10, 12).

CIDs and blocks marked "ucanto" were produced by ``@ucanto/core`` 10.4.6 ``delegate`` with
``@ucanto/principal`` 9.0.3 keys derived from the same seeds.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_ucan import dag_cbor
from oracle_ucan.cid import cid_for
from oracle_ucan.errors import InvalidFormat
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier
from oracle_ucan.ucan import UCAN_VERSION, Ucan, issue

BOUNDED = settings(max_examples=100, deadline=None, derandomize=True, database=None)

ROOT = Ed25519Signer(bytes(range(32)))
ALICE = Ed25519Signer(b"\x01" * 32)
BOB = Ed25519Signer(b"\x02" * 32)
SANDBOX = {"with": "ixo:sandbox", "can": "*"}
EXP = 2_000_000_000
PROOF = cid_for(b"a proof")

# ucanto: ROOT → ALICE, [SANDBOX], exp EXP
SIMPLE_CID = "bafyreibl7bd2jksck3rdh37mnzgg2ttb3dfpiruzcqlf2kvyh5idlvpmo4"
SIMPLE_BLOCK = bytes.fromhex(
    "a761735844eda103408a2afdacf6fc0fddd5ae78601e646e506ea6a332e3e7862e604afd7791a34fa7bf28e3"
    "33f1855f6fad15f86c6ab3e625b5df2b6a57bc25a699d2d7f1d7956c09617665302e392e316361747481a263"
    "63616e612a64776974686b69786f3a73616e64626f78636175645822ed018a88e3dd7409f195fd52db2d3cba"
    "5d72ca6709bf1d94121bf3748801b40f6f5c636578701a77359400636973735822ed0103a107bff3ce10be1d"
    "70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b86370726680"
)
# ucanto: ALICE.withDID("did:ixo:ixo1abc") → BOB, [SANDBOX], exp EXP
IXO_CID = "bafyreicn2mq3llupcpvzjxk7btmm7wciakqlep4y2uubwosr5zfkvbphdy"
IXO_BLOCK = bytes.fromhex(
    "a761735844eda10340f2703037f625b50a2396309629559d2cc9000a4880d1b6c48bf26bf52314306279"
    "7b4fa5f466a9b1c1d8bb9a92f02592e1bd467aaf1d03d0b473089f21098c03617665302e392e31636174"
    "7481a26363616e612a64776974686b69786f3a73616e64626f78636175645822ed018139770ea87d175f56"
    "a35466c34c7ecccb8d8a91b4ee37a25df60f5b8fc9b394636578701a77359400636973734d9d1a69786f3a"
    "69786f316162636370726680"
)
# ucanto: ROOT → ALICE, nb {"z": 1, "é": 2, "😀": 3, "｡": 4}, exp EXP
UNICODE_NB_CID = "bafyreiczliqg5pcerk6w6vrpwahbnp3iiujum3xyiv5pre5wck6jvfjwsa"


def full_ucan() -> Ucan:
    return issue(
        ALICE,
        audience=BOB.did(),
        capabilities=[{"with": "ixo:sandbox", "can": "sandbox/*", "nb": {"limit": 3}}],
        expiration=None,
        proofs=[PROOF],
        not_before=5,
        nonce="n1",
        facts=[{"k": "v", "bytes": b"\x00"}],
    )


def b64url_json(part: bytes) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4)))


def reencode(block: bytes, **changes: Any) -> bytes:
    """``block`` with fields replaced (``None`` values are kept, use ``drop`` to remove)."""
    data = dag_cbor.decode(block)
    for key in changes.pop("drop", ()):
        del data[key]
    data.update(changes)
    return dag_cbor.encode(data)


# ---------------------------------------------------------------------------
# Issuing and decoding
# ---------------------------------------------------------------------------


def test_issue_matches_ucanto_byte_for_byte() -> None:
    ucan = issue(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP)
    assert ucan.block == SIMPLE_BLOCK
    assert str(ucan.cid) == SIMPLE_CID
    assert ucan.cid == cid_for(ucan.block)


def test_issue_as_a_did_ixo_matches_ucanto() -> None:
    signer = ALICE.with_did("did:ixo:ixo1abc")
    ucan = issue(signer, audience=BOB.did(), capabilities=[SANDBOX], expiration=EXP)
    assert ucan.block == IXO_BLOCK
    assert str(ucan.cid) == IXO_CID
    assert ucan.issuer == "did:ixo:ixo1abc"
    assert ucan.verify_with(ALICE.verifier)
    decoded = Ucan.decode(IXO_BLOCK)
    assert decoded.issuer == "did:ixo:ixo1abc"
    assert decoded.verify_with(ALICE.verifier)


def test_issue_with_non_ascii_caveat_keys_matches_ucanto() -> None:
    nb = {"z": 1, "é": 2, "\U0001f600": 3, "\uff61": 4}
    ucan = issue(ROOT, audience=ALICE.did(), capabilities=[{**SANDBOX, "nb": nb}], expiration=EXP)
    assert str(ucan.cid) == UNICODE_NB_CID
    assert Ucan.decode(ucan.block).verify_with(ROOT.verifier)


def test_decode_round_trips_every_field() -> None:
    issued = full_ucan()
    decoded = Ucan.decode(issued.block)
    for name in (
        "version",
        "issuer",
        "audience",
        "capabilities",
        "expiration",
        "proofs",
        "signature",
        "signature_code",
        "not_before",
        "nonce",
        "facts",
        "block",
        "cid",
    ):
        assert getattr(decoded, name) == getattr(issued, name), name
    assert decoded.version == UCAN_VERSION == "0.9.1"
    assert decoded.issuer == ALICE.did()
    assert decoded.audience == BOB.did()
    assert decoded.capabilities == (
        {"with": "ixo:sandbox", "can": "sandbox/*", "nb": {"limit": 3}},
    )
    assert decoded.proofs == (PROOF,)
    assert decoded.facts == ({"k": "v", "bytes": b"\x00"},)


def test_decode_with_a_given_cid_keeps_it() -> None:
    decoded = Ucan.decode(SIMPLE_BLOCK, cid_for(SIMPLE_BLOCK))
    assert str(decoded.cid) == SIMPLE_CID
    assert decoded.block == SIMPLE_BLOCK


def test_block_keys_are_in_dag_cbor_order() -> None:
    keys = list(cbor2.loads(full_ucan().block))
    assert keys == ["s", "v", "att", "aud", "exp", "fct", "iss", "nbf", "nnc", "prf"]


def test_empty_optional_fields_are_omitted() -> None:
    for ucan in (
        issue(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP),
        issue(
            ROOT,
            audience=ALICE.did(),
            capabilities=[SANDBOX],
            expiration=EXP,
            not_before=0,
            facts=[],
        ),
    ):
        assert list(cbor2.loads(ucan.block)) == ["s", "v", "att", "aud", "exp", "iss", "prf"]
        assert ucan.block == SIMPLE_BLOCK
        decoded = Ucan.decode(ucan.block)
        assert decoded.not_before is None
        assert decoded.nonce is None
        assert decoded.facts == ()


def test_an_empty_nonce_is_written_but_not_signed() -> None:
    # @ipld/dag-ucan writes `nnc` whenever it is not null, and signs it only when non-empty.
    plain = issue(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP)
    empty = issue(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP, nonce="")
    assert "nnc" in cbor2.loads(empty.block)
    assert cbor2.loads(empty.block)["nnc"] == ""
    assert empty.signing_input() == plain.signing_input()
    assert Ucan.decode(empty.block).nonce == ""


def test_a_null_caveat_is_dropped_and_other_capability_keys_ignored() -> None:
    ucan = issue(
        ROOT,
        audience=ALICE.did(),
        capabilities=[{"with": "ixo:sandbox", "can": "*", "nb": None, "extra": 1}],
        expiration=EXP,
    )
    assert ucan.block == SIMPLE_BLOCK


def test_exp_null_means_never() -> None:
    ucan = issue(ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=None)
    data = cbor2.loads(ucan.block)
    assert data["exp"] is None
    assert Ucan.decode(ucan.block).expiration is None


def test_principals_and_signature_bytes() -> None:
    ucan = full_ucan()
    data = cbor2.loads(ucan.block)
    assert data["iss"] == b"\xed\x01" + ALICE.verifier.public_key
    assert data["aud"] == b"\xed\x01" + BOB.verifier.public_key
    assert data["s"] == bytes.fromhex("eda10340") + ucan.signature
    assert len(ucan.signature) == 64
    assert ucan.signature_code == 0xD0ED
    ixo = cbor2.loads(IXO_BLOCK)
    assert ixo["iss"] == b"\x9d\x1a" + b"ixo:ixo1abc"


# ---------------------------------------------------------------------------
# Signing input (UCAN-9)
# ---------------------------------------------------------------------------


def test_signing_input_is_two_unpadded_base64url_json_halves() -> None:
    ucan = full_ucan()
    signed = ucan.signing_input()
    header_part, payload_part = signed.split(b".")
    assert b"=" not in signed
    assert set(signed) <= set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    header = base64.urlsafe_b64decode(header_part + b"=" * (-len(header_part) % 4))
    assert header == b'{"alg":"EdDSA","typ":"JWT","ucv":"0.9.1"}'
    payload = base64.urlsafe_b64decode(payload_part + b"=" * (-len(payload_part) % 4))
    assert payload.decode() == (
        '{"att":[{"can":"sandbox/*","nb":{"limit":3},"with":"ixo:sandbox"}],'
        f'"aud":"{BOB.did()}","exp":null,'
        '"fct":[{"bytes":{"/":{"bytes":"AA"}},"k":"v"}],'
        f'"iss":"{ALICE.did()}","nbf":5,"nnc":"n1",'
        f'"prf":["{PROOF}"]}}'
    )


def test_payload_keys_are_sorted_and_optional_keys_left_out() -> None:
    full = b64url_json(full_ucan().signing_input().split(b".")[1])
    assert list(full) == ["att", "aud", "exp", "fct", "iss", "nbf", "nnc", "prf"]
    assert full["prf"] == [str(PROOF)]
    assert full["exp"] is None
    simple = Ucan.decode(SIMPLE_BLOCK)
    payload = b64url_json(simple.signing_input().split(b".")[1])
    assert list(payload) == ["att", "aud", "exp", "iss", "prf"]
    assert payload == {
        "att": [{"can": "*", "with": "ixo:sandbox"}],
        "aud": ALICE.did(),
        "exp": EXP,
        "iss": ROOT.did(),
        "prf": [],
    }


def test_decoded_version_is_the_header_ucv() -> None:
    block = reencode(SIMPLE_BLOCK, v="1.2.3")
    header = b64url_json(Ucan.decode(block).signing_input().split(b".")[0])
    assert header == {"alg": "EdDSA", "typ": "JWT", "ucv": "1.2.3"}


def test_signature_is_ed25519_over_the_signing_input() -> None:
    ucan = full_ucan()
    Ed25519PublicKey.from_public_bytes(ALICE.verifier.public_key).verify(
        ucan.signature, ucan.signing_input()
    )
    decoded = Ucan.decode(ucan.block)
    assert decoded.verify_with(Ed25519Verifier.from_did(decoded.issuer))
    assert Ucan.decode(SIMPLE_BLOCK).verify_with(ROOT.verifier)


@pytest.mark.parametrize(
    "change",
    [
        {"audience": ROOT.did()},
        {"issuer": "did:ixo:ixo1abc"},
        {"expiration": 1},
        {"capabilities": ({"with": "ixo:sandbox", "can": "*"},)},
        {"proofs": ()},
        {"not_before": 6},
        {"nonce": "n2"},
        {"facts": ()},
        {"version": "0.9.2"},
        {"signature": b"\x00" * 64},
        {"signature_code": 0xEC},
    ],
    ids=lambda change: next(iter(change)),
)
def test_verify_with_fails_when_anything_signed_changes(change: dict[str, Any]) -> None:
    ucan = full_ucan()
    assert ucan.verify_with(ALICE.verifier)
    assert not dataclasses.replace(ucan, **change).verify_with(ALICE.verifier)


def test_verify_with_fails_for_another_key() -> None:
    assert not full_ucan().verify_with(BOB.verifier)


# ---------------------------------------------------------------------------
# Strict decoding
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.9.0", "1.0.0", "10.20.30"])
def test_any_x_y_z_version_decodes(version: str) -> None:
    assert Ucan.decode(reencode(SIMPLE_BLOCK, v=version)).version == version


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"drop": ["v"]}, "no version"),
        ({"drop": ["iss"]}, "no issuer"),
        ({"drop": ["aud"]}, "no audience"),
        ({"drop": ["s"]}, "no signature"),
        ({"drop": ["att"]}, "no capabilities"),
        ({"drop": ["prf"]}, "no proofs"),
        ({"drop": ["exp"]}, "no expiration"),
        ({"foo": 1}, "unknown key"),
        ({"v": "0.9"}, "two-part version"),
        ({"v": "v0.9.1"}, "prefixed version"),
        ({"v": "0.9.1\n"}, "version with a newline"),
        ({"v": 1}, "numeric version"),
        ({"iss": ROOT.did()}, "issuer as text"),
        ({"aud": ALICE.did()}, "audience as text"),
        ({"s": "sig"}, "signature as text"),
        ({"s": b""}, "empty signature"),
        ({"s": bytes.fromhex("eda10341") + b"\x00" * 64}, "signature shorter than its header"),
        ({"s": bytes.fromhex("eda10340") + b"\x00" * 63}, "signature shorter than 64"),
        ({"s": bytes.fromhex("eda10340") + b"\x00" * 65}, "signature longer than 64"),
        ({"iss": b""}, "empty issuer"),
        ({"aud": b"\x9d\x1a\xff"}, "audience not UTF-8"),
        ({"att": {"with": "x", "can": "y"}}, "att not a list"),
        ({"att": [{"can": "*"}]}, "capability without with"),
        ({"att": [{"with": "x"}]}, "capability without can"),
        ({"att": [{"with": 1, "can": "*"}]}, "with not text"),
        ({"att": [{"with": "x", "can": ["*"]}]}, "can not text"),
        ({"att": [{"with": "x", "can": "*", "nb": [1]}]}, "nb not a map"),
        ({"att": [{"with": "x", "can": "*", "extra": 1}]}, "extra capability key"),
        ({"att": ["ixo:sandbox"]}, "capability not a map"),
        ({"prf": PROOF}, "prf not a list"),
        ({"prf": [str(PROOF)]}, "prf with a CID string"),
        ({"prf": [PROOF.to_bytes()]}, "prf with CID bytes"),
        ({"exp": "2000000000"}, "exp as text"),
        ({"exp": True}, "exp as a boolean"),
        ({"exp": 1.5}, "exp as a float"),
        ({"nbf": True}, "nbf as a boolean"),
        ({"nbf": "5"}, "nbf as text"),
        ({"nnc": 5}, "nnc as a number"),
        ({"fct": {"k": "v"}}, "fct not a list"),
        ({"fct": [1]}, "fct of numbers"),
    ],
)
def test_decode_refuses_malformed_blocks(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidFormat):
        Ucan.decode(reencode(SIMPLE_BLOCK, **changes))


@pytest.mark.parametrize(
    "value", [[1], "ucan", None, b"", {}], ids=["list", "text", "null", "bytes", "empty-map"]
)
def test_decode_refuses_blocks_that_are_not_ucan_maps(value: object) -> None:
    with pytest.raises(InvalidFormat):
        Ucan.decode(dag_cbor.encode(value))


def test_decode_refuses_non_canonical_cbor() -> None:
    data = cbor2.loads(SIMPLE_BLOCK)
    unsorted = cbor2.dumps(dict(reversed(list(data.items()))))
    assert unsorted != SIMPLE_BLOCK
    with pytest.raises(InvalidFormat):
        Ucan.decode(unsorted)
    swapped_capability = cbor2.dumps({**data, "att": [{"with": "ixo:sandbox", "can": "*"}]})
    with pytest.raises(InvalidFormat):
        Ucan.decode(swapped_capability)
    with pytest.raises(InvalidFormat):
        Ucan.decode(SIMPLE_BLOCK + b"\x00")
    with pytest.raises(InvalidFormat):
        Ucan.decode(SIMPLE_BLOCK[:-1])


def test_decode_refuses_non_canonical_caveats_and_facts() -> None:
    data = cbor2.loads(SIMPLE_BLOCK)
    unsorted_nb = {"bb": 1, "a": 2}
    caveat = {**data, "att": [{"nb": unsorted_nb, "can": "*", "with": "ixo:sandbox"}]}
    with pytest.raises(InvalidFormat):
        Ucan.decode(cbor2.dumps(caveat))
    fact = {k: data[k] for k in ["s", "v", "att", "aud", "exp"]}
    fact |= {"fct": [unsorted_nb], "iss": data["iss"], "prf": data["prf"]}
    with pytest.raises(InvalidFormat):
        Ucan.decode(cbor2.dumps(fact))
    with pytest.raises(InvalidFormat):
        Ucan.decode(reencode(SIMPLE_BLOCK, fct=[{"t": cbor2.CBORTag(1, 0)}]))


NON_TEXT_KEYS = [
    pytest.param(1, id="int"),
    pytest.param(-1, id="negative-int"),
    pytest.param(b"k", id="bytes"),
    pytest.param((1, 2), id="array"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="null"),
    pytest.param(1.5, id="float"),
]


@pytest.mark.parametrize("key", NON_TEXT_KEYS)
@pytest.mark.parametrize("where", ["top", "capability", "nb", "fact"])
def test_decode_refuses_non_text_map_keys_with_a_typed_error(key: object, where: str) -> None:
    data = cbor2.loads(SIMPLE_BLOCK)
    if where == "top":
        data[key] = 1
    elif where == "capability":
        data["att"] = [{**data["att"][0], key: 1}]
    elif where == "nb":
        data["att"] = [{"nb": {key: 1}, **data["att"][0]}]
    else:
        data["fct"] = [{key: 1}]
    # Written both ways: cbor2's order (as a map's keys came), and canonical order.
    for block in (cbor2.dumps(data), cbor2.dumps(data, canonical=True)):
        with pytest.raises(InvalidFormat):
            Ucan.decode(block)


def test_decode_refuses_deeply_nested_caveats_with_a_typed_error() -> None:
    data = cbor2.loads(SIMPLE_BLOCK)
    data["att"] = [{"nb": {"x": "zzzz"}, **data["att"][0]}]
    # Spliced in as bytes: encoding 10,000 nested lists would overflow cbor2's own stack.
    block = cbor2.dumps(data).replace(b"\x64zzzz", b"\x81" * 10_000 + b"\x01")
    with pytest.raises(InvalidFormat, match="nesting depth"):
        Ucan.decode(block)


@pytest.mark.parametrize("field", ["exp", "nbf"])
@pytest.mark.parametrize("value", [1 << 64, -1], ids=["bignum", "negative"])
def test_decode_refuses_times_outside_unsigned_64_bits(field: str, value: int) -> None:
    # cbor2 writes 2**64 as a tag-2 bignum and reads it back as an int: the canonical
    # round trip alone would let it through.
    data = cbor2.loads(SIMPLE_BLOCK)
    data[field] = value
    with pytest.raises(InvalidFormat, match="unsigned 64-bit"):
        Ucan.decode(cbor2.dumps(data, canonical=True))


def test_decode_refuses_a_proof_link_with_bytes_after_the_cid() -> None:
    """Otherwise one signed UCAN would have many CIDs (and dodge a CID replay store)."""
    issued = issue(
        ROOT, audience=ALICE.did(), capabilities=[SANDBOX], expiration=EXP, proofs=[PROOF]
    )
    data = cbor2.loads(issued.block)
    data["prf"] = [cbor2.CBORTag(42, b"\x00" + PROOF.to_bytes() + b"pad")]
    with pytest.raises(InvalidFormat):
        Ucan.decode(cbor2.dumps(data))


@BOUNDED
@given(
    audience=st.sampled_from([ALICE.did(), BOB.did(), "did:ixo:ixo1xyz", "did:web:example.com"]),
    expiration=st.none() | st.integers(0, (1 << 63) - 1),
    not_before=st.none() | st.integers(1, 1 << 40),
    nonce=st.none() | st.text(min_size=1, max_size=8),
    limit=st.integers(-(1 << 63), 1 << 63),
    can=st.text(min_size=1, max_size=12),
)
def test_issue_decode_verify_property(
    audience: str,
    expiration: int | None,
    not_before: int | None,
    nonce: str | None,
    limit: int,
    can: str,
) -> None:
    issued = issue(
        ROOT,
        audience=audience,
        capabilities=[{"with": "ixo:sandbox", "can": can, "nb": {"limit": limit}}],
        expiration=expiration,
        not_before=not_before,
        nonce=nonce,
        proofs=[PROOF],
    )
    decoded = Ucan.decode(issued.block)
    assert decoded.audience == audience
    assert decoded.expiration == expiration
    assert decoded.not_before == not_before
    assert decoded.nonce == nonce
    assert decoded.signing_input() == issued.signing_input()
    assert decoded.verify_with(Ed25519Verifier.from_did(decoded.issuer))
