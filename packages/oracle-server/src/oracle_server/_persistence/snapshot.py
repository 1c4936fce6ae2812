"""Incremental, sealed snapshots of one per-user SQLite file, for the Matrix backup (SRV-61/63).

Transport-free: this module turns a database into opaque blobs and blobs back into a
database; uploading, downloading and room state belong to the caller.

Snapshots always go through SQLite's online backup API, never a file copy: LangGraph's
savers keep the file in WAL mode, so the main file alone can miss committed data. The
backup copies pages byte for byte, so a page number names the same page from one snapshot
to the next, and a *delta* is just the pages whose content changed since the last uploaded
snapshot, plus the new page count (the file may shrink after ``VACUUM`` or auto-vacuum).
To find those pages without keeping the old file, a small sidecar *index* (JSON, path
chosen by the caller) describes the last uploaded state: page size and count, a
BLAKE2b-128 digest per page, the file's SHA-256 and the *chain* of blobs a restore needs
(one full blob, then the deltas since). A missing, unreadable or foreign index makes the
next upload a full one.

A chain never grows past ``max_chain`` deltas, nor past ``max_chain_ratio`` times the size
of its full blob in cumulated delta bytes: a restore downloads at most
``1 + max_chain_ratio`` times a full blob, and the fulls that restart chains add about
``1 / max_chain_ratio`` of the delta bytes again, amortised (``benchmarks/backup_delta.py``:
deltas 0.26x, all uploads 0.56x the bytes LangGraph wrote).

Sealed blob, version 1 (what the transport uploads; integers big-endian)::

    offset  size   field
    0       4      magic b"OSNP"
    4       1      version, 1
    5       1      kind, b"F" (full) or b"D" (delta)
    6       12     AES-GCM nonce, random per blob
    18      n+16   AES-256-GCM(zlib(payload)), 16-byte tag at the end

    key = HKDF-SHA256(secret, salt=b"oracle-server/matrix-snapshot/v1",
                      info=UTF-8 storage key)                      -- backup_key()
    AAD = blob[0:6] + UTF-8 storage key

The key and the AAD both bind the storage key, so one user's blob never opens as another
user's, and the AAD binds the kind, so a full cannot pass for a delta or the reverse.

Payload, version 1 (the plaintext inside the seal)::

    offset  size   field
    0       4      magic b"OSNP"
    4       1      version, 1
    5       1      kind, same byte as the blob's
    6       4      page_size
    10      4      page_count of the resulting file
    14      32     SHA-256 of the resulting file
    46      32     SHA-256 of the file the delta applies to (zeros in a full)
    78      ...    full:  the file, page_count * page_size bytes
                   delta: u32 n, then n times (u32 page number, 1-based and ascending,
                          page_size bytes); pages past page_count are cut off

Legacy raw-gzip backups (SRV-61's first format) are not accepted: nothing in this runtime
ever wrote them, and they would be the one unauthenticated input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import struct
import tempfile
import zlib
from collections.abc import Sequence
from contextlib import closing, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "ChainLink",
    "Prepared",
    "SnapshotError",
    "SnapshotIndex",
    "backup_key",
    "commit_upload",
    "prepare_upload",
    "read_chain",
    "restore",
]

Kind = Literal["full", "delta"]
_T = TypeVar("_T")

_MAGIC = b"OSNP"
_VERSION = 1
_KIND_BYTE: dict[Kind, bytes] = {"full": b"F", "delta": b"D"}
_KIND_OF_BYTE: dict[bytes, Kind] = {value: kind for kind, value in _KIND_BYTE.items()}
_SEAL_HEAD = struct.Struct(">4sBc12s")  # magic, version, kind, nonce
_PAYLOAD_HEAD = struct.Struct(">4sBcII32s32s")  # ... page_size, page_count, sha, parent sha
_U32 = struct.Struct(">I")
_TAG_SIZE = 16
_HKDF_SALT = b"oracle-server/matrix-snapshot/v1"
_KEY_ID_LABEL = b"oracle-server/matrix-snapshot/key-id"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DIGEST_SIZE = 16
_NO_PARENT = bytes(32)
_INDEX_FORMAT = "oracle-server/matrix-snapshot-index"
_INDEX_VERSION = 1
_MIN_SECRET = 16


class SnapshotError(Exception):
    """A snapshot could not be taken, or blobs could not be restored into a database.

    Attributes:
        code: Stable reason. Taking a snapshot: ``snapshot.source_unreadable``,
            ``snapshot.stale_index``. Restoring: ``snapshot.decrypt_failed``,
            ``snapshot.bad_format``, ``snapshot.chain_broken``, ``snapshot.hash_mismatch``
            and ``snapshot.integrity_failed`` (the blobs will not do: permanent), or
            ``snapshot.write_failed`` (the local disk: worth retrying).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass(frozen=True)
