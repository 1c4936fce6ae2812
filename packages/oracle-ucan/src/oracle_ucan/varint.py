"""Unsigned LEB128 varints, as multiformats and CARv1 use them."""

from __future__ import annotations

from oracle_ucan.errors import InvalidFormat

__all__ = ["decode", "encode"]

MAX_BYTES = 9  # 63 bits, the multiformats limit


def encode(value: int) -> bytes:
    """Encode a non-negative integer."""
    if value < 0 or value >= 1 << 63:
        raise InvalidFormat(f"varint out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode(data: bytes | memoryview, offset: int = 0) -> tuple[int, int]:
    """Decode the varint at ``offset``; returns ``(value, offset after it)``.

    Raises:
        InvalidFormat: truncated, longer than 9 bytes, or not minimally encoded.
    """
    try:  # the common one- and two-byte cases (CAR sections, CIDs, signature headers)
        first = data[offset]
        if first < 0x80:
            return first, offset + 1
        second = data[offset + 1]
        if 0 < second < 0x80:
            return (first & 0x7F) | (second << 7), offset + 2
    except IndexError:
        pass  # truncated: reported below
    end = len(data)
    value = 0
    shift = 0
    for index in range(offset, min(offset + MAX_BYTES, end)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and index > offset:
                raise InvalidFormat("varint is not minimally encoded")
            return value, index + 1
        shift += 7
    if end - offset >= MAX_BYTES:
        raise InvalidFormat("varint longer than 9 bytes")
    raise InvalidFormat("truncated varint")
