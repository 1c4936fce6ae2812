"""What the snapshot modules exchange: chain links, the index, a prepared upload, errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ChainLink", "Kind", "Prepared", "SnapshotError", "SnapshotIndex"]

Kind = Literal["full", "delta"]


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
