"""CIDs through py-multiformats: sha2-256 over dag-cbor (0x71) or raw (0x55) blocks."""

from __future__ import annotations

import hashlib

from multiformats import MultiformatsError
from multiformats.cid import CID
from multiformats.multihash import Multihash

from oracle_ucan import varint
from oracle_ucan.errors import InvalidFormat

__all__ = [
    "CID",
    "DAG_CBOR",
    "RAW",
    "SHA2_256",
    "V1_SHA256_PREFIXES",
    "cid_for",
    "cid_length",
    "parse_cid",
    "verify_block",
]

DAG_CBOR = 0x71
RAW = 0x55
SHA2_256 = 0x12
_SHA2_256_PREFIX = bytes([SHA2_256, 32])
V1_SHA256_PREFIXES = frozenset({bytes([1, DAG_CBOR, SHA2_256, 32]), bytes([1, RAW, SHA2_256, 32])})
"""The first 4 bytes of a 36-byte CIDv1 of a dag-cbor or raw block hashed with sha2-256."""


def cid_for(data: bytes, codec: int = DAG_CBOR) -> CID:
    """The CIDv1 of a block (sha2-256)."""
    digest = Multihash.from_bytes(_SHA2_256_PREFIX + hashlib.sha256(data).digest())
    return CID(1, codec, digest)


def cid_length(data: bytes | memoryview, offset: int = 0) -> int:
    """Length in bytes of the binary CID starting at ``offset`` (v0 or v1).

    Raises:
        InvalidFormat: not a CID.
    """
    prefix = bytes(data[offset : offset + 4])
    if prefix in V1_SHA256_PREFIXES and len(data) - offset >= 36:
        return 36  # CIDv1, dag-cbor or raw, sha2-256: what every UCAN archive holds
    if len(data) - offset >= 34 and data[offset] == SHA2_256 and data[offset + 1] == 32:
        return 34  # CIDv0: a bare sha2-256 multihash
    version, pos = varint.decode(data, offset)
    if version != 1:
        raise InvalidFormat(f"unsupported CID version {version}")
    _, pos = varint.decode(data, pos)  # codec
    _, pos = varint.decode(data, pos)  # hash function
    size, pos = varint.decode(data, pos)
    if size > 128 or pos + size > len(data):
        raise InvalidFormat("truncated CID")
    return pos + size - offset


def parse_cid(data: bytes) -> CID:
    """A CID from its binary form.

    Raises:
        InvalidFormat: not a CID.
    """
    if type(data) is bytes and len(data) == 36 and data[:4] in V1_SHA256_PREFIXES:
        # The CID of every UCAN block: its 4-byte prefix announces exactly 32 more
        # bytes, so it is valid and has nothing after it; no round trip is needed.
        return CID.from_bytes(data)
    try:
        cid = CID.from_bytes(data)
    except (MultiformatsError, ValueError, TypeError) as exc:
        raise InvalidFormat(f"invalid CID: {exc}") from exc
    # py-multiformats ignores trailing bytes; a padded link would give a block a second
    # CID with the same meaning (and signature), defeating CID-keyed replay protection.
    if cid.to_bytes() != bytes(data):
        raise InvalidFormat("bytes after the CID")
    return cid


def verify_block(cid: CID, data: bytes) -> None:
    """Check that ``data`` hashes to ``cid``.

    Raises:
        InvalidFormat: unsupported hash function or a digest mismatch.
    """
    digest = cid.hash
    if digest.code != SHA2_256:
        raise InvalidFormat(f"unsupported hash function 0x{digest.code:x}")
    if hashlib.sha256(data).digest() != digest.digest:
        raise InvalidFormat(f"block does not match its CID {cid}")
