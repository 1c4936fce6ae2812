"""Strict canonical DAG-CBOR (``oracle_ucan.dag_cbor``, UCAN-10)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_ucan import dag_cbor
from oracle_ucan.cid import RAW, cid_for
from oracle_ucan.errors import InvalidFormat

BOUNDED = settings(max_examples=300, deadline=None, derandomize=True, database=None)
ABC = cid_for(b"abc")

# ---------------------------------------------------------------------------
# Encoding: known byte vectors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ({"a": 1}, "a1616101"),
        ({}, "a0"),
        ([], "80"),
        ([1, [2, 3]], "8201820203"),
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (255, "18ff"),
        (256, "190100"),
        (65536, "1a00010000"),
        (1 << 32, "1b0000000100000000"),
        ((1 << 64) - 1, "1bffffffffffffffff"),
        (-1, "20"),
        (-25, "3818"),
        (-(1 << 64), "3bffffffffffffffff"),
        (1.5, "fb3ff8000000000000"),
        (1.0, "fb3ff0000000000000"),  # floats stay float64 even when integral
        (-0.0, "fb8000000000000000"),
        (True, "f5"),
        (False, "f4"),
        (None, "f6"),
        ("", "60"),
        ("a", "6161"),
        ("é", "62c3a9"),
        (b"", "40"),
        (b"\x01\x02", "420102"),
        ((1, 2), "820102"),  # tuples are lists
    ],
)
def test_encodes_known_vectors(value: object, encoded: str) -> None:
    assert dag_cbor.encode(value).hex() == encoded


def test_map_keys_are_ordered_by_length_then_bytes() -> None:
    encoded = dag_cbor.encode({"bb": 1, "a": 2, "c": 3})
    assert encoded.hex() == "a3" + "616102" + "616303" + "62626201"
    assert list(dag_cbor.decode(encoded)) == ["a", "c", "bb"]


def test_key_order_compares_utf8_bytes() -> None:
    # "é" is two UTF-8 bytes, so it sorts after every one-byte key, even "z".
    keys = ["é", "z", "aa", "Z", "\U0001f600"]
    assert list(dag_cbor.decode(dag_cbor.encode(dict.fromkeys(keys, 0)))) == [
        "Z",
        "z",
        "aa",
        "é",
        "\U0001f600",
    ]
    assert dag_cbor.sort_key("é") == (2, b"\xc3\xa9")


def test_nested_maps_are_sorted_at_every_depth() -> None:
    value = {"outer": [{"yy": 1, "x": 2}], "a": {"bb": None, "c": True}}
    assert dag_cbor.encode(value) == bytes.fromhex(
        "a2" + "6161a2" + "6163f5" + "626262f6" + "656f75746572" + "81a2" + "617802" + "62797901"
    )


def test_a_link_is_tag_42_over_a_zero_byte_and_the_cid() -> None:
    encoded = dag_cbor.encode(ABC)
    assert encoded == bytes.fromhex("d82a5825") + b"\x00" + ABC.to_bytes()
    assert dag_cbor.decode(encoded) == ABC
    raw_link = cid_for(b"abc", RAW)
    assert dag_cbor.decode(dag_cbor.encode({"l": [raw_link]})) == {"l": [raw_link]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: "a"}, "map keys must be strings"),
        ({b"k": "a"}, "map keys must be strings"),
        ({"n": {None: 1}}, "map keys must be strings"),
        (math.nan, "NaN and infinities"),
        (math.inf, "NaN and infinities"),
        ([-math.inf], "NaN and infinities"),
        (1 << 64, "outside the 64-bit range"),
        (-(1 << 64) - 1, "outside the 64-bit range"),
        ({1, 2}, "cannot encode set"),
        (object(), "cannot encode object"),
        (bytearray(b"x"), "cannot encode bytearray"),
        ("\ud800", "cannot encode as DAG-CBOR"),
    ],
)
def test_encode_refuses_what_dag_cbor_cannot_carry(value: object, message: str) -> None:
    with pytest.raises(InvalidFormat, match=message):
        dag_cbor.encode(value)


def nested_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_encode_refuses_deep_nesting() -> None:
    assert dag_cbor.encode(nested_lists(dag_cbor.MAX_DEPTH)) == bytes.fromhex(
        "81" * dag_cbor.MAX_DEPTH + "01"
    )
    for depth in (dag_cbor.MAX_DEPTH + 2, 1000):
        with pytest.raises(InvalidFormat, match="nested too deeply"):
            dag_cbor.encode(nested_lists(depth))


@pytest.mark.parametrize("depth", [dag_cbor.MAX_DEPTH, dag_cbor.MAX_DEPTH + 1])
def test_encode_never_emits_nesting_that_decode_refuses(depth: int) -> None:
    value = nested_lists(depth)
    try:
        encoded = dag_cbor.encode(value)
    except InvalidFormat:
        return
    assert dag_cbor.decode(encoded) == value


# ---------------------------------------------------------------------------
# Decoding: everything non-canonical is refused
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "reason"),
    [
        ("a2616201616102", "unsorted keys (b before a)"),
        ("a262626201616102", "unsorted keys (longer key first)"),
        ("a2616101616102", "duplicate keys"),
        ("9f01ff", "indefinite-length array"),
        ("bf616101ff", "indefinite-length map"),
        ("7f6161ff", "indefinite-length text"),
        ("5f4101ff", "indefinite-length bytes"),
        ("1817", "non-minimal uint8"),
        ("190017", "non-minimal uint16"),
        ("1a00000017", "non-minimal uint32"),
        ("1b0000000000000017", "non-minimal uint64"),
        ("3800", "non-minimal negative"),
        ("5800", "non-minimal bytes length"),
        ("7800", "non-minimal text length"),
        ("9800", "non-minimal array length"),
        ("b800", "non-minimal map length"),
        ("f93e00", "half float"),
        ("fa3fc00000", "single float"),
        ("fb7ff8000000000000", "NaN"),
        ("fb7ff0000000000000", "Infinity"),
        ("fbfff0000000000000", "-Infinity"),
        ("f97e00", "half NaN"),
        ("f7", "undefined"),
        ("f0", "simple value 16"),
        ("f820", "simple value 32"),
        ("f8ff", "simple value 255"),
        ("c074323031332d30332d32315432303a30343a30305a", "tag 0 (date string)"),
        ("c11a514b67b0", "tag 1 (epoch)"),
        ("c24101", "tag 2 (small bignum)"),
        ("c249010000000000000000", "tag 2 (bignum beyond 64 bits)"),
        ("c349010000000000000000", "tag 3 (negative bignum)"),
        ("d9d9f701", "tag 55799 (self-describe)"),
        ("d82b4100", "tag 43"),
        ("a10101", "integer key"),
        ("a1410101", "bytes key"),
        ("a1f601", "null key"),
        ("a1810101", "array key"),
        ("62c328", "invalid UTF-8"),
        ("63eda080", "UTF-8 encoded surrogate"),
        ("d82a4101", "tag 42 without the 00 prefix"),
        ("d82a40", "tag 42 over empty bytes"),
        ("d82a4300ffff", "tag 42 over a bad CID"),
        ("d82a6161", "tag 42 over text"),
        ("d82a01", "tag 42 over an integer"),
        ("a161610100", "trailing byte after the item"),
        ("0101", "two items"),
        ("", "empty input"),
        ("ff", "lone break"),
        ("a1", "truncated map"),
        ("5b7fffffffffffffff", "huge bytes length"),
        ("9b7fffffffffffffff", "huge array length"),
        ("bb7fffffffffffffff", "huge map length"),
        ("1c", "reserved additional info"),
    ],
)
def test_decode_refuses_non_canonical_input(encoded: str, reason: str) -> None:
    with pytest.raises(InvalidFormat):
        dag_cbor.decode(bytes.fromhex(encoded))


def test_a_link_with_bytes_after_the_cid_is_refused() -> None:
    """Tag 42 must hold exactly ``00 ‖ CID``: padding would give one link two encodings."""
    padded = bytes.fromhex("d82a5827") + b"\x00" + ABC.to_bytes() + b"xx"
    with pytest.raises(InvalidFormat):
        dag_cbor.decode(padded)
    with pytest.raises(InvalidFormat):
        dag_cbor.decode(b"\xa1\x61l" + padded)


def test_trailing_bytes_are_refused_as_non_canonical() -> None:
    valid = dag_cbor.encode({"a": [1, 2]})
    with pytest.raises(InvalidFormat, match="not in canonical form"):
        dag_cbor.decode(valid + b"\x00")
    with pytest.raises(InvalidFormat, match="not in canonical form"):
        dag_cbor.decode(valid + valid)


def test_duplicate_key_error_is_typed() -> None:
    with pytest.raises(InvalidFormat, match="invalid DAG-CBOR") as caught:
        dag_cbor.decode(bytes.fromhex("a2616101616102"))
    assert caught.value.code == "INVALID_FORMAT"


def test_decode_limits_nesting_to_max_depth() -> None:
    at_limit = bytes.fromhex("81" * dag_cbor.MAX_DEPTH + "01")
    assert dag_cbor.decode(at_limit) == nested_lists(dag_cbor.MAX_DEPTH)
    with pytest.raises(InvalidFormat, match="depth"):
        dag_cbor.decode(bytes.fromhex("81" * (dag_cbor.MAX_DEPTH + 1) + "01"))
    with pytest.raises(InvalidFormat, match="depth"):
        dag_cbor.decode(bytes.fromhex("a1616181" * 40 + "01"))
    # far past Python's recursion limit: still a typed error, not a RecursionError
    with pytest.raises(InvalidFormat):
        dag_cbor.decode(b"\x81" * 100_000 + b"\x01")


def test_decode_returns_plain_python_values() -> None:
    value = {"bytes": b"\x00\xff", "f": 0.25, "link": ABC, "list": [None, True, -3], "s": "é"}
    decoded = dag_cbor.decode(dag_cbor.encode(value))
    assert decoded == value
    assert type(decoded) is dict
    assert type(decoded["list"]) is list
    assert type(decoded["bytes"]) is bytes


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

LINKS = st.binary(max_size=8).map(cid_for)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 64), (1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | LINKS
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=24,
)


def same_value(left: Any, right: Any) -> bool:
    """Equality that also tells ints from floats and ``0.0`` from ``-0.0``."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(same_value(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same_value, left, right))
    if isinstance(left, float):
        return math.copysign(1.0, left) == math.copysign(1.0, right) and left == right
    return bool(left == right)


