"""CARv1 archives: ``varint(len(header)) ‖ header``, then ``varint(len) ‖ cid ‖ data`` blocks.

Input is size-checked before any parsing (``MAX_CAR_BYTES``), every block is checked
against its CID, and only this package's ``InvalidFormat`` is ever raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import sha256

from multiformats.cid import CID

from oracle_ucan import dag_cbor, varint
from oracle_ucan.cid import V1_SHA256_PREFIXES, cid_length, parse_cid, verify_block
from oracle_ucan.errors import InvalidFormat

__all__ = ["MAX_BLOCKS", "MAX_CAR_BYTES", "CarFile", "decode_car", "encode_car"]

MAX_CAR_BYTES = 256 * 1024
"""Largest CAR accepted (256 KiB): a long delegation chain is a few KiB."""
MAX_BLOCKS = 512
"""Most blocks accepted in one CAR."""
_MAX_HEADER_BYTES = 1024


@dataclass(frozen=True)
class CarFile:
    """A decoded CAR: its roots and its blocks by CID (first occurrence wins)."""

    roots: tuple[CID, ...]
    blocks: dict[CID, bytes]


# The DAG-CBOR of {"roots": [<36-byte CID>], "version": 1}, split around the CID: the
# header of every ucanto archive, parsed without a general decode.
_HEADER_HEAD = bytes.fromhex("a265726f6f747381d82a582500")
_HEADER_TAIL = bytes.fromhex("6776657273696f6e01")
_SINGLE_ROOT_HEADER_LEN = len(_HEADER_HEAD) + 36 + len(_HEADER_TAIL)


def _header_roots(header: bytes) -> tuple[CID, ...]:
    """The roots of a CARv1 header; the usual single-root header is read directly."""
    if (
        len(header) == _SINGLE_ROOT_HEADER_LEN
        and header.startswith(_HEADER_HEAD)
        and header.endswith(_HEADER_TAIL)
    ):
        return (parse_cid(header[len(_HEADER_HEAD) : -len(_HEADER_TAIL)]),)
    header_map = dag_cbor.decode(header)
    version = header_map.get("version") if isinstance(header_map, dict) else None
    if type(version) is not int or version != 1 or set(header_map) != {"roots", "version"}:
        raise InvalidFormat("not a CARv1 header")
    roots = header_map["roots"]
    if not isinstance(roots, list) or not roots or not all(isinstance(r, CID) for r in roots):
        raise InvalidFormat("CAR header has no roots")
    return tuple(roots)


def encode_car(roots: Iterable[CID], blocks: Iterable[tuple[CID, bytes]]) -> bytes:
    """A CARv1 archive; blocks are written in the order given, duplicates once."""
    header = dag_cbor.encode({"roots": list(roots), "version": 1})
    out = bytearray(varint.encode(len(header)))
    out += header
    seen: set[bytes] = set()
    for cid, data in blocks:
        raw = cid.to_bytes()
        if raw in seen:
            continue
        seen.add(raw)
        out += varint.encode(len(raw) + len(data))
        out += raw
        out += data
    return bytes(out)


def decode_car(data: bytes, *, max_bytes: int = MAX_CAR_BYTES) -> CarFile:
    """Decode and verify a CARv1 archive.

    Raises:
        InvalidFormat: oversized, truncated, not CARv1, or a block that does not match
            its CID.
    """
    roots, blocks = decode_car_parts(data, max_bytes=max_bytes)
    return CarFile(roots=roots, blocks=blocks)


def decode_car_parts(
    data: bytes, *, max_bytes: int = MAX_CAR_BYTES
) -> tuple[tuple[CID, ...], dict[CID, bytes]]:
    """``decode_car`` as a ``(roots, blocks)`` pair, without building the ``CarFile``.

    Raises:
        InvalidFormat: as ``decode_car``.
    """
    if len(data) > max_bytes:
        raise InvalidFormat(f"CAR is {len(data)} bytes; the limit is {max_bytes}")
    # Slices of ``bytes`` are single copies; memoryview slices would be copied again.
    if type(data) is not bytes:
        data = bytes(data)
    size = len(data)
    header_len, pos = varint.decode(data, 0)
    if header_len == 0 or header_len > _MAX_HEADER_BYTES or pos + header_len > size:
        raise InvalidFormat("invalid CAR header length")
    roots = _header_roots(data[pos : pos + header_len])
    pos += header_len
    blocks: dict[CID, bytes] = {}
    while pos < size:
        if len(blocks) >= MAX_BLOCKS:
            raise InvalidFormat(f"CAR has more than {MAX_BLOCKS} blocks")
        section_len, pos = varint.decode(data, pos)
        end = pos + section_len
        if section_len == 0 or end > size:
            raise InvalidFormat("truncated CAR block")
        if section_len > 36 and data[pos : pos + 4] in V1_SHA256_PREFIXES:
            # The block of every UCAN archive: a 36-byte CIDv1 (always valid, nothing
            # after it) whose last 32 bytes are the sha2-256 digest, compared directly.
            cid = CID.from_bytes(data[pos : pos + 36])
            block = data[pos + 36 : end]
            if not data.startswith(sha256(block).digest(), pos + 4):
                raise InvalidFormat(f"block does not match its CID {cid}")
        else:
            cid_size = cid_length(data, pos)
            if cid_size >= section_len:
                raise InvalidFormat("CAR block has no data")
            cid = parse_cid(data[pos : pos + cid_size])
            block = data[pos + cid_size : end]
            verify_block(cid, block)
        blocks.setdefault(cid, block)
        pos = end
    return roots, blocks