class ChainLink:
    """One uploaded blob of the current chain.

    Attributes:
        blob_id: The caller's id for the uploaded blob (for example its mxc URI).
        kind: ``full`` for the chain's first blob, ``delta`` for the others.
        sha256: Hex SHA-256 of the database once this blob is applied.
        size: Sealed size in bytes.
    """

    blob_id: str
    kind: Kind
    sha256: str
    size: int


@dataclass(frozen=True)
class SnapshotIndex:
    """The last uploaded state of one database, as the sidecar index keeps it.

    Attributes:
        storage_key: The storage key the blobs were sealed for.
        key_id: Fingerprint of the sealing key; another key makes the next upload full.
        page_size: SQLite page size in bytes.
        page_count: Pages in the file.
        sha256: Hex SHA-256 of the file.
        page_digests: BLAKE2b-128 of every page, concatenated in page order.
        chain: The blobs a restore needs, full first.
    """

    storage_key: str
    key_id: str
    page_size: int
    page_count: int
    sha256: str
    page_digests: bytes = field(repr=False)
    chain: tuple[ChainLink, ...]


@dataclass(frozen=True)
class Prepared:
    """A blob ready to upload, and what to record once the upload succeeded.

    Attributes:
        kind: ``full`` or ``delta``.
        blob: The sealed blob, opaque to the transport.
        sha256: Hex SHA-256 of the database state the blob leads to.
        raw_size: Payload bytes before compression and sealing.
        index: The state after this upload; its ``chain`` holds the links *before* this
            blob (empty for a full), and :func:`commit_upload` appends this blob's link.
    """

    kind: Kind
    blob: bytes = field(repr=False)
    sha256: str
    raw_size: int
    index: SnapshotIndex


def backup_key(secret: bytes, storage_key: str) -> bytes:
    """The 32-byte sealing key of one storage key, derived by HKDF-SHA256 from ``secret``.

    Args:
        secret: The oracle's backup secret (at least 16 bytes, high entropy).
        storage_key: The user's storage key (SRV-60).

    Raises:
        ValueError: when ``secret`` is shorter than 16 bytes or ``storage_key`` is empty.
    """
    if len(secret) < _MIN_SECRET:
        raise ValueError(
            f"snapshot.weak_secret: the backup secret has {len(secret)} bytes; "
            f"pass at least {_MIN_SECRET} random bytes"
        )
    if not storage_key:
        raise ValueError("snapshot.storage_key_required: pass the user's storage key")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=storage_key.encode())
    return hkdf.derive(secret)


