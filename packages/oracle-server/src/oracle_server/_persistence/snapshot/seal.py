"""The sealed blob and its payload (formats in the package docstring): keys, sealing,
opening and checking, applying a delta's pages."""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from oracle_server._persistence.snapshot.records import Kind, SnapshotError

__all__ = [
    "KIND_BYTE",
    "MAGIC",
    "NO_PARENT",
    "PAYLOAD_HEAD",
    "U32",
    "VERSION",
    "Payload",
    "apply_delta",
    "backup_key",
    "check_key",
    "key_id",
    "open_blob",
    "seal",
]

MAGIC = b"OSNP"
VERSION = 1
KIND_BYTE: dict[Kind, bytes] = {"full": b"F", "delta": b"D"}
KIND_OF_BYTE: dict[bytes, Kind] = {value: kind for kind, value in KIND_BYTE.items()}
SEAL_HEAD = struct.Struct(">4sBc12s")  # magic, version, kind, nonce
PAYLOAD_HEAD = struct.Struct(">4sBcII32s32s")  # ... page_size, page_count, sha, parent sha
U32 = struct.Struct(">I")
TAG_SIZE = 16
HKDF_SALT = b"oracle-server/matrix-snapshot/v1"
KEY_ID_LABEL = b"oracle-server/matrix-snapshot/key-id"
NO_PARENT = bytes(32)
MIN_SECRET = 16


def backup_key(secret: bytes, storage_key: str) -> bytes:
    """The 32-byte sealing key of one storage key, derived by HKDF-SHA256 from ``secret``.

    Args:
        secret: The oracle's backup secret (at least 16 bytes, high entropy).
        storage_key: The user's storage key (SRV-60).

    Raises:
        ValueError: when ``secret`` is shorter than 16 bytes or ``storage_key`` is empty.
    """
    if len(secret) < MIN_SECRET:
        raise ValueError(
            f"snapshot.weak_secret: the backup secret has {len(secret)} bytes; "
            f"pass at least {MIN_SECRET} random bytes"
        )
    if not storage_key:
        raise ValueError("snapshot.storage_key_required: pass the user's storage key")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=storage_key.encode())
    return hkdf.derive(secret)


@dataclass(frozen=True)
class Payload:
    kind: Kind
    page_size: int
    page_count: int
    sha256: bytes
    parent: bytes
    body: memoryview  # full: the file
    pages: tuple[tuple[int, memoryview], ...]  # delta: (1-based page number, bytes)


def check_key(key: bytes) -> None:
    if len(key) != 32:
        raise ValueError(
            f"snapshot.bad_key: the key has {len(key)} bytes; derive it with backup_key()"
        )


def key_id(key: bytes) -> str:
    return hashlib.blake2b(KEY_ID_LABEL, key=key, digest_size=8).hexdigest()


def seal(kind: Kind, parts: Sequence[bytes | memoryview], *, key: bytes, storage_key: str) -> bytes:
    compressor = zlib.compressobj(6)
    compressed = b"".join([*(compressor.compress(part) for part in parts), compressor.flush()])
    nonce = os.urandom(12)
    head = SEAL_HEAD.pack(MAGIC, VERSION, KIND_BYTE[kind], nonce)
    return head + AESGCM(key).encrypt(nonce, compressed, head[:6] + storage_key.encode())


def open_blob(blob: bytes, *, key: bytes, storage_key: str) -> Payload:
    if len(blob) < SEAL_HEAD.size + TAG_SIZE:
        raise SnapshotError("snapshot.bad_format", f"a blob of {len(blob)} bytes is too short")
    magic, version, kind_byte, nonce = SEAL_HEAD.unpack_from(blob)
    kind = KIND_OF_BYTE.get(kind_byte)
    if magic != MAGIC or kind is None:
        raise SnapshotError("snapshot.bad_format", "not a snapshot blob")
    if version != VERSION:
        raise SnapshotError(
            "snapshot.bad_format",
            f"blob version {version} is not supported (only {VERSION}); upgrade the server",
        )
    aad = blob[:6] + storage_key.encode()
    try:
        compressed = AESGCM(key).decrypt(nonce, blob[SEAL_HEAD.size :], aad)
    except InvalidTag:
        raise SnapshotError(
            "snapshot.decrypt_failed",
            "the blob does not open with this key and storage key (wrong key, another "
            "user's blob, or tampered or truncated)",
        ) from None
    try:
        plain = memoryview(zlib.decompress(compressed))
    except zlib.error as exc:
        raise SnapshotError("snapshot.bad_format", f"the payload does not inflate: {exc}") from exc
    return _parse_payload(plain, kind)


def _parse_payload(plain: memoryview, kind: Kind) -> Payload:
    def bad(why: str) -> SnapshotError:
        return SnapshotError("snapshot.bad_format", why)

    if len(plain) < PAYLOAD_HEAD.size:
        raise bad("the payload is shorter than its header")
    magic, version, kind_byte, page_size, page_count, sha, parent = PAYLOAD_HEAD.unpack_from(plain)
    if magic != MAGIC or version != VERSION or KIND_OF_BYTE.get(kind_byte) != kind:
        raise bad("the payload header does not match the blob")
    if not 512 <= page_size <= 65536 or page_size & (page_size - 1) or page_count < 1:
        raise bad(f"page size {page_size} or page count {page_count} is impossible")
    body = plain[PAYLOAD_HEAD.size :]
    if kind == "full":
        if len(body) != page_size * page_count:
            raise bad("the full body does not hold page_count pages")
        return Payload(kind, page_size, page_count, sha, parent, body, ())
    if len(body) < U32.size:
        raise bad("the delta has no page count")
    (count,) = U32.unpack_from(body)
    if len(body) != U32.size + count * (U32.size + page_size):
        raise bad("the delta body does not hold its pages")
    pages: list[tuple[int, memoryview]] = []
    at = U32.size
    for _ in range(count):
        (number,) = U32.unpack_from(body, at)
        at += U32.size
        if not (pages[-1][0] if pages else 0) < number <= page_count:
            raise bad(f"page {number} is out of order or past the page count")
        pages.append((number, body[at : at + page_size]))
        at += page_size
    return Payload(kind, page_size, page_count, sha, parent, body[:0], tuple(pages))


def apply_delta(state: bytearray, payload: Payload) -> None:
    size = payload.page_size
    end = payload.page_count * size
    if len(state) > end:
        del state[end:]
    else:
        state.extend(bytes(end - len(state)))
    for number, page in payload.pages:
        state[(number - 1) * size : number * size] = page
