"""Mutated archives: nothing forged validates, and decoding raises only this package's errors.

The subject is a valid two-link chain, root → alice → bob, archived as ucanto does. Every
mutation is fed to ``decode_car``, ``Delegation.extract``/``from_base64`` and ``Ucan.decode``.
The claims:

* the only exceptions are ``UcanError`` subclasses (anything else fails the test);
* when a mutated archive still decodes, either every UCAN in it carries signed bytes that
  were signed originally (the mutation changed nothing signed: block order, an unused extra
  block, a proof left out), or at least one signature no longer verifies against its
  issuer's ``did:key``.
"""

from __future__ import annotations

import base64
import contextlib
import random
from itertools import islice
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from multiformats.cid import CID

from oracle_ucan import dag_cbor, varint
from oracle_ucan.car import decode_car, encode_car
from oracle_ucan.cid import cid_for
from oracle_ucan.delegation import Delegation, delegate
from oracle_ucan.errors import InvalidFormat, UcanError
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier, encode_principal
from oracle_ucan.ucan import Ucan, issue

MUTATIONS = settings(max_examples=150, deadline=None, derandomize=True, database=None)

ROOT = Ed25519Signer(bytes(range(32)))
ALICE = Ed25519Signer(b"\x01" * 32)
BOB = Ed25519Signer(b"\x02" * 32)
INTRUDER = Ed25519Signer(b"\x0f" * 32)

FIRST = delegate(
    ROOT,
    audience=ALICE.did(),
    capabilities=[{"with": "ixo:sandbox", "can": "*"}],
    expiration=2_000_000_000,
)
SECOND = delegate(
    ALICE,
    audience=BOB.did(),
    capabilities=[{"with": "ixo:sandbox", "can": "sandbox/*", "nb": {"limit": 3}}],
    expiration=1_900_000_000,
    proofs=[FIRST],
    facts=[{"k": "v"}],
    nonce="n1",
    not_before=5,
)
CAR = SECOND.archive()
TOKEN = base64.b64encode(CAR).decode()
BLOCKS = list(decode_car(CAR).blocks.items())  # FIRST, SECOND, variant root
ROOTS = decode_car(CAR).roots

SignedParts = tuple[str, bytes, int, bytes]


def signed_parts(ucan: Ucan) -> SignedParts:
    return ucan.issuer, ucan.signing_input(), ucan.signature_code, ucan.signature


ORIGINAL_SIGNED = {signed_parts(FIRST.ucan), signed_parts(SECOND.ucan)}


def verifies(delegation: Delegation) -> bool:
    try:
        verifier = Ed25519Verifier.from_did(delegation.issuer)
    except UcanError:
        return False
    return delegation.ucan.verify_with(verifier)


def extract_chain(car: bytes) -> list[Delegation] | None:
    """Every delegation reachable in ``car``, or ``None`` when it is refused.

    Only ``UcanError`` is caught: any other exception escapes and fails the test.
    """
    try:
        return list(Delegation.extract(car).chain())
    except UcanError:
        return None


def assert_nothing_forged(chain: list[Delegation] | None) -> None:
    if chain is None:
        return
    if {signed_parts(d.ucan) for d in chain} <= ORIGINAL_SIGNED:
        assert all(verifies(d) for d in chain)
        return
    assert not all(verifies(d) for d in chain)


def assert_decoders_fail_typed_or_nothing_forged(car: bytes) -> None:
    with contextlib.suppress(UcanError):
        decode_car(car)
    assert_nothing_forged(extract_chain(car))
    with contextlib.suppress(UcanError):
        Delegation.from_base64(base64.b64encode(car).decode())


def archive_of(top_block: bytes, other_blocks: list[bytes]) -> bytes:
    """A ucanto-shaped archive of ``top_block`` with ``other_blocks`` before it."""
    top = cid_for(top_block)
    variant = dag_cbor.encode({"ucan@0.9.1": top})
    blocks = [(cid_for(b), b) for b in other_blocks]
    return encode_car([cid_for(variant)], [*blocks, (top, top_block), (cid_for(variant), variant)])


