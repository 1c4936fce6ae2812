"""Fuzz of the DAG-CBOR, CAR and UCAN decoders and of the validators behind them.

Where ``test_robustness`` mutates the bytes of one valid archive, these tests build
structured input: any CBOR value (keys of every type, tags, bignums, simple values,
undefined, floats of every width), UCAN maps with any value in any field, CAR archives
with any header and any sections, and tokens made of those. The claims:

* only this package's errors (``UcanError``) escape a decoder; anything else fails;
* what the strict DAG-CBOR decoder accepts, it encodes back to the very same bytes;
* validators never raise: they answer a ``ValidateResult``, refused with a stable code.

How many examples each test runs comes from the Hypothesis profile (root
``conftest.py``): ``ci`` by default, ``chaos`` with ``HYPOTHESIS_PROFILE=chaos``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from typing import Any, get_args

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle_ucan import (
    CapabilityDef,
    InMemoryInvocationStore,
    dag_cbor,
    decode_car,
    delegate,
    validate_auth_invocation,
    validate_delegation,
    validate_invocation,
)
from oracle_ucan.car import decode_car_parts
from oracle_ucan.cid import DAG_CBOR, RAW, cid_for
from oracle_ucan.delegation import Delegation
from oracle_ucan.errors import ErrorCode, InvalidFormat, UcanError
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier
from oracle_ucan.ucan import Ucan
from oracle_ucan.varint import encode as varint

pytestmark = pytest.mark.fuzz

NOW = 1_700_000_000
ROOT = Ed25519Signer(b"\x03" * 32)
USER = Ed25519Signer(b"\x04" * 32)
ORACLE = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
PROOF = delegate(
    ROOT,
    audience=USER.did(),
    capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
    expiration=NOW + 3600,
)
TOP = delegate(
    USER,
    audience=ORACLE,
    capabilities=[{"with": "ixo:memory", "can": "memory/read", "nb": {"limit": 3}}],
    expiration=NOW + 600,
    proofs=[PROOF],
    facts=[{"k": "v"}],
    nonce="n",
    not_before=NOW - 10,
)
TOP_FIELDS: dict[str, Any] = cbor2.loads(TOP.ucan.block)
UCAN_KEYS = ["v", "iss", "aud", "s", "att", "prf", "exp", "fct", "nnc", "nbf"]
CODES = frozenset(get_args(ErrorCode))
MEMORY = CapabilityDef("memory/read", protocol="ixo:")


# --- strategies --------------------------------------------------------------------------


def _cid_bytes() -> st.SearchStrategy[bytes]:
    """Binary CIDs of every shape a link may carry: valid v1 (dag-cbor, raw, other
    codecs), CIDv0, truncated, padded and random bytes."""
    digest = st.binary(min_size=32, max_size=32)
    return st.one_of(
        digest.map(lambda d: bytes([1, DAG_CBOR, 0x12, 32]) + d),
        digest.map(lambda d: bytes([1, RAW, 0x12, 32]) + d),
        digest.map(lambda d: bytes([0x12, 32]) + d),
        st.builds(
            lambda codec, d: varint(1) + varint(codec) + bytes([0x12, 32]) + d,
            st.integers(0, 1 << 20),
            digest,
        ),
        st.just(TOP.cid.to_bytes()),
        st.just(PROOF.cid.to_bytes()),
        st.binary(max_size=40),
        st.builds(lambda d, extra: bytes([1, DAG_CBOR, 0x12, 32]) + d + extra, digest, st.binary()),
    )


def _links() -> st.SearchStrategy[cbor2.CBORTag]:
    prefix = st.sampled_from([b"\x00", b"", b"\x01"])
    return st.builds(lambda p, raw: cbor2.CBORTag(42, p + raw), prefix, _cid_bytes())


_MAP_KEYS: st.SearchStrategy[Any] = st.one_of(
    st.text(max_size=8),
    st.sampled_from([*UCAN_KEYS, "with", "can", "nb", "roots", "version", "ucan@0.9.1"]),
    st.integers(-(1 << 65), 1 << 65),
    st.binary(max_size=4),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.tuples(st.integers(0, 3)),
)

_LEAVES: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(),
    st.text(max_size=16),
    st.binary(max_size=48),
    st.just(cbor2.undefined),
    st.builds(cbor2.CBORSimpleValue, st.integers(0, 19) | st.integers(32, 255)),
    st.builds(
        cbor2.CBORTag,
        st.sampled_from([0, 1, 2, 3, 24, 55799, 1 << 40]),
        st.integers(-10, 10) | st.binary(max_size=9) | st.text(max_size=4),
    ),
    _links(),
)

CBOR_VALUES: st.SearchStrategy[Any] = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(_MAP_KEYS, children, max_size=5),
    ),
    max_leaves=24,
)


@st.composite
def cbor_bytes(draw: st.DrawFn, values: st.SearchStrategy[Any] = CBOR_VALUES) -> bytes:
    """CBOR of ``values``, written in cbor2's order or its canonical one."""
    value = draw(values)
    return cbor2.dumps(value, canonical=draw(st.booleans()))