def canonical(value: Any) -> Any:
    """``value`` with every map's keys in DAG-CBOR order."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value, key=dag_cbor.sort_key)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


@BOUNDED
@given(value=VALUES)
def test_encode_decode_round_trip(value: Any) -> None:
    encoded = dag_cbor.encode(value)
    decoded = dag_cbor.decode(encoded)
    assert same_value(decoded, canonical(value))
    assert dag_cbor.encode(decoded) == encoded


@BOUNDED
@given(keys=st.lists(st.text(max_size=6), unique=True, max_size=8))
def test_decoded_map_keys_come_back_in_canonical_order(keys: list[str]) -> None:
    decoded = dag_cbor.decode(dag_cbor.encode(dict.fromkeys(reversed(keys))))
    assert list(decoded) == sorted(keys, key=dag_cbor.sort_key)


@BOUNDED
@given(data=st.binary(max_size=40))
def test_arbitrary_bytes_decode_canonically_or_raise_invalid_format(data: bytes) -> None:
    try:
        value = dag_cbor.decode(data)
    except InvalidFormat:
        return
    assert dag_cbor.encode(value) == data


@BOUNDED
@given(value=VALUES, position=st.integers(min_value=0), bit=st.integers(0, 7))
def test_bit_flipped_encodings_decode_canonically_or_raise_invalid_format(
    value: Any, position: int, bit: int
) -> None:
    encoded = bytearray(dag_cbor.encode(value))
    encoded[position % len(encoded)] ^= 1 << bit
    try:
        decoded = dag_cbor.decode(bytes(encoded))
    except InvalidFormat:
        return
    assert dag_cbor.encode(decoded) == bytes(encoded)