def prepare_upload(
    db_path: Path,
    index_path: Path,
    *,
    key: bytes,
    storage_key: str,
    max_chain: int = 32,
    max_chain_ratio: float = 1.0,
) -> Prepared | None:
    """Snapshot ``db_path`` and seal what changed since the last upload.

    Blocking: run it in a thread. The snapshot goes through a temporary file next to the
    index, removed before returning; the index itself is not touched.

    Args:
        db_path: The live database; other connections may keep writing meanwhile.
        index_path: The sidecar index of the last uploaded state.
        key: From :func:`backup_key`.
        storage_key: The user's storage key.
        max_chain: Most deltas after a full blob.
        max_chain_ratio: Most cumulated delta bytes after a full blob, as a multiple of
            that full blob's size.

    Returns:
        ``None`` when the database equals the last uploaded state; else a full blob when
        there is no usable index, the page size changed or the chain is at its limits,
        and a delta otherwise.

    Raises:
        SnapshotError: ``snapshot.source_unreadable`` when ``db_path`` is missing or not
            a database.
    """
    _check_key(key)
    previous = _load_index(index_path, storage_key=storage_key, key=key)
    data = _snapshot(db_path, scratch_dir=index_path.parent)
    page_size = _page_size_of(data)
    if page_size is None or len(data) % page_size:
        raise SnapshotError(
            "snapshot.source_unreadable", f"{db_path} did not snapshot to a SQLite file"
        )
    sha = hashlib.sha256(data).hexdigest()
    if previous is not None and previous.sha256 == sha:
        return None
    view = memoryview(data)
    index = SnapshotIndex(
        storage_key=storage_key,
        key_id=_key_id(key),
        page_size=page_size,
        page_count=len(data) // page_size,
        sha256=sha,
        page_digests=_page_digests(data, page_size),
        chain=(),
    )
    if previous is not None and previous.page_size == page_size:
        delta = _prepare_delta(
            previous, index, view, key=key, max_chain=max_chain, max_chain_ratio=max_chain_ratio
        )
        if delta is not None:
            return delta
    head = _PAYLOAD_HEAD.pack(
        _MAGIC,
        _VERSION,
        _KIND_BYTE["full"],
        page_size,
        index.page_count,
        bytes.fromhex(sha),
        _NO_PARENT,
    )
    blob = _seal("full", [head, data], key=key, storage_key=storage_key)
    return Prepared("full", blob, sha, len(head) + len(data), index)


def commit_upload(index_path: Path, prepared: Prepared, *, blob_id: str) -> tuple[ChainLink, ...]:
    """Record, once the caller's upload succeeded, that ``prepared`` is the last upload.

    The index is replaced atomically (temporary file, fsync, rename).

    Args:
        index_path: The sidecar index given to :func:`prepare_upload`.
        prepared: What :func:`prepare_upload` returned.
        blob_id: The transport's id of the uploaded blob.

    Returns:
        The links this upload superseded: after a full, the whole previous chain (the
        caller may delete or redact those blobs); after a delta, nothing.

    Raises:
        SnapshotError: ``snapshot.stale_index`` when another upload was committed since a
            delta was prepared; the uploaded delta is useless, prepare again.
        ValueError: when ``blob_id`` is empty.
    """
    if not blob_id:
        raise ValueError("snapshot.blob_id_required: pass the id the transport gave the blob")
    current = _read_index(index_path)
    if prepared.kind == "delta" and (current is None or current.chain != prepared.index.chain):
        raise SnapshotError(
            "snapshot.stale_index",
            f"{index_path} changed since this delta was prepared; prepare the upload again "
            f"and delete the blob {blob_id}",
        )
    link = ChainLink(blob_id, prepared.kind, prepared.sha256, len(prepared.blob))
    _write_index(index_path, replace(prepared.index, chain=(*prepared.index.chain, link)))
    if prepared.kind == "delta" or current is None:
        return ()
    return tuple(old for old in current.chain if old.blob_id != blob_id)


def read_chain(index_path: Path) -> tuple[ChainLink, ...]:
    """The blobs a restore of the last uploaded state needs, full first.

    Returns:
        The chain, empty when the index is missing or unreadable.
    """
    index = _read_index(index_path)
    return () if index is None else index.chain