def with_fields(block: bytes, **changes: Any) -> bytes:
    """``block`` re-encoded with fields replaced and the original ``s`` kept."""
    data = dag_cbor.decode(block)
    data.update(changes)
    return dag_cbor.encode(data)


def test_the_subject_is_a_valid_two_link_chain() -> None:
    chain = extract_chain(CAR)
    assert chain is not None
    assert [d.cid for d in chain] == [SECOND.cid, FIRST.cid]
    assert [d.issuer for d in chain] == [ALICE.did(), ROOT.did()]
    assert all(verifies(d) for d in chain)
    assert [cid for cid, _ in BLOCKS[:2]] == [FIRST.cid, SECOND.cid]


# ---------------------------------------------------------------------------
# Bytes-level mutations
# ---------------------------------------------------------------------------


def test_every_single_bit_flip() -> None:
    for position in range(len(CAR)):
        for bit in range(8):
            mutated = bytearray(CAR)
            mutated[position] ^= 1 << bit
            assert_decoders_fail_typed_or_nothing_forged(bytes(mutated))


def test_every_truncation() -> None:
    for cut in range(len(CAR)):
        assert extract_chain(CAR[:cut]) is None
        with contextlib.suppress(UcanError):
            decode_car(CAR[:cut])


@MUTATIONS
@given(
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 7)), min_size=2, max_size=12)
)
def test_multiple_bit_flips(flips: list[tuple[int, int]]) -> None:
    mutated = bytearray(CAR)
    for position, bit in flips:
        mutated[position % len(CAR)] ^= 1 << bit
    assert_decoders_fail_typed_or_nothing_forged(bytes(mutated))


@MUTATIONS
@given(
    start=st.integers(min_value=0),
    replacement=st.binary(min_size=1, max_size=16),
)
def test_overwritten_byte_runs(start: int, replacement: bytes) -> None:
    position = start % len(CAR)
    mutated = CAR[:position] + replacement + CAR[position + len(replacement) :]
    assert_decoders_fail_typed_or_nothing_forged(mutated[: len(CAR)])


@MUTATIONS
@given(cut=st.integers(min_value=0), garbage=st.binary(max_size=64))
def test_truncation_then_garbage(cut: int, garbage: bytes) -> None:
    assert_decoders_fail_typed_or_nothing_forged(CAR[: cut % len(CAR)] + garbage)


@MUTATIONS
@given(garbage=st.binary(min_size=1, max_size=64))
def test_appended_garbage(garbage: bytes) -> None:
    chain = extract_chain(CAR + garbage)
    assert_nothing_forged(chain)
    if chain is not None:
        assert [d.cid for d in chain] == [SECOND.cid, FIRST.cid]


@MUTATIONS
@given(extra=st.binary(min_size=1, max_size=64))
def test_appended_valid_blocks_change_nothing(extra: bytes) -> None:
    cid = cid_for(extra)
    section = varint.encode(len(cid.to_bytes()) + len(extra)) + cid.to_bytes() + extra
    chain = extract_chain(CAR + section)
    assert chain is not None
    assert [d.cid for d in chain] == [SECOND.cid, FIRST.cid]
    assert all(verifies(d) for d in chain)


# ---------------------------------------------------------------------------
# Huge and wrong declared lengths
# ---------------------------------------------------------------------------


def _length_prefix_offsets() -> list[tuple[int, int]]:
    """``(offset, size)`` of the header's and every section's length varint in ``CAR``."""
    offsets = []
    position = 0
    while position < len(CAR):
        length, after = varint.decode(CAR, position)
        offsets.append((position, after - position))
        position = after + length
    return offsets


LENGTH_PREFIXES = _length_prefix_offsets()


def test_the_archive_has_a_header_and_three_sections() -> None:
    assert len(LENGTH_PREFIXES) == 4


