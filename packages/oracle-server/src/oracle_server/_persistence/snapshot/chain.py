"""Taking a snapshot and preparing its upload, recording it, restoring from a chain."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from oracle_server._persistence.snapshot.index import (
    DIGEST_SIZE,
    fsync_dir,
    load_index,
    read_index,
    write_index,
)
from oracle_server._persistence.snapshot.records import (
    ChainLink,
    Prepared,
    SnapshotError,
    SnapshotIndex,
)
from oracle_server._persistence.snapshot.seal import (
    KIND_BYTE,
    MAGIC,
    NO_PARENT,
    PAYLOAD_HEAD,
    U32,
    VERSION,
    Payload,
    apply_delta,
    check_key,
    key_id,
    open_blob,
    seal,
)

__all__ = ["commit_upload", "prepare_upload", "read_chain", "restore"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


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
    check_key(key)
    previous = load_index(index_path, storage_key=storage_key, key=key)
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
        key_id=key_id(key),
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
    head = PAYLOAD_HEAD.pack(
        MAGIC,
        VERSION,
        KIND_BYTE["full"],
        page_size,
        index.page_count,
        bytes.fromhex(sha),
        NO_PARENT,
    )
    blob = seal("full", [head, data], key=key, storage_key=storage_key)
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
    current = read_index(index_path)
    if prepared.kind == "delta" and (current is None or current.chain != prepared.index.chain):
        raise SnapshotError(
            "snapshot.stale_index",
            f"{index_path} changed since this delta was prepared; prepare the upload again "
            f"and delete the blob {blob_id}",
        )
    link = ChainLink(blob_id, prepared.kind, prepared.sha256, len(prepared.blob))
    write_index(index_path, replace(prepared.index, chain=(*prepared.index.chain, link)))
    if prepared.kind == "delta" or current is None:
        return ()
    return tuple(old for old in current.chain if old.blob_id != blob_id)


def read_chain(index_path: Path) -> tuple[ChainLink, ...]:
    """The blobs a restore of the last uploaded state needs, full first.

    Returns:
        The chain, empty when the index is missing or unreadable.
    """
    index = read_index(index_path)
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
    check_key(key)
    if index_path is not None and len(blob_ids) != len(blobs):
        raise ValueError(
            f"snapshot.blob_ids_required: got {len(blob_ids)} blob ids for {len(blobs)} "
            "blobs; pass one id per blob with index_path"
        )
    if not blobs:
        raise SnapshotError("snapshot.chain_broken", "no blobs to restore from")
    # Without an index the ids are never recorded, so they need not be given.
    ids = blob_ids if index_path is not None else [""] * len(blobs)
    state, page_size, chain = _replay(blobs, ids, key=key, storage_key=storage_key)
    sha = chain[-1].sha256
    if sha != expected_sha256.lower():
        raise SnapshotError(
            "snapshot.hash_mismatch",
            f"the chain leads to {sha}, not the expected {expected_sha256}; "
            "the blobs are of another state",
        )
    if _page_size_of(state) != page_size:
        raise SnapshotError("snapshot.integrity_failed", "the result is not a SQLite file")
    index = None
    if index_path is not None:
        index = SnapshotIndex(
            storage_key=storage_key,
            key_id=key_id(key),
            page_size=page_size,
            page_count=len(state) // page_size,
            sha256=sha,
            page_digests=_page_digests(state, page_size),
            chain=tuple(chain),
        )
    _install(state, dest, index_path=index_path, index=index)


def _replay(
    blobs: Sequence[bytes], ids: Sequence[str], *, key: bytes, storage_key: str
) -> tuple[bytearray, int, list[ChainLink]]:
    """Open and apply ``blobs`` in memory: the state, its page size and the chain's links.

    Each blob is checked against the state before it, and the state it leads to against
    the hash the blob names, so a broken chain fails at the first blob that is wrong.
    """
    state = bytearray()
    sha = b""
    page_size = 0
    chain: list[ChainLink] = []
    for position, blob in enumerate(blobs):
        payload = open_blob(blob, key=key, storage_key=storage_key)
        if position == 0:
            if payload.kind != "full":
                raise SnapshotError(
                    "snapshot.chain_broken", "the first blob is a delta; start from a full blob"
                )
            state = bytearray(payload.body)
            page_size = payload.page_size
        else:
            _check_delta_follows(position, payload, parent=sha, page_size=page_size)
            apply_delta(state, payload)
        sha = hashlib.sha256(state).digest()
        if sha != payload.sha256:
            raise SnapshotError(
                "snapshot.hash_mismatch", f"blob {position} did not lead to the state it names"
            )
        chain.append(ChainLink(ids[position], payload.kind, sha.hex(), len(blob)))
    return state, page_size, chain


def _check_delta_follows(position: int, payload: Payload, *, parent: bytes, page_size: int) -> None:
    """Refuse a blob after the first that is not a delta on exactly the state before it."""
    if payload.kind != "delta":
        raise SnapshotError(
            "snapshot.chain_broken",
            f"blob {position} is a full blob; pass only the chain from its last full",
        )
    if payload.parent != parent:
        raise SnapshotError(
            "snapshot.chain_broken",
            f"blob {position} applies to another state; a delta is missing or out of order",
        )
    if payload.page_size != page_size:
        raise SnapshotError("snapshot.bad_format", f"blob {position} has another page size")


# --- snapshots ---


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
        PAYLOAD_HEAD.pack(
            MAGIC,
            VERSION,
            KIND_BYTE["delta"],
            size,
            index.page_count,
            bytes.fromhex(index.sha256),
            bytes.fromhex(previous.sha256),
        ),
        b"",  # the page count, once known
    ]
    changed = 0
    for page in range(index.page_count):
        digest = slice(page * DIGEST_SIZE, (page + 1) * DIGEST_SIZE)
        if page < previous.page_count and old[digest] == new[digest]:
            continue
        parts += [U32.pack(page + 1), data[page * size : (page + 1) * size]]
        changed += 1
    parts[1] = U32.pack(changed)
    blob = seal("delta", parts, key=key, storage_key=index.storage_key)
    chained = sum(link.size for link in chain[1:]) + len(blob)
    if chained > max_chain_ratio * chain[0].size:
        return None
    raw_size = sum(len(part) for part in parts)
    return Prepared("delta", blob, index.sha256, raw_size, replace(index, chain=chain))


def _page_digests(data: bytes | bytearray, page_size: int) -> bytes:
    with memoryview(data) as view:
        return b"".join(
            hashlib.blake2b(view[at : at + page_size], digest_size=DIGEST_SIZE).digest()
            for at in range(0, len(data), page_size)
        )


def _page_size_of(data: bytes | bytearray) -> int | None:
    """The page size a SQLite header declares, or ``None`` when ``data`` is not one."""
    if len(data) < 100 or data[:16] != _SQLITE_MAGIC:
        return None
    size = int.from_bytes(data[16:18], "big")
    return 65536 if size == 1 else size


# --- files ---


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
            write_index(index_path, index)
        # A stale WAL beside the new file would be replayed onto it: remove it first.
        for suffix in ("-wal", "-shm", "-journal"):
            Path(f"{dest}{suffix}").unlink(missing_ok=True)
        os.replace(scratch, dest)
        fsync_dir(dest.parent)
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