def restore(
    blobs: Sequence[bytes],
    dest: Path,
    *,
    key: bytes,
    storage_key: str,
    expected_sha256: str,
    index_path: Path | None = None,
    blob_ids: Sequence[str] = (),
) -> None:
    """Rebuild a database from a chain of blobs and install it at ``dest``.

    Blocking: run it in a thread. Every blob is opened and checked in memory; the result
    goes to a temporary file in ``dest``'s directory, passes ``PRAGMA integrity_check``,
    and only then replaces ``dest`` (stale ``-wal``, ``-shm`` and ``-journal`` files of a
    previous ``dest`` are removed just before). No connection may have ``dest`` open.

    Args:
        blobs: A full blob, then the deltas after it in order.
        dest: Where the database goes.
        key: From :func:`backup_key`.
        storage_key: The user's storage key.
        expected_sha256: Hex SHA-256 of the state the caller expects (the last link's).
        index_path: When given, the index is written for the restored state, so the next
            upload is a delta on this chain.
        blob_ids: The transport's ids of ``blobs``, recorded in the index; required with
            ``index_path``.

    Raises:
        SnapshotError: on any failure, with ``dest`` left as it was: ``decrypt_failed``
            (wrong key or storage key, tampered or truncated blob), ``bad_format``,
            ``chain_broken`` (no blobs, not full first, a delta missing or out of order),
            ``hash_mismatch`` (a state or the final one is not what was expected),
            ``integrity_failed``, or ``write_failed`` (local disk).
        ValueError: when ``index_path`` is given without one id per blob.
    """
    _check_key(key)
    if index_path is not None and len(blob_ids) != len(blobs):
        raise ValueError(
            f"snapshot.blob_ids_required: got {len(blob_ids)} blob ids for {len(blobs)} "
            "blobs; pass one id per blob with index_path"
        )
    if not blobs:
        raise SnapshotError("snapshot.chain_broken", "no blobs to restore from")
    state = bytearray()
    sha = b""
    page_size = 0
    chain: list[ChainLink] = []
    for position, blob in enumerate(blobs):
        payload = _open(blob, key=key, storage_key=storage_key)
        if position == 0:
            if payload.kind != "full":
                raise SnapshotError(
                    "snapshot.chain_broken", "the first blob is a delta; start from a full blob"
                )
            state = bytearray(payload.body)
            page_size = payload.page_size
        else:
            if payload.kind != "delta":
                raise SnapshotError(
                    "snapshot.chain_broken",
                    f"blob {position} is a full blob; pass only the chain from its last full",
                )
            if payload.parent != sha:
                raise SnapshotError(
                    "snapshot.chain_broken",
                    f"blob {position} applies to another state; a delta is missing or out of order",
                )
            if payload.page_size != page_size:
                raise SnapshotError("snapshot.bad_format", f"blob {position} has another page size")
            _apply_delta(state, payload)
        sha = hashlib.sha256(state).digest()
        if sha != payload.sha256:
            raise SnapshotError(
                "snapshot.hash_mismatch", f"blob {position} did not lead to the state it names"
            )
        chain.append(
            ChainLink(
                blob_ids[position] if index_path is not None else "",
                payload.kind,
                sha.hex(),
                len(blob),
            )
        )
    if sha.hex() != expected_sha256.lower():
        raise SnapshotError(
            "snapshot.hash_mismatch",
            f"the chain leads to {sha.hex()}, not the expected {expected_sha256}; "
            "the blobs are of another state",
        )
    if _page_size_of(state) != page_size:
        raise SnapshotError("snapshot.integrity_failed", "the result is not a SQLite file")
    index = None
    if index_path is not None:
        index = SnapshotIndex(
            storage_key=storage_key,
            key_id=_key_id(key),
            page_size=page_size,
            page_count=len(state) // page_size,
            sha256=sha.hex(),
            page_digests=_page_digests(state, page_size),
            chain=tuple(chain),
        )
    _install(state, dest, index_path=index_path, index=index)


# --- snapshots --------------------------------------------------------------------------


