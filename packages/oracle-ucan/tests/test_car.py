"""CARv1 archives (``oracle_ucan.car``, UCAN-4): encoding, strict decoding, size limits."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats.cid import CID

from oracle_ucan import dag_cbor, varint
from oracle_ucan.car import MAX_BLOCKS, MAX_CAR_BYTES, CarFile, decode_car, encode_car
from oracle_ucan.cid import RAW, cid_for, parse_cid
from oracle_ucan.errors import InvalidFormat

BOUNDED = settings(max_examples=200, deadline=None, derandomize=True, database=None)

# ucanto 10.4.6 ``archive()`` of a did:key → did:key delegation (seed 0..31 to seed 0x01*32,
# ``{with: "ixo:sandbox", can: "*"}``, ``exp`` 2000000000).
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


def block(value: object) -> tuple[CID, bytes]:
    data = dag_cbor.encode(value)
    return cid_for(data), data


def raw_section(cid_bytes: bytes, data: bytes) -> bytes:
    return varint.encode(len(cid_bytes) + len(data)) + cid_bytes + data


def header_section(header: object) -> bytes:
    data = dag_cbor.encode(header)
    return varint.encode(len(data)) + data


A = block({"a": 1})
B = block({"b": [1, 2]})
C = block("c")


def small_car() -> bytes:
    return encode_car([A[0]], [A, B, C])


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------


def test_round_trip_keeps_roots_and_blocks_in_order() -> None:
    car = decode_car(small_car())
    assert car == CarFile(roots=(A[0],), blocks={A[0]: A[1], B[0]: B[1], C[0]: C[1]})
    assert list(car.blocks) == [A[0], B[0], C[0]]


def test_layout_is_header_then_length_cid_data_sections() -> None:
    header = dag_cbor.encode({"roots": [A[0]], "version": 1})
    expected = (
        varint.encode(len(header))
        + header
        + raw_section(A[0].to_bytes(), A[1])
        + raw_section(B[0].to_bytes(), B[1])
    )
    assert encode_car([A[0]], [A, B]) == expected
    assert header == bytes.fromhex("a265726f6f747381d82a582500") + A[0].to_bytes() + bytes.fromhex(
        "6776657273696f6e01"
    )


def test_encode_writes_duplicates_once_in_first_place() -> None:
    assert encode_car([A[0]], [A, B, A, C, B]) == encode_car([A[0]], [A, B, C])


def test_ucanto_archive_decodes_and_re_encodes_byte_identically() -> None:
    car = decode_car(UCANTO_CAR)
    assert [str(root) for root in car.roots] == [
        "bafyreiheshwgrczxhqa5lg2t47hkt2bonmmqqyamznkn33snbbqjfivqta"
    ]
    assert [str(cid) for cid in car.blocks] == [
        "bafyreibl7bd2jksck3rdh37mnzgg2ttb3dfpiruzcqlf2kvyh5idlvpmo4",
        "bafyreiheshwgrczxhqa5lg2t47hkt2bonmmqqyamznkn33snbbqjfivqta",
    ]
    assert encode_car(car.roots, car.blocks.items()) == UCANTO_CAR


def test_multiple_roots_and_raw_blocks_are_accepted() -> None:
    raw = (cid_for(b"raw bytes", RAW), b"raw bytes")
    car = decode_car(encode_car([A[0], raw[0]], [raw, A]))
    assert car.roots == (A[0], raw[0])
    assert car.blocks == {raw[0]: raw[1], A[0]: A[1]}


def test_a_header_only_car_has_no_blocks() -> None:
    assert decode_car(encode_car([A[0]], [])) == CarFile(roots=(A[0],), blocks={})


def test_duplicate_sections_keep_the_first() -> None:
    data = header_section({"roots": [A[0]], "version": 1})
    data += raw_section(A[0].to_bytes(), A[1]) * 3
    assert decode_car(data).blocks == {A[0]: A[1]}


def test_a_cid_v0_block_is_accepted() -> None:
    v0 = parse_cid(A[0].hash.to_bytes())
    data = header_section({"roots": [v0], "version": 1}) + raw_section(v0.to_bytes(), A[1])
    assert decode_car(data).blocks == {v0: A[1]}


BLOCK_DATA = st.lists(st.binary(min_size=1, max_size=40), max_size=12)


@BOUNDED
@given(payloads=BLOCK_DATA, codec=st.sampled_from([RAW, 0x71]))
def test_round_trip_property(payloads: list[bytes], codec: int) -> None:
    blocks = [(cid_for(data, codec), data) for data in payloads]
    roots = [blocks[0][0]] if blocks else [A[0]]
    car = decode_car(encode_car(roots, blocks))
    assert car.roots == tuple(roots)
    assert car.blocks == dict(reversed(blocks))  # first occurrence wins
    assert list(car.blocks) == list(dict.fromkeys(cid for cid, _ in blocks))


# ---------------------------------------------------------------------------
# Header checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"roots": [A[0]], "version": 2}, "not a CARv1 header"),
        ({"roots": [A[0]], "version": 0}, "not a CARv1 header"),
        ({"roots": [A[0]], "version": "1"}, "not a CARv1 header"),
        ({"roots": [A[0]], "version": None}, "not a CARv1 header"),
        ({"roots": [A[0]], "version": True}, "not a CARv1 header"),
        ({"roots": [A[0]]}, "not a CARv1 header"),
        ({"version": 1}, "not a CARv1 header"),
        ({"roots": [A[0]], "version": 1, "extra": 0}, "not a CARv1 header"),
        ([A[0]], "not a CARv1 header"),
        (1, "not a CARv1 header"),
        ({"roots": [], "version": 1}, "no roots"),
        ({"roots": A[0], "version": 1}, "no roots"),
        ({"roots": [str(A[0])], "version": 1}, "no roots"),
        ({"roots": [A[0], b"x"], "version": 1}, "no roots"),
        ({"roots": None, "version": 1}, "no roots"),
    ],
    ids=[
        "version-2",
        "version-0",
        "version-text",
        "version-null",
        "version-true",
        "no-version",
        "no-roots-key",
        "extra-key",
        "list",
        "integer",
        "empty-roots",
        "roots-not-list",
        "root-as-text",
        "root-as-bytes",
        "roots-null",
    ],
)
def test_header_must_be_carv1_with_roots(header: object, message: str) -> None:
    data = header_section(header) + raw_section(A[0].to_bytes(), A[1])
    with pytest.raises(InvalidFormat, match=message):
        decode_car(data)


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        (b"", "truncated varint"),
        (b"\x00", "invalid CAR header length"),
        (varint.encode(1025) + bytes(1025), "invalid CAR header length"),
        (varint.encode(100) + bytes(10), "invalid CAR header length"),
        (bytes.fromhex("ffffffffffffffff7f"), "invalid CAR header length"),
        (b"\xff" * 10, "longer than 9 bytes"),
        (b"\x80\x00", "not minimally encoded"),
    ],
)
def test_header_length_is_checked(prefix: bytes, message: str) -> None:
    with pytest.raises(InvalidFormat, match=message):
        decode_car(prefix)


def test_header_must_be_canonical_dag_cbor() -> None:
    canonical = dag_cbor.encode({"roots": [A[0]], "version": 1})
    unsorted = bytes.fromhex("a26776657273696f6e01") + canonical[1:-9]  # version first
    assert sorted(unsorted) == sorted(canonical)
    with pytest.raises(InvalidFormat):
        decode_car(varint.encode(len(unsorted)) + unsorted)
    non_minimal = canonical[:-1] + b"\x18\x01"  # version as a two-byte integer
    with pytest.raises(InvalidFormat):
        decode_car(varint.encode(len(non_minimal)) + non_minimal)


# ---------------------------------------------------------------------------
# Block checks
# ---------------------------------------------------------------------------


def test_a_block_that_does_not_match_its_cid_is_refused() -> None:
    data = bytearray(small_car())
    data[-1] ^= 0x01  # last byte of the last block's data
    with pytest.raises(InvalidFormat, match="does not match its CID"):
        decode_car(bytes(data))
    swapped = header_section({"roots": [A[0]], "version": 1}) + raw_section(A[0].to_bytes(), B[1])
    with pytest.raises(InvalidFormat, match="does not match its CID"):
        decode_car(swapped)


def test_a_block_with_another_hash_function_is_refused() -> None:
    identity = bytes([1, RAW, 0x00, 3]) + b"abc"
    data = header_section({"roots": [A[0]], "version": 1}) + raw_section(identity, b"abc")
    with pytest.raises(InvalidFormat, match="unsupported hash function"):
        decode_car(data)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (b"\x00", "truncated CAR block"),
        (varint.encode(37) + A[0].to_bytes(), "truncated CAR block"),
        (varint.encode(36) + A[0].to_bytes(), "no data"),
        (varint.encode(10) + A[0].to_bytes() + A[1], "no data"),
        (varint.encode(40) + bytes([2, 0x71, 0x12, 32]) + bytes(36), "unsupported CID version"),
        (varint.encode(5) + b"\x01\x71\x12\x20\x00", "truncated CID"),
        (b"\x80", "truncated varint"),
        (b"\xff" * 9 + b"\x01", "longer than 9 bytes"),
        (bytes.fromhex("ffffffffffffffff7f"), "truncated CAR block"),
    ],
)
def test_malformed_sections_are_refused(section: bytes, message: str) -> None:
    data = header_section({"roots": [A[0]], "version": 1}) + section
    with pytest.raises(InvalidFormat, match=message):
        decode_car(data)


def test_every_truncation_fails_or_keeps_whole_leading_blocks() -> None:
    full = small_car()
    everything = list(decode_car(full).blocks.items())
    for cut in range(len(full)):
        try:
            car = decode_car(full[:cut])
        except InvalidFormat:
            continue
        assert list(car.blocks.items()) == everything[: len(car.blocks)]
        assert len(car.blocks) < len(everything)


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------


def test_the_documented_limits() -> None:
    assert MAX_CAR_BYTES == 256 * 1024
    assert MAX_BLOCKS == 512


def test_oversized_input_is_refused_before_parsing() -> None:
    # The first byte would be an "invalid CAR header length" if parsing had started.
    oversized = b"\x00" * (MAX_CAR_BYTES + 1)
    with pytest.raises(InvalidFormat, match=f"the limit is {MAX_CAR_BYTES}"):
        decode_car(oversized)
    ten_megabytes = small_car() + b"\xff" * (10 * 1024 * 1024)
    with pytest.raises(InvalidFormat, match=f"CAR is {len(ten_megabytes)} bytes") as caught:
        decode_car(ten_megabytes)
    assert str(MAX_CAR_BYTES) in caught.value.message


def padded_car(size: int) -> bytes:
    """A valid CAR of exactly ``size`` bytes: one raw block filling the rest."""
    head = header_section({"roots": [A[0]], "version": 1})
    cid_bytes_len = 36
    for varint_len in range(1, 5):
        data_len = size - len(head) - varint_len - cid_bytes_len
        if len(varint.encode(cid_bytes_len + data_len)) == varint_len:
            payload = b"\x07" * data_len
            return head + raw_section(cid_for(payload, RAW).to_bytes(), payload)
    raise AssertionError("no padding fits")


def test_a_car_of_exactly_the_limit_is_accepted() -> None:
    exact = padded_car(MAX_CAR_BYTES)
    assert len(exact) == MAX_CAR_BYTES
    assert len(decode_car(exact).blocks) == 1
    with pytest.raises(InvalidFormat, match="limit"):
        decode_car(padded_car(MAX_CAR_BYTES + 1))


def test_the_size_limit_can_be_lowered() -> None:
    car = small_car()
    assert decode_car(car, max_bytes=len(car)).blocks
    with pytest.raises(InvalidFormat, match=f"the limit is {len(car) - 1}"):
        decode_car(car, max_bytes=len(car) - 1)


def many_blocks(count: int) -> bytes:
    blocks = [(cid_for(n.to_bytes(2, "big"), RAW), n.to_bytes(2, "big")) for n in range(count)]
    return encode_car([blocks[0][0]], blocks)


def test_max_blocks_is_accepted_and_one_more_is_refused() -> None:
    assert len(decode_car(many_blocks(MAX_BLOCKS)).blocks) == MAX_BLOCKS
    with pytest.raises(InvalidFormat, match=f"more than {MAX_BLOCKS} blocks"):
        decode_car(many_blocks(MAX_BLOCKS + 1))


@BOUNDED
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_invalid_format(data: bytes) -> None:
    with contextlib.suppress(InvalidFormat):  # any other error escapes and fails
        decode_car(data)


@BOUNDED
@given(prefix_len=st.integers(0, 200), garbage=st.binary(min_size=1, max_size=64))
def test_valid_prefix_with_garbage_raises_only_invalid_format(
    prefix_len: int, garbage: bytes
) -> None:
    full = small_car()
    with contextlib.suppress(InvalidFormat):
        decode_car(full[: prefix_len % len(full)] + garbage)
