"""CIDs (``oracle_ucan.cid``): sha2-256 CIDv1 over dag-cbor and raw blocks."""

from __future__ import annotations

import base64
import contextlib
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats.cid import CID

from oracle_ucan import varint
from oracle_ucan.cid import DAG_CBOR, RAW, SHA2_256, cid_for, cid_length, parse_cid, verify_block
from oracle_ucan.errors import InvalidFormat

BOUNDED = settings(max_examples=200, deadline=None, derandomize=True, database=None)


def base32_cid(raw: bytes) -> str:
    """The multibase base32 (``b``) text of binary CID bytes, computed without multiformats."""
    return "b" + base64.b32encode(raw).decode().lower().rstrip("=")


def test_cid_of_abc_as_dag_cbor_matches_the_known_vector() -> None:
    cid = cid_for(b"abc")
    assert str(cid) == "bafyreif2pall7dybz7vecqka3zo24irdwabwdi4wc55jznaq75q7eaavvu"
    assert cid.version == 1
    assert cid.codec == DAG_CBOR
    assert cid.hash.code == SHA2_256
    assert cid.hash.digest == hashlib.sha256(b"abc").digest()


@pytest.mark.parametrize(("codec", "prefix"), [(DAG_CBOR, "bafyrei"), (RAW, "bafkrei")])
@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(256))])
def test_cid_bytes_are_version_codec_and_sha256_multihash(
    codec: int, prefix: str, data: bytes
) -> None:
    expected = bytes([1, codec, SHA2_256, 32]) + hashlib.sha256(data).digest()
    cid = cid_for(data, codec)
    assert cid.to_bytes() == expected
    assert str(cid) == base32_cid(expected)
    assert str(cid).startswith(prefix)


def test_cid_length_of_a_v1_cid_with_trailing_block_data() -> None:
    raw = cid_for(b"abc").to_bytes()
    assert cid_length(raw) == 36
    assert cid_length(raw + b"block data after the CID") == 36
    assert cid_length(b"\xff\xff" + raw + b"tail", 2) == 36
    assert cid_length(memoryview(raw)) == 36


def test_cid_length_of_a_v0_cid() -> None:
    v0 = bytes([SHA2_256, 32]) + hashlib.sha256(b"abc").digest()
    assert cid_length(v0) == 34
    assert cid_length(v0 + b"data") == 34
    assert cid_length(b"\x00" + v0, 1) == 34
    parsed = parse_cid(v0)
    assert parsed.version == 0
    assert parsed.to_bytes() == v0


def test_cid_length_of_a_v1_cid_with_a_multi_byte_hash_code() -> None:
    raw = bytes([1, DAG_CBOR]) + varint.encode(0xB220) + bytes([32]) + bytes(32)
    assert cid_length(raw + b"x") == len(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "truncated varint"),
        (bytes([1]), "truncated varint"),
        (bytes([1, DAG_CBOR]), "truncated varint"),
        (bytes([1, DAG_CBOR, SHA2_256]), "truncated varint"),
        (bytes([1, DAG_CBOR, SHA2_256, 32]) + bytes(31), "truncated CID"),
        (bytes([1, DAG_CBOR, SHA2_256, 0x81, 0x01]) + bytes(129), "truncated CID"),
        (bytes([2, DAG_CBOR, SHA2_256, 32]) + bytes(32), "unsupported CID version 2"),
        # a v0 multihash one byte short is read as a v1 header of version 0x12
        (bytes([SHA2_256, 32]) + bytes(31), "unsupported CID version 18"),
    ],
)
def test_cid_length_rejects_what_is_not_a_cid(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidFormat, match=message):
        cid_length(raw)


@BOUNDED
@given(data=st.binary(max_size=64), codec=st.sampled_from([DAG_CBOR, RAW]))
def test_parse_and_length_round_trip(data: bytes, codec: int) -> None:
    cid = cid_for(data, codec)
    raw = cid.to_bytes()
    assert parse_cid(raw) == cid
    assert cid_length(raw + data) == len(raw) == 36
    assert CID.decode(str(cid)) == cid


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x01",
        bytes([1, DAG_CBOR, SHA2_256, 32]) + bytes(31),
        bytes([2, DAG_CBOR, SHA2_256, 32]) + bytes(32),
        bytes([SHA2_256, 32]) + bytes(31),
        b"\xff" * 40,
    ],
)
def test_parse_cid_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(InvalidFormat, match="invalid CID"):
        parse_cid(raw)


@pytest.mark.parametrize(
    "extra", [b"\x00", b"xx", cid_for(b"abc").to_bytes()], ids=["zero", "text", "second-cid"]
)
def test_parse_cid_rejects_bytes_after_the_cid(extra: bytes) -> None:
    """A binary CID is the whole input, as multiformats' ``CID.decode`` requires in JS."""
    with pytest.raises(InvalidFormat):
        parse_cid(cid_for(b"abc").to_bytes() + extra)
    with pytest.raises(InvalidFormat):
        parse_cid(bytes([SHA2_256, 32]) + bytes(32) + extra)


@BOUNDED
@given(raw=st.binary(max_size=48))
def test_parsing_arbitrary_bytes_raises_only_invalid_format(raw: bytes) -> None:
    for parse in (parse_cid, cid_length):
        with contextlib.suppress(InvalidFormat):
            parse(raw)


def test_verify_block_accepts_the_matching_block() -> None:
    verify_block(cid_for(b"abc"), b"abc")
    verify_block(cid_for(b"abc", RAW), b"abc")
    verify_block(parse_cid(bytes([SHA2_256, 32]) + hashlib.sha256(b"abc").digest()), b"abc")


@pytest.mark.parametrize("data", [b"abd", b"ab", b"abc\x00", b""])
def test_verify_block_rejects_a_digest_mismatch(data: bytes) -> None:
    cid = cid_for(b"abc")
    with pytest.raises(InvalidFormat, match="block does not match its CID") as caught:
        verify_block(cid, data)
    assert str(cid) in caught.value.message


def test_verify_block_rejects_other_hash_functions() -> None:
    identity = parse_cid(bytes([1, RAW, 0x00, 3]) + b"abc")  # identity multihash
    with pytest.raises(InvalidFormat, match="unsupported hash function 0x0"):
        verify_block(identity, b"abc")