def _snapshot(db_path: Path, *, scratch_dir: Path) -> bytes:
    """A consistent copy of ``db_path``'s committed state, taken with the backup API."""
    if not db_path.is_file():
        raise SnapshotError("snapshot.source_unreadable", f"{db_path} does not exist")
    scratch_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=scratch_dir, prefix=".snapshot-", suffix=".db")
    os.close(fd)
    scratch = Path(name)
    try:
        # mode=rw: never create a missing database. One backup step (pages=-1) copies
        # every page inside one read transaction, so concurrent writers cannot tear it.
        source_uri = f"{db_path.resolve().as_uri()}?mode=rw"
        with (
            closing(sqlite3.connect(source_uri, uri=True, timeout=30)) as source,
            closing(sqlite3.connect(scratch)) as target,
        ):
            source.backup(target)
        return scratch.read_bytes()
    except sqlite3.Error as exc:
        raise SnapshotError(
            "snapshot.source_unreadable", f"{db_path} could not be snapshotted: {exc}"
        ) from exc
    finally:
        for leftover in ("", "-journal", "-wal", "-shm"):
            Path(f"{scratch}{leftover}").unlink(missing_ok=True)


def _prepare_delta(
    previous: SnapshotIndex,
    index: SnapshotIndex,
    data: memoryview,
    *,
    key: bytes,
    max_chain: int,
    max_chain_ratio: float,
) -> Prepared | None:
    """A delta on ``previous``'s chain, or ``None`` when the chain is at its limits."""
    chain = previous.chain
    if len(chain) - 1 >= max_chain:
        return None
    size = index.page_size
    old = previous.page_digests
    new = index.page_digests
    parts: list[bytes | memoryview] = [
        _PAYLOAD_HEAD.pack(
            _MAGIC,
            _VERSION,
            _KIND_BYTE["delta"],
            size,
            index.page_count,
            bytes.fromhex(index.sha256),
            bytes.fromhex(previous.sha256),
        ),
        b"",  # the page count, once known
    ]
    changed = 0
    for page in range(index.page_count):
        digest = slice(page * _DIGEST_SIZE, (page + 1) * _DIGEST_SIZE)
        if page < previous.page_count and old[digest] == new[digest]:
            continue
        parts += [_U32.pack(page + 1), data[page * size : (page + 1) * size]]
        changed += 1
    parts[1] = _U32.pack(changed)
    blob = _seal("delta", parts, key=key, storage_key=index.storage_key)
    chained = sum(link.size for link in chain[1:]) + len(blob)
    if chained > max_chain_ratio * chain[0].size:
        return None
    raw_size = sum(len(part) for part in parts)
    return Prepared("delta", blob, index.sha256, raw_size, replace(index, chain=chain))


def _page_digests(data: bytes | bytearray, page_size: int) -> bytes:
    with memoryview(data) as view:
        return b"".join(
            hashlib.blake2b(view[at : at + page_size], digest_size=_DIGEST_SIZE).digest()
            for at in range(0, len(data), page_size)
        )


def _page_size_of(data: bytes | bytearray) -> int | None:
    """The page size a SQLite header declares, or ``None`` when ``data`` is not one."""
    if len(data) < 100 or data[:16] != _SQLITE_MAGIC:
        return None
    size = int.from_bytes(data[16:18], "big")
    return 65536 if size == 1 else size


# --- sealing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Payload:
    kind: Kind
    page_size: int
    page_count: int
    sha256: bytes
    parent: bytes
    body: memoryview  # full: the file
    pages: tuple[tuple[int, memoryview], ...]  # delta: (1-based page number, bytes)


def _check_key(key: bytes) -> None:
    if len(key) != 32:
        raise ValueError(
            f"snapshot.bad_key: the key has {len(key)} bytes; derive it with backup_key()"
        )


def _key_id(key: bytes) -> str:
    return hashlib.blake2b(_KEY_ID_LABEL, key=key, digest_size=8).hexdigest()


def _seal(
    kind: Kind, parts: Sequence[bytes | memoryview], *, key: bytes, storage_key: str
) -> bytes:
    compressor = zlib.compressobj(6)
    compressed = b"".join([*(compressor.compress(part) for part in parts), compressor.flush()])
    nonce = os.urandom(12)
    head = _SEAL_HEAD.pack(_MAGIC, _VERSION, _KIND_BYTE[kind], nonce)
    return head + AESGCM(key).encrypt(nonce, compressed, head[:6] + storage_key.encode())