@MUTATIONS
@given(
    which=st.integers(0, len(LENGTH_PREFIXES) - 1),
    declared=st.integers(len(CAR), (1 << 63) - 1),
)
def test_huge_declared_lengths_are_refused(which: int, declared: int) -> None:
    offset, size = LENGTH_PREFIXES[which]
    mutated = CAR[:offset] + varint.encode(declared) + CAR[offset + size :]
    with pytest.raises(InvalidFormat):
        decode_car(mutated)
    assert extract_chain(mutated) is None


@MUTATIONS
@given(which=st.integers(0, len(LENGTH_PREFIXES) - 1), declared=st.integers(0, 4096))
def test_wrong_declared_lengths_fail_typed(which: int, declared: int) -> None:
    offset, size = LENGTH_PREFIXES[which]
    mutated = CAR[:offset] + varint.encode(declared) + CAR[offset + size :]
    assume(mutated != CAR)
    assert_decoders_fail_typed_or_nothing_forged(mutated)


@pytest.mark.parametrize("which", range(4))
@pytest.mark.parametrize(
    "prefix",
    [b"\xff" * 9 + b"\x01", b"\x80" * 9, b"\xff" * 20, b"\x80\x00"],
    ids=["ten-bytes", "nine-continuations", "twenty-bytes", "non-minimal"],
)
def test_malformed_length_varints_are_refused(which: int, prefix: bytes) -> None:
    offset, size = LENGTH_PREFIXES[which]
    mutated = CAR[:offset] + prefix + CAR[offset + size :]
    with pytest.raises(InvalidFormat):
        decode_car(mutated)


# ---------------------------------------------------------------------------
# Structural mutations
# ---------------------------------------------------------------------------


@MUTATIONS
@given(order=st.permutations(BLOCKS))
def test_reordered_blocks_still_extract_and_verify(order: list[tuple[CID, bytes]]) -> None:
    car = encode_car(ROOTS, order)
    chain = extract_chain(car)
    assert chain is not None
    assert [d.cid for d in chain] == [SECOND.cid, FIRST.cid]
    assert all(verifies(d) for d in chain)
    assert chain[0].archive() == CAR  # archiving restores the canonical order


def _signature_field(ucan: Ucan) -> bytes:
    field = dag_cbor.decode(ucan.block)["s"]
    assert isinstance(field, bytes)
    return field


def test_top_ucan_with_the_proofs_signature_decodes_but_fails() -> None:
    forged = with_fields(SECOND.ucan.block, s=_signature_field(FIRST.ucan))
    chain = extract_chain(archive_of(forged, [FIRST.ucan.block]))
    assert chain is not None
    assert chain[0].ucan.signature == FIRST.ucan.signature
    assert not verifies(chain[0])
    assert verifies(chain[1])
    assert_nothing_forged(chain)


def test_swapped_signatures_between_both_ucans_fail_both() -> None:
    proof = with_fields(FIRST.ucan.block, s=_signature_field(SECOND.ucan))
    top = with_fields(SECOND.ucan.block, s=_signature_field(FIRST.ucan), prf=[cid_for(proof)])
    chain = extract_chain(archive_of(top, [proof]))
    assert chain is not None
    assert [d.cid for d in chain] == [cid_for(top), cid_for(proof)]
    assert not verifies(chain[0])
    assert not verifies(chain[1])


def test_a_signature_from_another_key_fails() -> None:
    stolen = INTRUDER.sign(SECOND.ucan.signing_input())
    forged = with_fields(SECOND.ucan.block, s=_signature_field(SECOND.ucan)[:4] + stolen)
    chain = extract_chain(archive_of(forged, [FIRST.ucan.block]))
    assert chain is not None
    assert not verifies(chain[0])


def test_a_top_ucan_reissued_by_another_key_is_not_the_original_issuer() -> None:
    """Re-signing is possible for anyone, but only as the signer's own DID."""
    reissued = issue(
        INTRUDER,
        audience=BOB.did(),
        capabilities=SECOND.capabilities,
        expiration=None,
        proofs=[FIRST.cid],
    )
    chain = extract_chain(archive_of(reissued.block, [FIRST.ucan.block]))
    assert chain is not None
    assert chain[0].issuer == INTRUDER.did() != FIRST.audience
    assert all(verifies(d) for d in chain)


