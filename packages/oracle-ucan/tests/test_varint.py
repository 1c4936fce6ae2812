"""Unsigned LEB128 varints (``oracle_ucan.varint``): the length prefixes of CARs and CIDs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_ucan import varint
from oracle_ucan.errors import InvalidFormat, UcanError

BOUNDED = settings(max_examples=300, deadline=None, derandomize=True, database=None)
MAX_VALUE = (1 << 63) - 1


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (0xED, "ed01"),  # the Ed25519 public-key multicodec
        (0x1300, "8026"),  # the Ed25519 private-key multicodec
        (0x0D1D, "9d1a"),  # the DID principal prefix of UCAN-7
        (0xD0ED, "eda103"),  # the EdDSA varsig code of UCAN-8
        (16384, "808001"),
        (MAX_VALUE, "ffffffffffffffff7f"),
    ],
)
def test_known_vectors(value: int, encoded: str) -> None:
    raw = bytes.fromhex(encoded)
    assert varint.encode(value) == raw
    assert varint.decode(raw) == (value, len(raw))


@BOUNDED
@given(value=st.integers(0, MAX_VALUE), prefix=st.binary(max_size=4), suffix=st.binary(max_size=4))
def test_round_trip_at_any_offset(value: int, prefix: bytes, suffix: bytes) -> None:
    raw = varint.encode(value)
    assert 1 <= len(raw) <= varint.MAX_BYTES
    data = prefix + raw + suffix
    assert varint.decode(data, len(prefix)) == (value, len(prefix) + len(raw))
    assert varint.decode(memoryview(data), len(prefix)) == (value, len(prefix) + len(raw))


@BOUNDED
@given(data=st.binary(max_size=12))
def test_decoding_is_canonical_or_fails_typed(data: bytes) -> None:
    """Whatever decodes re-encodes to exactly the bytes it consumed (one encoding per value)."""
    try:
        value, end = varint.decode(data)
    except InvalidFormat:
        return
    assert varint.encode(value) == data[:end]


@pytest.mark.parametrize("encoded", ["8000", "ff00", "808000", "8180808000", "ff" * 8 + "00"])
def test_non_minimal_encodings_are_rejected(encoded: str) -> None:
    with pytest.raises(InvalidFormat, match="not minimally encoded"):
        varint.decode(bytes.fromhex(encoded))


@pytest.mark.parametrize("encoded", ["", "80", "ffff", "ff" * 8])
def test_truncated_varints_are_rejected(encoded: str) -> None:
    with pytest.raises(InvalidFormat, match="truncated varint"):
        varint.decode(bytes.fromhex(encoded))


def test_offset_at_or_past_the_end_is_truncated() -> None:
    with pytest.raises(InvalidFormat, match="truncated varint"):
        varint.decode(b"\x01", 1)
    with pytest.raises(InvalidFormat, match="truncated varint"):
        varint.decode(b"\x01", 5)


@pytest.mark.parametrize("encoded", ["ff" * 9 + "01", "80" * 9 + "01", "ff" * 9, "ff" * 20])
def test_more_than_nine_bytes_are_rejected(encoded: str) -> None:
    with pytest.raises(InvalidFormat, match="longer than 9 bytes"):
        varint.decode(bytes.fromhex(encoded))


@pytest.mark.parametrize("value", [-1, -(1 << 70), 1 << 63, 1 << 64, 1 << 200])
def test_encoding_out_of_range_is_rejected(value: int) -> None:
    with pytest.raises(InvalidFormat, match="varint out of range") as caught:
        varint.encode(value)
    assert isinstance(caught.value, UcanError)
    assert caught.value.code == "INVALID_FORMAT"