def _open(blob: bytes, *, key: bytes, storage_key: str) -> _Payload:
    if len(blob) < _SEAL_HEAD.size + _TAG_SIZE:
        raise SnapshotError("snapshot.bad_format", f"a blob of {len(blob)} bytes is too short")
    magic, version, kind_byte, nonce = _SEAL_HEAD.unpack_from(blob)
    kind = _KIND_OF_BYTE.get(kind_byte)
    if magic != _MAGIC or kind is None:
        raise SnapshotError("snapshot.bad_format", "not a snapshot blob")
    if version != _VERSION:
        raise SnapshotError(
            "snapshot.bad_format",
            f"blob version {version} is not supported (only {_VERSION}); upgrade the server",
        )
    aad = blob[:6] + storage_key.encode()
    try:
        compressed = AESGCM(key).decrypt(nonce, blob[_SEAL_HEAD.size :], aad)
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


def _parse_payload(plain: memoryview, kind: Kind) -> _Payload:
    def bad(why: str) -> SnapshotError:
        return SnapshotError("snapshot.bad_format", why)

    if len(plain) < _PAYLOAD_HEAD.size:
        raise bad("the payload is shorter than its header")
    magic, version, kind_byte, page_size, page_count, sha, parent = _PAYLOAD_HEAD.unpack_from(plain)
    if magic != _MAGIC or version != _VERSION or _KIND_OF_BYTE.get(kind_byte) != kind:
        raise bad("the payload header does not match the blob")
    if not 512 <= page_size <= 65536 or page_size & (page_size - 1) or page_count < 1:
        raise bad(f"page size {page_size} or page count {page_count} is impossible")
    body = plain[_PAYLOAD_HEAD.size :]
    if kind == "full":
        if len(body) != page_size * page_count:
            raise bad("the full body does not hold page_count pages")
        return _Payload(kind, page_size, page_count, sha, parent, body, ())
    if len(body) < _U32.size:
        raise bad("the delta has no page count")
    (count,) = _U32.unpack_from(body)
    if len(body) != _U32.size + count * (_U32.size + page_size):
        raise bad("the delta body does not hold its pages")
    pages: list[tuple[int, memoryview]] = []
    at = _U32.size
    for _ in range(count):
        (number,) = _U32.unpack_from(body, at)
        at += _U32.size
        if not (pages[-1][0] if pages else 0) < number <= page_count:
            raise bad(f"page {number} is out of order or past the page count")
        pages.append((number, body[at : at + page_size]))
        at += page_size
    return _Payload(kind, page_size, page_count, sha, parent, body[:0], tuple(pages))


def _apply_delta(state: bytearray, payload: _Payload) -> None:
    size = payload.page_size
    end = payload.page_count * size
    if len(state) > end:
        del state[end:]
    else:
        state.extend(bytes(end - len(state)))
    for number, page in payload.pages:
        state[(number - 1) * size : number * size] = page


# --- files ------------------------------------------------------------------------------


def _install(
    data: bytearray, dest: Path, *, index_path: Path | None, index: SnapshotIndex | None
) -> None:
    """Write ``data`` beside ``dest``, check it, record ``index``, rename into place."""
    scratch: Path | None = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".restore")
        scratch = Path(name)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _check_integrity(scratch)
        # The index names the chain, not the local file, so it is right even if the
        # rename below fails; written after the check so a corrupt chain is never kept.
        if index_path is not None and index is not None:
            _write_index(index_path, index)
        # A stale WAL beside the new file would be replayed onto it: remove it first.
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{dest}{suffix}").unlink(missing_ok=True)
        os.replace(scratch, dest)
        _fsync_dir(dest.parent)
    except OSError as exc:
        raise SnapshotError(
            "snapshot.write_failed", f"could not write {dest}: {exc}; check the disk"
        ) from exc
    finally:
        if scratch is not None:
            scratch.unlink(missing_ok=True)


