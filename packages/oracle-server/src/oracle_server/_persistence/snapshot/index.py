"""The sidecar index: the last uploaded state of one database, as checksummed JSON."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

from oracle_server._persistence.snapshot.records import ChainLink, Kind, SnapshotIndex
from oracle_server._persistence.snapshot.seal import key_id

__all__ = ["DIGEST_SIZE", "fsync_dir", "load_index", "read_index", "write_index"]

_T = TypeVar("_T")

DIGEST_SIZE = 16
_INDEX_FORMAT = "oracle-server/matrix-snapshot-index"
_INDEX_VERSION = 1


def load_index(index_path: Path, *, storage_key: str, key: bytes) -> SnapshotIndex | None:
    """The index, when it exists, reads back and belongs to this storage key and key."""
    index = read_index(index_path)
    if index is None or index.storage_key != storage_key or index.key_id != key_id(key):
        return None
    return index


def read_index(index_path: Path) -> SnapshotIndex | None:
    try:
        return _index_from_json(index_path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_index(index_path: Path, index: SnapshotIndex) -> None:
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
    fsync_dir(index_path.parent)


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
    if len(index.page_digests) != index.page_count * DIGEST_SIZE or index.page_size < 512:
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


def fsync_dir(directory: Path) -> None:
    # Makes a rename durable; some filesystems refuse to fsync directories.
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