FIELD_CHANGES: dict[str, st.SearchStrategy[Any]] = {
    "aud": st.sampled_from([INTRUDER.did(), ROOT.did(), "did:ixo:ixo1evil"]).map(encode_principal),
    "iss": st.sampled_from([INTRUDER.did(), BOB.did(), "did:ixo:ixo1evil"]).map(encode_principal),
    "exp": st.none() | st.integers(0, (1 << 63) - 1),
    "nbf": st.integers(1, (1 << 63) - 1),
    "nnc": st.text(min_size=1, max_size=8),
    "v": st.sampled_from(["0.9.0", "0.9.2", "1.0.0"]),
    "att": st.lists(
        st.fixed_dictionaries(
            {
                "with": st.sampled_from(["ixo:sandbox", "ixo:memory", "*"]),
                "can": st.text(max_size=6),
            }
        ),
        max_size=2,
    ),
    "fct": st.lists(
        st.dictionaries(st.text(max_size=3), st.integers(-(1 << 63), (1 << 63) - 1), max_size=2),
        max_size=2,
    ),
}


@MUTATIONS
@given(data=st.data(), field=st.sampled_from(sorted(FIELD_CHANGES)))
def test_altered_top_ucan_fields_break_its_signature(data: st.DataObject, field: str) -> None:
    value = data.draw(FIELD_CHANGES[field], label=field)
    original = dag_cbor.decode(SECOND.ucan.block)
    assume(original.get(field, []) != value)
    altered = with_fields(SECOND.ucan.block, **{field: value})
    chain = extract_chain(archive_of(altered, [FIRST.ucan.block]))
    if field == "fct" and value == []:
        # An empty fct is not signed; it is refused outright, as a second encoding of
        # the same signed payload would dodge CID-keyed replay protection.
        assert chain is None
        return
    assert chain is not None
    assert chain[0].cid == cid_for(altered)
    assert not verifies(chain[0])
    assert_nothing_forged(chain)


@MUTATIONS
@given(data=st.data(), field=st.sampled_from(sorted(FIELD_CHANGES)))
def test_altered_proof_fields_break_its_signature(data: st.DataObject, field: str) -> None:
    value = data.draw(FIELD_CHANGES[field], label=field)
    original = dag_cbor.decode(FIRST.ucan.block)
    assume(original.get(field, []) != value)
    proof = with_fields(FIRST.ucan.block, **{field: value})
    top = with_fields(SECOND.ucan.block, prf=[cid_for(proof)])
    chain = extract_chain(archive_of(top, [proof]))
    assert chain is not None
    assert [d.cid for d in chain] == [cid_for(top), cid_for(proof)]
    assert not verifies(chain[0])  # its prf changed
    assert not verifies(chain[1])
    # Left pointing at the original proof, the top UCAN verifies but the altered proof is
    # an unreachable extra block.
    unreferenced = extract_chain(archive_of(SECOND.ucan.block, [proof]))
    assert unreferenced is not None
    assert [d.cid for d in unreferenced] == [SECOND.cid]
    assert unreferenced[0].proofs() == [FIRST.cid]


def test_verifying_a_ucan_with_mixed_ascii_and_non_ascii_fact_keys_does_not_raise() -> None:
    """Facts come from untrusted blocks; checking their signature must answer, not crash."""
    altered = with_fields(SECOND.ucan.block, fct=[{"a": 0, "é": 1}])
    chain = extract_chain(archive_of(altered, [FIRST.ucan.block]))
    assert chain is not None
    assert verifies(chain[0]) is False