@st.composite
def ucan_blocks(draw: st.DrawFn) -> bytes:
    """A real UCAN map with fields replaced, removed, added or nested values altered."""
    fields: dict[Any, Any] = dict(TOP_FIELDS)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["set", "delete", "capability", "proof", "fact"]))
        key = draw(st.sampled_from(UCAN_KEYS) | _MAP_KEYS)
        if action == "set":
            fields[key] = draw(CBOR_VALUES)
        elif action == "delete":
            fields.pop(key, None)
        elif action == "capability":
            capability = {"with": "ixo:memory", "can": "memory/read", "nb": {"limit": 3}}
            capability[key] = draw(CBOR_VALUES)
            fields["att"] = [capability]
        elif action == "proof":
            fields["prf"] = draw(st.lists(_links() | CBOR_VALUES, max_size=3))
        else:
            fields["fct"] = [{key: draw(CBOR_VALUES)}]
    return cbor2.dumps(fields, canonical=draw(st.booleans()))


def _archive(root_block: bytes, blocks: list[tuple[bytes, bytes]]) -> bytes:
    """CARv1 bytes: a single-root header, then ``(cid bytes, data)`` sections."""
    header = dag_cbor.encode({"roots": [cid_for(root_block)], "version": 1})
    out = bytearray(varint(len(header)) + header)
    for cid, data in [*blocks, (cid_for(root_block).to_bytes(), root_block)]:
        out += varint(len(cid) + len(data)) + cid + data
    return bytes(out)


def _token_of(ucan_block: bytes) -> str:
    """A ucanto-shaped token around ``ucan_block``, with the real proof's block."""
    link = cid_for(ucan_block)
    variant = dag_cbor.encode({"ucan@0.9.1": link})
    blocks = [(PROOF.cid.to_bytes(), PROOF.ucan.block), (link.to_bytes(), ucan_block)]
    return base64.b64encode(_archive(variant, blocks)).decode()


@st.composite
def car_archives(draw: st.DrawFn) -> bytes:
    """CAR archives with any header and any sections, lengths right or wrong.

    Three parts in four are well formed, so that the sections behind them are read too.
    """
    well_formed = st.integers(0, 3).map(bool)
    if draw(well_formed):
        header = dag_cbor.encode({"roots": [TOP.cid], "version": 1})
    else:
        roots = st.lists(_links() | CBOR_VALUES, max_size=3)
        header = draw(
            cbor_bytes(st.fixed_dictionaries({"roots": roots, "version": CBOR_VALUES}))
            | cbor_bytes()
        )
    prefix = varint(len(header)) if draw(well_formed) else draw(st.binary(max_size=3))
    out = bytearray(prefix + header)
    for _ in range(draw(st.integers(0, 4))):
        data = draw(st.binary(max_size=64) | cbor_bytes() | st.just(TOP.ucan.block))
        if draw(well_formed):
            cid = draw(st.sampled_from([cid_for(data), cid_for(data, RAW)])).to_bytes()
        else:
            cid = draw(_cid_bytes())
        length = len(cid) + len(data)
        if not draw(well_formed):
            length = draw(st.integers(0, length + 40))
        out += varint(length) + cid + data
    return bytes(out)


