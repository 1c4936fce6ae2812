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
    end = len(data)
    if offset < end and data[offset] < 0x80:  # the common one-byte case
        return data[offset], offset + 1
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