def _check_integrity(path: Path) -> None:
    # immutable=1: read the file as is, without creating -wal or -shm files beside it.
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as exc:
        raise SnapshotError(
            "snapshot.integrity_failed", f"the restored file does not open: {exc}"
        ) from exc
    if rows != [("ok",)]:
        found = "; ".join(str(row[0]) for row in rows[:3])
        raise SnapshotError(
            "snapshot.integrity_failed", f"integrity_check of the restored file: {found}"
        )


def _fsync_dir(directory: Path) -> None:
    # Makes a rename durable; some filesystems refuse to fsync directories.
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _load_index(index_path: Path, *, storage_key: str, key: bytes) -> SnapshotIndex | None:
    """The index, when it exists, reads back and belongs to this storage key and key."""
    index = _read_index(index_path)
    if index is None or index.storage_key != storage_key or index.key_id != _key_id(key):
        return None
    return index


def _read_index(index_path: Path) -> SnapshotIndex | None:
    try:
        return _index_from_json(index_path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_index(index_path: Path, index: SnapshotIndex) -> None:
    index_path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=index_path.parent, prefix=f".{index_path.name}.")
    scratch = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_index_to_json(index))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, index_path)
    finally:
        scratch.unlink(missing_ok=True)
    _fsync_dir(index_path.parent)


def _checksum(doc: dict[str, Any]) -> str:
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def _index_to_json(index: SnapshotIndex) -> bytes:
    doc: dict[str, Any] = {
        "format": _INDEX_FORMAT,
        "version": _INDEX_VERSION,
        "storage_key": index.storage_key,
        "key_id": index.key_id,
        "page_size": index.page_size,
        "page_count": index.page_count,
        "sha256": index.sha256,
        "page_digests": base64.b64encode(index.page_digests).decode(),
        "chain": [
            {"blob_id": link.blob_id, "kind": link.kind, "sha256": link.sha256, "size": link.size}
            for link in index.chain
        ],
    }
    doc["checksum"] = _checksum(doc)
    return json.dumps(doc, sort_keys=True, indent=1).encode()


def _index_from_json(raw: bytes) -> SnapshotIndex:
    """Parse an index; raises ``ValueError``, ``KeyError`` or ``TypeError`` when unusable."""
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError("index is not an object")
    checksum = doc.pop("checksum", None)
    if checksum != _checksum(doc):
        raise ValueError("index checksum mismatch")
    if doc["format"] != _INDEX_FORMAT or doc["version"] != _INDEX_VERSION:
        raise ValueError("unknown index format")
    chain = tuple(
        ChainLink(
            blob_id=_typed(link["blob_id"], str),
            kind=_kind(link["kind"]),
            sha256=_typed(link["sha256"], str),
            size=_typed(link["size"], int),
        )
        for link in _typed(doc["chain"], list)
    )
    index = SnapshotIndex(
        storage_key=_typed(doc["storage_key"], str),
        key_id=_typed(doc["key_id"], str),
        page_size=_typed(doc["page_size"], int),
        page_count=_typed(doc["page_count"], int),
        sha256=_typed(doc["sha256"], str),
        page_digests=base64.b64decode(_typed(doc["page_digests"], str), validate=True),
        chain=chain,
    )
    if len(index.page_digests) != index.page_count * _DIGEST_SIZE or index.page_size < 512:
        raise ValueError("index digests do not cover the pages")
    kinds = [link.kind for link in chain]
    if not chain or kinds[0] != "full" or "full" in kinds[1:] or chain[-1].sha256 != index.sha256:
        raise ValueError("index chain is inconsistent")
    return index


def _kind(value: object) -> Kind:
    if value == "full":
        return "full"
    if value == "delta":
        return "delta"
    raise ValueError(f"unknown blob kind {value!r}")


def _typed(value: object, kind: type[_T]) -> _T:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"expected {kind.__name__}")
    return value
