"""CARv1 archives: ``varint(len(header)) ‖ header``, then ``varint(len) ‖ cid ‖ data`` blocks.

Input is size-checked before any parsing (``MAX_CAR_BYTES``), every block is checked
against its CID, and only this package's ``InvalidFormat`` is ever raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multiformats.cid import CID

from oracle_ucan import dag_cbor, varint
from oracle_ucan.cid import cid_length, parse_cid, verify_block
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


def _single_root_header(header: bytes) -> dict[str, object] | None:
    if (
        len(header) == len(_HEADER_HEAD) + 36 + len(_HEADER_TAIL)
        and header.startswith(_HEADER_HEAD)
        and header.endswith(_HEADER_TAIL)
    ):
        return {"roots": [parse_cid(header[len(_HEADER_HEAD) : -len(_HEADER_TAIL)])], "version": 1}
    return None


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
    if len(data) > max_bytes:
        raise InvalidFormat(f"CAR is {len(data)} bytes; the limit is {max_bytes}")
    view = memoryview(data)
    header_len, pos = varint.decode(view, 0)
    if header_len == 0 or header_len > _MAX_HEADER_BYTES or pos + header_len > len(data):
        raise InvalidFormat("invalid CAR header length")
    header_bytes = bytes(view[pos : pos + header_len])
    header = _single_root_header(header_bytes) or dag_cbor.decode(header_bytes)
    pos += header_len
    version = header.get("version") if isinstance(header, dict) else None
    if type(version) is not int or version != 1 or set(header) != {"roots", "version"}:
        raise InvalidFormat("not a CARv1 header")
    roots = header["roots"]
    if not isinstance(roots, list) or not roots or not all(isinstance(r, CID) for r in roots):
        raise InvalidFormat("CAR header has no roots")
    blocks: dict[CID, bytes] = {}
    while pos < len(data):
        if len(blocks) >= MAX_BLOCKS:
            raise InvalidFormat(f"CAR has more than {MAX_BLOCKS} blocks")
        section_len, pos = varint.decode(view, pos)
        end = pos + section_len
        if section_len == 0 or end > len(data):
            raise InvalidFormat("truncated CAR block")
        size = cid_length(view, pos)
        if size >= section_len:
            raise InvalidFormat("CAR block has no data")
        cid = parse_cid(bytes(view[pos : pos + size]))
        block = bytes(view[pos + size : end])
        verify_block(cid, block)
        blocks.setdefault(cid, block)
        pos = end
    return CarFile(roots=tuple(roots), blocks=blocks)