# --- decoders ----------------------------------------------------------------------------


@given(data=cbor_bytes())
def test_dag_cbor_decodes_any_cbor_or_refuses_it_typed(data: bytes) -> None:
    try:
        value = dag_cbor.decode(data)
    except InvalidFormat:
        return
    # Strict means canonical: what is accepted is the one encoding of its value.
    assert dag_cbor.encode(value) == data


@given(data=st.binary(max_size=96))
def test_dag_cbor_refuses_arbitrary_bytes_typed(data: bytes) -> None:
    try:
        value = dag_cbor.decode(data)
    except InvalidFormat:
        return
    assert dag_cbor.encode(value) == data


@given(value=CBOR_VALUES)
def test_dag_cbor_encodes_any_value_or_refuses_it_typed(value: Any) -> None:
    try:
        encoded = dag_cbor.encode(value)
    except InvalidFormat:
        return
    assert dag_cbor.encode(dag_cbor.decode(encoded)) == encoded


@given(block=ucan_blocks())
def test_ucan_decode_of_any_ucan_map_is_typed(block: bytes) -> None:
    try:
        ucan = Ucan.decode(block)
    except InvalidFormat:
        return
    # A block that decodes can be checked: every accessor the validators use works.
    assert ucan.replay_key().startswith("bafkrei")
    verifier = Ed25519Verifier.from_did(USER.did())
    assert isinstance(ucan.verify_with(verifier), bool)


@given(block=cbor_bytes())
def test_ucan_decode_of_any_cbor_is_typed(block: bytes) -> None:
    with contextlib.suppress(InvalidFormat):
        Ucan.decode(block, cid_for(block))


@given(car=car_archives())
def test_car_decode_of_any_archive_is_typed(car: bytes) -> None:
    try:
        roots, blocks = decode_car_parts(car)
    except InvalidFormat:
        return
    assert roots
    for cid, data in blocks.items():
        assert cid.hash.digest == hashlib.sha256(data).digest()
    assert decode_car(car).roots == roots


@given(car=car_archives())
def test_delegation_extract_of_any_archive_is_typed(car: bytes) -> None:
    with contextlib.suppress(UcanError):
        list(Delegation.extract(car).chain())


@given(variant=cbor_bytes(), ucan_block=ucan_blocks() | st.just(TOP.ucan.block))
def test_delegation_extract_of_any_root_block_is_typed(variant: bytes, ucan_block: bytes) -> None:
    car = _archive(variant, [(cid_for(ucan_block).to_bytes(), ucan_block)])
    with contextlib.suppress(UcanError):
        list(Delegation.extract(car).chain())


# --- validators --------------------------------------------------------------------------


async def _validate_all(token: str) -> list[Any]:
    store = InMemoryInvocationStore(clock=lambda: float(NOW))
    return [
        await validate_auth_invocation(token, audience=ORACLE, now=NOW),
        await validate_delegation(token, audience=ORACLE, now=NOW),
        await validate_invocation(
            token,
            MEMORY,
            "ixo:memory",
            audience=ORACLE,
            root_issuers=[ROOT.did()],
            store=store,
            now=NOW,
        ),
    ]


@given(block=ucan_blocks())
def test_validators_answer_any_ucan_with_a_result(block: bytes) -> None:
    for result in asyncio.run(_validate_all(_token_of(block))):
        if result.ok:
            continue  # e.g. an empty nnc added: the same signed UCAN, still valid
        assert result.error is not None
        assert result.error.code in CODES


@given(
    text=st.text(max_size=64) | st.binary(max_size=200).map(lambda b: base64.b64encode(b).decode())
)
def test_validators_answer_any_text_with_a_refusal(text: str) -> None:
    for result in asyncio.run(_validate_all(text)):
        assert result.ok is False
        assert result.error is not None
        assert result.error.code in CODES


def test_the_unaltered_token_validates() -> None:
    """The fuzzed tokens start from a valid one: a refusal above is the mutation's doing."""
    results = asyncio.run(_validate_all(_token_of(TOP.ucan.block)))
    assert [result.ok for result in results] == [True, True, True]
