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

from oracle_server._persistence.snapshot.chain import (
    commit_upload,
    prepare_upload,
    read_chain,
    restore,
)
from oracle_server._persistence.snapshot.records import (
    ChainLink,
    Prepared,
    SnapshotError,
    SnapshotIndex,
)
from oracle_server._persistence.snapshot.seal import backup_key

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