def test_dropped_and_added_optional_fields_break_the_signature() -> None:
    data = dag_cbor.decode(SECOND.ucan.block)
    for field in ("fct", "nnc", "nbf"):
        trimmed = {k: v for k, v in data.items() if k != field}
        chain = extract_chain(archive_of(dag_cbor.encode(trimmed), [FIRST.ucan.block]))
        assert chain is not None
        assert not verifies(chain[0]), field
    first = dag_cbor.decode(FIRST.ucan.block)
    for field, value in (("fct", [{"a": 1}]), ("nnc", "x"), ("nbf", 1)):
        proof = dag_cbor.encode({**first, field: value})
        chain = extract_chain(archive_of(proof, []))
        assert chain is not None
        assert not verifies(chain[0]), field


# ---------------------------------------------------------------------------
# Single blocks and tokens
# ---------------------------------------------------------------------------


@MUTATIONS
@given(
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 7)), min_size=1, max_size=4)
)
def test_bit_flipped_ucan_blocks_fail_typed_or_fail_verification(
    flips: list[tuple[int, int]],
) -> None:
    block = bytearray(SECOND.ucan.block)
    for position, bit in flips:
        block[position % len(block)] ^= 1 << bit
    try:
        ucan = Ucan.decode(bytes(block))
    except UcanError:
        return
    if signed_parts(ucan) in ORIGINAL_SIGNED:
        return
    assert not verifies(Delegation(ucan))


def test_every_truncated_ucan_block_is_refused() -> None:
    for cut in range(len(SECOND.ucan.block)):
        with pytest.raises(InvalidFormat):
            Ucan.decode(SECOND.ucan.block[:cut])


@MUTATIONS
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_fail_typed(data: bytes) -> None:
    for decode in (Ucan.decode, Delegation.extract, decode_car):
        with contextlib.suppress(UcanError):
            decode(data)


@MUTATIONS
@given(text=st.text(max_size=200))
def test_arbitrary_tokens_fail_typed(text: str) -> None:
    with contextlib.suppress(UcanError):
        Delegation.from_base64(text)


@MUTATIONS
@given(position=st.integers(min_value=0), character=st.characters())
def test_tokens_with_a_replaced_character_fail_typed(position: int, character: str) -> None:
    index = position % len(TOKEN)
    mutated = TOKEN[:index] + character + TOKEN[index + 1 :]
    try:
        chain = list(Delegation.from_base64(mutated).chain())
    except UcanError:
        return
    assert_nothing_forged(chain)


def test_random_byte_shuffles_fail_typed() -> None:
    shuffler = random.Random(20_000_000)
    for _ in range(200):
        mutated = bytearray(CAR)
        start = shuffler.randrange(len(CAR))
        end = min(len(CAR), start + shuffler.randrange(2, 40))
        window = mutated[start:end]
        shuffler.shuffle(window)
        mutated[start:end] = window
        assert_decoders_fail_typed_or_nothing_forged(bytes(mutated))


# ---------------------------------------------------------------------------
# Bounded work on shared proofs
# ---------------------------------------------------------------------------


def _doubled_chain_archive(depth: int) -> tuple[bytes, int]:
    """``depth`` UCANs over ``FIRST``, each listing the one below it twice, as an archive."""
    blocks = [FIRST.ucan.block]
    below = FIRST.cid
    for _ in range(depth):
        ucan = issue(
            ALICE,
            audience=ALICE.did(),
            capabilities=[{"with": "ixo:sandbox", "can": "*"}],
            expiration=None,
            proofs=[below, below],
        )
        blocks.append(ucan.block)
        below = cid_for(ucan.block)
    return archive_of(blocks[-1], blocks[:-1]), len(blocks)


def test_shared_proofs_are_walked_in_linear_time() -> None:
    """A small archive whose proofs repeat must not make walking it exponential: these 21
    UCANs (about 5 KB) would otherwise mean two million visits."""
    car, distinct = _doubled_chain_archive(20)
    assert len(car) < 8_000
    top = Delegation.extract(car)
    bound = 4 * distinct
    walked = list(islice(top.chain(), bound))
    assert len(walked) < bound
    assert len({d.cid for d in walked}) == distinct
    yielded = list(islice(top.iterate_blocks(), bound))
    assert len(yielded) < bound
    assert decode_car(top.archive()).blocks == decode_car(car).blocks
