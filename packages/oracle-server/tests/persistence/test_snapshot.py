"""Incremental sealed snapshots of per-user SQLite files (``oracle_server._persistence.snapshot``).

Every test works on real SQLite files. ``Remote`` stands in for the Matrix transport: it
keeps uploaded blobs by id and drops the ones a full upload supersedes, as the caller does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
import os
import random
import sqlite3
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from oracle_server._persistence.snapshot import (
    Prepared,
    SnapshotError,
    backup_key,
    commit_upload,
    prepare_upload,
    read_chain,
    restore,
)

SECRET = b"test secret of the oracle, 32 by"
STORAGE_KEY = "0123456789abcdef0"
OTHER_STORAGE_KEY = "fedcba98765432100"
KEY = backup_key(SECRET, STORAGE_KEY)
PAYLOAD_HEAD = struct.Struct(">4sBcII32s32s")


# --- helpers ----------------------------------------------------------------------------


@dataclass
class Remote:
    """The caller's side: prepare, "upload" into ``blobs``, commit, restore the chain."""

    db: Path
    index: Path
    blobs: dict[str, bytes] = field(default_factory=dict)
    uploads: int = 0

    def upload(self, *, max_chain: int = 32, max_chain_ratio: float = 1.0) -> Prepared | None:
        prepared = prepare_upload(
            self.db,
            self.index,
            key=KEY,
            storage_key=STORAGE_KEY,
            max_chain=max_chain,
            max_chain_ratio=max_chain_ratio,
        )
        if prepared is None:
            return None
        blob_id = f"mxc://test/{self.uploads}"
        self.uploads += 1
        self.blobs[blob_id] = prepared.blob
        for superseded in commit_upload(self.index, prepared, blob_id=blob_id):
            del self.blobs[superseded.blob_id]
        return prepared

    def chain(self) -> list[bytes]:
        return [self.blobs[link.blob_id] for link in read_chain(self.index)]

    def restore_to(self, dest: Path, index_path: Path | None = None) -> None:
        links = read_chain(self.index)
        restore(
            [self.blobs[link.blob_id] for link in links],
            dest,
            key=KEY,
            storage_key=STORAGE_KEY,
            expected_sha256=links[-1].sha256,
            index_path=index_path,
            blob_ids=[link.blob_id for link in links] if index_path else (),
        )


def create_db(path: Path, *, rows: int = 0, size: int = 1000, wal: bool = True) -> None:
    """A database with table ``t(id, v)`` holding ``rows`` random blobs of ``size`` bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as conn:
        if wal:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB)")
        insert(conn, rows, size)


def insert(conn: sqlite3.Connection, rows: int, size: int) -> None:
    conn.executemany("INSERT INTO t(v) VALUES (?)", [(os.urandom(size),) for _ in range(rows)])
    conn.commit()


def execute(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def rows_of(path: Path) -> list[tuple[int, bytes]]:
    with closing(sqlite3.connect(path)) as conn:
        return list(conn.execute("SELECT id, v FROM t ORDER BY id"))


def snapshot_bytes(path: Path) -> bytes:
    """What the backup API makes of ``path`` right now: what a restore must give back."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "copy.db"
        with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        return copy.read_bytes()


def seal(kind: bytes, payload: bytes, *, compress: bool = True) -> bytes:
    """A blob sealed as the module docstring documents it."""
    nonce = os.urandom(12)
    head = b"OSNP\x01" + kind + nonce
    plain = zlib.compress(payload) if compress else payload
    return head + AESGCM(KEY).encrypt(nonce, plain, head[:6] + STORAGE_KEY.encode())


def unseal(blob: bytes) -> tuple[bytes, bytes]:
    """The kind byte and the payload of a blob, read as the module docstring documents."""
    assert blob[:5] == b"OSNP\x01"
    sealed = AESGCM(KEY).decrypt(blob[6:18], blob[18:], blob[:6] + STORAGE_KEY.encode())
    return blob[5:6], zlib.decompress(sealed)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- keys -------------------------------------------------------------------------------


def test_backup_key_is_per_secret_and_storage_key() -> None:
    assert len(KEY) == 32
    assert backup_key(SECRET, STORAGE_KEY) == KEY
    assert backup_key(SECRET, OTHER_STORAGE_KEY) != KEY
    assert backup_key(SECRET[::-1], STORAGE_KEY) != KEY
    with pytest.raises(ValueError, match=r"snapshot\.weak_secret"):
        backup_key(b"short", STORAGE_KEY)
    with pytest.raises(ValueError, match=r"snapshot\.storage_key_required"):
        backup_key(SECRET, "")


# --- uploads ----------------------------------------------------------------------------


def test_full_then_deltas_restore_a_byte_identical_database(tmp_path: Path) -> None:
    db = tmp_path / "live" / "user.db"
    create_db(db, rows=200, size=1500)
    remote = Remote(db, tmp_path / "state" / "index.json")
    kinds = []
    first = remote.upload()
    assert first is not None
    kinds.append(first.kind)
    with closing(sqlite3.connect(db)) as conn:
        for round_ in range(4):
            insert(conn, 10, 800)
            conn.execute("UPDATE t SET v = randomblob(1200) WHERE id % 7 = ?", (round_,))
            conn.execute("DELETE FROM t WHERE id % 11 = ?", (round_,))
            conn.commit()
            prepared = remote.upload(max_chain_ratio=10)  # each round rewrites ~1/4 of it
            assert prepared is not None
            kinds.append(prepared.kind)

    assert kinds == ["full", "delta", "delta", "delta", "delta"]
    assert [link.kind for link in read_chain(remote.index)] == kinds
    # The scratch snapshot never outlives prepare_upload.
    assert sorted(p.name for p in remote.index.parent.iterdir()) == ["index.json"]
    restored = tmp_path / "node" / "user.db"
    remote.restore_to(restored)
    assert restored.read_bytes() == snapshot_bytes(db)
    assert sha256(restored.read_bytes()) == read_chain(remote.index)[-1].sha256
    assert rows_of(restored) == rows_of(db)


def test_an_unchanged_database_uploads_nothing(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=50)
    remote = Remote(db, tmp_path / "index.json")
    assert remote.upload() is not None
    assert remote.upload() is None
    execute(db, "UPDATE t SET v = v WHERE id = 1")  # a write that changes no byte of the pages
    assert remote.upload() is None
    execute(db, "UPDATE t SET v = x'00' WHERE id = 1")
    assert remote.upload() is not None


def test_a_small_append_to_a_large_database_costs_a_small_delta(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=1250, size=4000)  # ~5 MB of incompressible rows
    db_size = len(snapshot_bytes(db))
    assert db_size > 5_000_000
    remote = Remote(db, tmp_path / "index.json")
    full = remote.upload()
    assert full is not None
    assert full.kind == "full"
    assert len(full.blob) > 0.95 * db_size

    with closing(sqlite3.connect(db)) as conn:
        insert(conn, 5, 2000)  # ~10 KB
    delta = remote.upload()

    assert delta is not None
    assert delta.kind == "delta"
    assert len(delta.blob) < 64 * 1024
    restored = tmp_path / "restored.db"
    remote.restore_to(restored)
    assert restored.read_bytes() == snapshot_bytes(db)


def test_the_chain_length_limit_forces_a_full_that_supersedes_the_chain(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=20)
    remote = Remote(db, tmp_path / "index.json")
    kinds = []
    for _ in range(4):
        execute(db, "INSERT INTO t(v) VALUES (randomblob(500))")
        prepared = remote.upload(max_chain=2)
        assert prepared is not None
        kinds.append(prepared.kind)

    assert kinds == ["full", "delta", "delta", "full"]
    # Remote deleted what commit_upload reported superseded: only the new full is left.
    assert list(remote.blobs) == ["mxc://test/3"]
    assert [link.blob_id for link in read_chain(remote.index)] == ["mxc://test/3"]
    restored = tmp_path / "restored.db"
    remote.restore_to(restored)
    assert rows_of(restored) == rows_of(db)


def test_the_chain_byte_ratio_forces_a_full(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=100, size=1000)
    remote = Remote(db, tmp_path / "index.json")
    kinds = []
    for _ in range(12):
        execute(db, "INSERT INTO t(v) VALUES (randomblob(3000))")
        prepared = remote.upload(max_chain_ratio=0.15)
        assert prepared is not None
        kinds.append(prepared.kind)
        base, *deltas = read_chain(remote.index)
        assert sum(link.size for link in deltas) <= 0.15 * base.size

    assert kinds[0] == "full"
    assert kinds[1] == "delta"
    assert "full" in kinds[2:]


def test_a_shrinking_database_is_carried_by_a_delta(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=400, size=2000)
    remote = Remote(db, tmp_path / "index.json")
    before = remote.upload()
    assert before is not None
    execute(db, "DELETE FROM t WHERE id % 4 != 0")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("VACUUM")

    after = remote.upload(max_chain_ratio=100)

    assert after is not None
    assert after.kind == "delta"
    assert after.index.page_count < before.index.page_count / 2
    restored = tmp_path / "restored.db"
    remote.restore_to(restored)
    assert restored.read_bytes() == snapshot_bytes(db)
    assert rows_of(restored) == rows_of(db)


def test_auto_vacuum_truncation_is_carried_by_a_delta(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    execute(db, "PRAGMA auto_vacuum=FULL")
    create_db(db, rows=300, size=2000)
    remote = Remote(db, tmp_path / "index.json")
    before = remote.upload()
    assert before is not None
    execute(db, "DELETE FROM t WHERE id > 30")

    after = remote.upload(max_chain_ratio=100)

    assert after is not None
    assert after.kind == "delta"
    assert after.index.page_count < before.index.page_count / 2
    restored = tmp_path / "restored.db"
    remote.restore_to(restored)
    assert restored.read_bytes() == snapshot_bytes(db)


def test_a_page_size_change_forces_a_full(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=50, wal=False)  # the page size cannot change in WAL mode
    remote = Remote(db, tmp_path / "index.json")
    first = remote.upload()
    assert first is not None
    assert first.index.page_size == 4096
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA page_size=8192")
        conn.execute("VACUUM")

    second = remote.upload()

    assert second is not None
    assert second.kind == "full"
    assert second.index.page_size == 8192
    restored = tmp_path / "restored.db"
    remote.restore_to(restored)
    assert rows_of(restored) == rows_of(db)


def _garbage(index: Path) -> None:
    index.write_text("{not json")


def _edited(index: Path) -> None:
    doc = json.loads(index.read_text())
    doc["page_count"] += 1
    index.write_text(json.dumps(doc))


def _missing(index: Path) -> None:
    index.unlink()


@pytest.mark.parametrize(
    "spoil", [_garbage, _edited, _missing], ids=["garbage", "edited", "missing"]
)
def test_an_unusable_index_makes_the_next_upload_full(
    tmp_path: Path, spoil: Callable[[Path], None]
) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=30)
    remote = Remote(db, tmp_path / "index.json")
    assert remote.upload() is not None
    spoil(remote.index)
    assert read_chain(remote.index) == ()

    prepared = remote.upload()  # even without a change: the last upload is unknown

    assert prepared is not None
    assert prepared.kind == "full"


@pytest.mark.parametrize(
    ("secret", "storage_key"),
    [(SECRET[::-1], STORAGE_KEY), (SECRET, OTHER_STORAGE_KEY)],
    ids=["another-secret", "another-storage-key"],
)
def test_an_index_of_another_key_makes_the_next_upload_full(
    tmp_path: Path, secret: bytes, storage_key: str
) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=30)
    index = tmp_path / "index.json"
    remote = Remote(db, index)
    assert remote.upload() is not None

    prepared = prepare_upload(
        db, index, key=backup_key(secret, storage_key), storage_key=storage_key
    )

    assert prepared is not None
    assert prepared.kind == "full"


def test_committing_a_stale_delta_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=30)
    remote = Remote(db, tmp_path / "index.json")
    assert remote.upload() is not None
    execute(db, "INSERT INTO t(v) VALUES (randomblob(100))")
    first = prepare_upload(db, remote.index, key=KEY, storage_key=STORAGE_KEY)
    execute(db, "INSERT INTO t(v) VALUES (randomblob(100))")
    second = prepare_upload(db, remote.index, key=KEY, storage_key=STORAGE_KEY)
    assert first is not None
    assert second is not None
    assert commit_upload(remote.index, first, blob_id="first") == ()

    with pytest.raises(SnapshotError) as caught:
        commit_upload(remote.index, second, blob_id="second")

    assert caught.value.code == "snapshot.stale_index"
    assert read_chain(remote.index)[-1].blob_id == "first"


def test_a_missing_source_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(SnapshotError) as caught:
        prepare_upload(missing, tmp_path / "index.json", key=KEY, storage_key=STORAGE_KEY)
    assert caught.value.code == "snapshot.source_unreadable"
    assert not missing.exists()

    not_a_db = tmp_path / "notes.db"
    not_a_db.write_bytes(b"plain text, not SQLite" * 100)
    with pytest.raises(SnapshotError) as caught:
        prepare_upload(not_a_db, tmp_path / "index.json", key=KEY, storage_key=STORAGE_KEY)
    assert caught.value.code == "snapshot.source_unreadable"


def test_a_snapshot_taken_during_concurrent_writes_is_consistent(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=1000, size=2000)
    execute(db, "CREATE TABLE counter(n INTEGER)", "INSERT INTO counter VALUES (0)")
    remote = Remote(db, tmp_path / "index.json")
    stop = threading.Event()
    commits = [0]

    def write_until_stopped() -> None:
        # Each transaction adds one row and counts it: a torn snapshot breaks the count.
        with closing(sqlite3.connect(db, timeout=30)) as conn:
            while not stop.is_set():
                with conn:
                    conn.execute("INSERT INTO t(v) VALUES (randomblob(3000))")
                    conn.execute("UPDATE counter SET n = n + 1")
                commits[0] += 1

    writer = threading.Thread(target=write_until_stopped)
    writer.start()
    windows = []
    try:
        while commits[0] == 0:
            stop.wait(0.001)
        for step in range(5):
            before = commits[0]
            prepared = remote.upload()
            after = commits[0]
            assert prepared is not None
            restored = tmp_path / f"restored-{step}.db"
            remote.restore_to(restored)
            windows.append((before, after, restored))
    finally:
        stop.set()
        writer.join()

    assert any(after > before for before, after, _ in windows)
    for before, after, restored in windows:
        with closing(sqlite3.connect(restored)) as conn:
            (count,) = conn.execute("SELECT n FROM counter").fetchone()
            (rows,) = conn.execute("SELECT count(*) FROM t").fetchone()
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert rows == 1000 + count
        assert before <= count <= after + 1


# --- the documented format --------------------------------------------------------------


def test_blobs_follow_the_documented_format(tmp_path: Path) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=100, size=1500)
    remote = Remote(db, tmp_path / "index.json")
    full = remote.upload()
    execute(db, "DELETE FROM t WHERE id > 50", "INSERT INTO t(v) VALUES (randomblob(900))")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("VACUUM")
    delta = remote.upload(max_chain_ratio=100)
    assert full is not None
    assert delta is not None

    kind, payload = unseal(full.blob)
    magic, version, inner, page_size, page_count, sha, parent = PAYLOAD_HEAD.unpack_from(payload)
    body = payload[PAYLOAD_HEAD.size :]
    assert (kind, magic, version, inner, parent) == (b"F", b"OSNP", 1, b"F", bytes(32))
    assert (page_size, page_count) == (full.index.page_size, full.index.page_count)
    assert len(body) == page_size * page_count
    assert sha.hex() == sha256(body) == full.sha256
    assert body[:16] == b"SQLite format 3\x00"

    kind, payload = unseal(delta.blob)
    magic, version, inner, page_size, page_count, sha, parent = PAYLOAD_HEAD.unpack_from(payload)
    assert (kind, magic, version, inner) == (b"D", b"OSNP", 1, b"D")
    assert parent.hex() == full.sha256
    assert sha.hex() == delta.sha256
    assert page_count < full.index.page_count
    (count,) = struct.unpack_from(">I", payload, PAYLOAD_HEAD.size)
    state = bytearray(body[: page_count * page_size])
    numbers = []
    at = PAYLOAD_HEAD.size + 4
    for _ in range(count):
        (number,) = struct.unpack_from(">I", payload, at)
        numbers.append(number)
        state[(number - 1) * page_size : number * page_size] = payload[at + 4 : at + 4 + page_size]
        at += 4 + page_size
    assert at == len(payload)
    assert numbers == sorted(set(numbers))
    assert sha256(bytes(state)) == delta.sha256 == sha256(snapshot_bytes(db))


# --- restore failures -------------------------------------------------------------------


@dataclass
class Chain:
    """A full blob and three deltas, with the state hash after each."""

    blobs: list[bytes]
    shas: list[str]


@pytest.fixture
def chain(tmp_path: Path) -> Chain:
    db = tmp_path / "source" / "user.db"
    create_db(db, rows=100)
    remote = Remote(db, tmp_path / "source" / "index.json")
    blobs, shas = [], []
    for _ in range(4):
        execute(db, "INSERT INTO t(v) VALUES (randomblob(2000))")
        prepared = remote.upload()
        assert prepared is not None
        blobs.append(prepared.blob)
        shas.append(prepared.sha256)
    return Chain(blobs, shas)


Case = Callable[[Chain], tuple[list[bytes], bytes, str, str]]


def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 1]) + blob[at + 1 :]


FAILURES: list[tuple[str, str, Case]] = [
    (
        "wrong-key",
        "snapshot.decrypt_failed",
        lambda c: (c.blobs, backup_key(SECRET[::-1], STORAGE_KEY), STORAGE_KEY, c.shas[-1]),
    ),
    (
        "another-users-key",
        "snapshot.decrypt_failed",
        lambda c: (
            c.blobs,
            backup_key(SECRET, OTHER_STORAGE_KEY),
            OTHER_STORAGE_KEY,
            c.shas[-1],
        ),
    ),
    (
        "right-key-other-storage-key",
        "snapshot.decrypt_failed",
        lambda c: (c.blobs, KEY, OTHER_STORAGE_KEY, c.shas[-1]),
    ),
    (
        "tampered-ciphertext",
        "snapshot.decrypt_failed",
        lambda c: ([*c.blobs[:2], _flip(c.blobs[2], 40), c.blobs[3]], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "full-relabelled-delta",
        "snapshot.decrypt_failed",
        lambda c: (
            [c.blobs[0], c.blobs[0][:5] + b"D" + c.blobs[0][6:]],
            KEY,
            STORAGE_KEY,
            c.shas[0],
        ),
    ),
    (
        "truncated",
        "snapshot.decrypt_failed",
        lambda c: ([*c.blobs[:3], c.blobs[3][:-1]], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "truncated-to-nothing",
        "snapshot.bad_format",
        lambda c: ([*c.blobs[:3], c.blobs[3][:10]], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "unknown-version",
        "snapshot.bad_format",
        lambda c: ([c.blobs[0][:4] + b"\x02" + c.blobs[0][5:]], KEY, STORAGE_KEY, c.shas[0]),
    ),
    (
        "not-a-blob",
        "snapshot.bad_format",
        lambda c: ([b"SQLite format 3\x00" * 8], KEY, STORAGE_KEY, c.shas[0]),
    ),
    (
        "missing-middle-delta",
        "snapshot.chain_broken",
        lambda c: ([c.blobs[0], c.blobs[1], c.blobs[3]], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "reordered-deltas",
        "snapshot.chain_broken",
        lambda c: ([c.blobs[0], c.blobs[2], c.blobs[1], c.blobs[3]], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "delta-first",
        "snapshot.chain_broken",
        lambda c: (c.blobs[1:], KEY, STORAGE_KEY, c.shas[-1]),
    ),
    (
        "full-after-full",
        "snapshot.chain_broken",
        lambda c: ([c.blobs[0], c.blobs[0]], KEY, STORAGE_KEY, c.shas[0]),
    ),
    ("no-blobs", "snapshot.chain_broken", lambda c: ([], KEY, STORAGE_KEY, c.shas[-1])),
    (
        "stale-chain",
        "snapshot.hash_mismatch",
        lambda c: (c.blobs[:3], KEY, STORAGE_KEY, c.shas[-1]),
    ),
]


@pytest.mark.parametrize(
    ("code", "case"), [(code, case) for _, code, case in FAILURES], ids=[n for n, _, _ in FAILURES]
)
def test_a_failed_restore_raises_its_code_and_creates_nothing(
    tmp_path: Path, chain: Chain, code: str, case: Case
) -> None:
    blobs, key, storage_key, expected = case(chain)
    node = tmp_path / "node"
    node.mkdir()

    with pytest.raises(SnapshotError) as caught:
        restore(
            blobs,
            node / "user.db",
            key=key,
            storage_key=storage_key,
            expected_sha256=expected,
            index_path=node / "index.json",
            blob_ids=[f"id-{n}" for n in range(len(blobs))],
        )

    assert caught.value.code == code
    assert str(caught.value).startswith(f"{code}: ")
    assert list(node.iterdir()) == []


def test_the_right_chain_restores_where_the_failures_did_not(tmp_path: Path, chain: Chain) -> None:
    dest = tmp_path / "node" / "user.db"
    restore(chain.blobs, dest, key=KEY, storage_key=STORAGE_KEY, expected_sha256=chain.shas[-1])
    assert sha256(dest.read_bytes()) == chain.shas[-1]


def _existing_destination(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    dest = tmp_path / "node" / "user.db"
    create_db(dest, rows=3)
    wal = Path(f"{dest}-wal")
    wal.write_bytes(b"a previous WAL")
    return dest, {dest: dest.read_bytes(), wal: wal.read_bytes()}


def test_a_failed_restore_leaves_an_existing_destination_untouched(
    tmp_path: Path, chain: Chain
) -> None:
    dest, before = _existing_destination(tmp_path)
    with pytest.raises(SnapshotError) as caught:
        restore(
            chain.blobs,
            dest,
            key=backup_key(SECRET[::-1], STORAGE_KEY),
            storage_key=STORAGE_KEY,
            expected_sha256=chain.shas[-1],
        )
    assert caught.value.code == "snapshot.decrypt_failed"
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["user.db", "user.db-wal"]


def test_a_corrupt_database_fails_the_integrity_check(tmp_path: Path) -> None:
    db = tmp_path / "source" / "user.db"
    create_db(db, rows=100, size=500, wal=False)
    data = bytearray(db.read_bytes())
    data[-4096 : -4096 + 64] = b"\xff" * 64  # the b-tree header of the last page
    db.write_bytes(bytes(data))
    remote = Remote(db, tmp_path / "source" / "index.json")
    assert remote.upload() is not None
    dest, before = _existing_destination(tmp_path)

    with pytest.raises(SnapshotError) as caught:
        remote.restore_to(dest, index_path=tmp_path / "node" / "index.json")

    assert caught.value.code == "snapshot.integrity_failed"
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["user.db", "user.db-wal"]


def _forged_full(body: bytes, *, sha: bytes | None = None, page_size: int = 4096) -> bytes:
    count = len(body) // page_size
    named = hashlib.sha256(body).digest() if sha is None else sha
    return PAYLOAD_HEAD.pack(b"OSNP", 1, b"F", page_size, count, named, bytes(32)) + body


def _delta_head(real: bytes, *, page_size: int = 4096, pages: int | None = None) -> bytes:
    count = len(real) // 4096 if pages is None else pages
    parent = hashlib.sha256(real).digest()
    return PAYLOAD_HEAD.pack(b"OSNP", 1, b"D", page_size, count, bytes(32), parent)


Forgery = Callable[[bytes], tuple[list[bytes], str]]
NOT_SQLITE = bytes(4096)
FORGERIES: dict[str, tuple[str, Forgery]] = {
    "state-hash-lies": (
        "snapshot.hash_mismatch",
        lambda real: ([seal(b"F", _forged_full(real, sha=bytes(32)))], bytes(32).hex()),
    ),
    "not-sqlite": (
        "snapshot.integrity_failed",
        lambda real: ([seal(b"F", _forged_full(NOT_SQLITE))], sha256(NOT_SQLITE)),
    ),
    "inner-kind-differs": (
        "snapshot.bad_format",
        lambda real: (
            [seal(b"F", _forged_full(real).replace(b"OSNP\x01F", b"OSNP\x01D", 1))],
            sha256(real),
        ),
    ),
    "not-deflated": (
        "snapshot.bad_format",
        lambda real: ([seal(b"F", _forged_full(real), compress=False)], sha256(real)),
    ),
    "shorter-than-header": (
        "snapshot.bad_format",
        lambda real: ([seal(b"F", b"OSNP\x01F")], sha256(real)),
    ),
    "impossible-page-size": (
        "snapshot.bad_format",
        lambda real: ([seal(b"F", _forged_full(real, page_size=1000))], sha256(real)),
    ),
    "full-body-short": (
        "snapshot.bad_format",
        lambda real: ([seal(b"F", _forged_full(real)[:-1])], sha256(real)),
    ),
    "delta-without-count": (
        "snapshot.bad_format",
        lambda real: (
            [seal(b"F", _forged_full(real)), seal(b"D", _delta_head(real))],
            sha256(real),
        ),
    ),
    "delta-body-short": (
        "snapshot.bad_format",
        lambda real: (
            [
                seal(b"F", _forged_full(real)),
                seal(b"D", _delta_head(real) + struct.pack(">II", 2, 1) + bytes(4096)),
            ],
            sha256(real),
        ),
    ),
    "delta-page-past-the-end": (
        "snapshot.bad_format",
        lambda real: (
            [
                seal(b"F", _forged_full(real)),
                seal(b"D", _delta_head(real, pages=2) + struct.pack(">II", 1, 3) + bytes(4096)),
            ],
            sha256(real),
        ),
    ),
    "delta-of-another-page-size": (
        "snapshot.bad_format",
        lambda real: (
            [
                seal(b"F", _forged_full(real)),
                seal(b"D", _delta_head(real, page_size=8192) + struct.pack(">I", 0)),
            ],
            sha256(real),
        ),
    ),
}


@pytest.mark.parametrize(("code", "forge"), FORGERIES.values(), ids=FORGERIES.keys())
def test_forged_payloads_are_refused(tmp_path: Path, code: str, forge: Forgery) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=10)
    blobs, expected = forge(snapshot_bytes(db))
    dest = tmp_path / "node" / "user.db"

    with pytest.raises(SnapshotError) as caught:
        restore(blobs, dest, key=KEY, storage_key=STORAGE_KEY, expected_sha256=expected)

    assert caught.value.code == code
    assert not dest.exists()


def test_misuse_is_a_value_error(tmp_path: Path, chain: Chain) -> None:
    db = tmp_path / "user.db"
    create_db(db, rows=1)
    index = tmp_path / "index.json"
    with pytest.raises(ValueError, match=r"snapshot\.bad_key"):
        prepare_upload(db, index, key=b"short", storage_key=STORAGE_KEY)
    prepared = prepare_upload(db, index, key=KEY, storage_key=STORAGE_KEY)
    assert prepared is not None
    with pytest.raises(ValueError, match=r"snapshot\.blob_id_required"):
        commit_upload(index, prepared, blob_id="")
    with pytest.raises(ValueError, match=r"snapshot\.blob_ids_required"):
        restore(
            chain.blobs,
            tmp_path / "restored.db",
            key=KEY,
            storage_key=STORAGE_KEY,
            expected_sha256=chain.shas[-1],
            index_path=tmp_path / "restored.json",
        )
    assert not index.exists()
    assert not (tmp_path / "restored.db").exists()


# --- LangGraph --------------------------------------------------------------------------


class Trail(TypedDict):
    """Graph state: every step appends to it."""

    steps: Annotated[list[str], operator.add]


def _echo(state: Trail) -> dict[str, list[str]]:
    return {"steps": [f"seen {len(state['steps'])}"]}


def compile_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(Trail)
    builder.add_node("echo", _echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


THREAD: RunnableConfig = {"configurable": {"thread_id": "session-1"}}


async def _steps(path: Path, then: str | None = None) -> list[str]:
    """The thread's stored steps; with ``then``, after running one more turn."""
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        if then is not None:
            await compile_graph(saver).ainvoke({"steps": [then]}, THREAD)
        checkpoint = await saver.aget_tuple(THREAD)
    assert checkpoint is not None
    return list(checkpoint.checkpoint["channel_values"]["steps"])


async def test_a_restored_database_serves_langgraph_checkpoints(tmp_path: Path) -> None:
    live = tmp_path / "live" / "user.db"
    live.parent.mkdir()
    remote = Remote(live, tmp_path / "live" / "index.json")
    async with AsyncSqliteSaver.from_conn_string(str(live)) as saver:
        await compile_graph(saver).ainvoke({"steps": ["hello"]}, THREAD)
        # Uploaded while the saver holds the file open in WAL mode.
        assert (await asyncio.to_thread(remote.upload)) is not None

    node = tmp_path / "node"
    restored = node / "user.db"
    await asyncio.to_thread(remote.restore_to, restored, node / "index.json")
    assert await _steps(restored, then="again") == ["hello", "seen 1", "again", "seen 3"]

    # The restored index lets the new node continue the same chain with a delta.
    continued = Remote(restored, node / "index.json", blobs=dict(remote.blobs), uploads=1)
    # A tiny database: its delta is about as large as its full, hence the ratio.
    prepared = await asyncio.to_thread(lambda: continued.upload(max_chain_ratio=10))
    assert prepared is not None
    assert prepared.kind == "delta"
    third = tmp_path / "third" / "user.db"
    await asyncio.to_thread(continued.restore_to, third)
    assert await _steps(third) == ["hello", "seen 1", "again", "seen 3"]


# --- property ---------------------------------------------------------------------------

Operation = tuple[str, int, int]
operations = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "delete", "vacuum"]),
        st.integers(1, 40),
        st.integers(1, 5000),
    ),
    min_size=1,
    max_size=4,
)


def _apply(path: Path, operation: Operation, rng: random.Random) -> None:
    name, count, size = operation
    with closing(sqlite3.connect(path)) as conn:
        if name == "insert":
            rows = [(rng.randbytes(rng.randint(1, size)),) for _ in range(count)]
            conn.executemany("INSERT INTO t(v) VALUES (?)", rows)
        elif name == "update":
            conn.execute("UPDATE t SET v = ? WHERE id % ? = 0", (rng.randbytes(size), count))
        elif name == "delete":
            conn.execute("DELETE FROM t WHERE id % ? = 0", (count,))
        else:
            conn.commit()
            conn.execute("VACUUM")
        conn.commit()


@settings(max_examples=30, deadline=None)
@given(rounds=st.lists(operations, min_size=1, max_size=6), seed=st.integers(0, 2**32))
def test_any_history_of_writes_restores_to_the_source(
    rounds: list[list[Operation]], seed: int
) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        db = root / "user.db"
        create_db(db)
        remote = Remote(db, root / "index.json")
        for round_ in rounds:
            for operation in round_:
                _apply(db, operation, rng)
            remote.upload(max_chain=4, max_chain_ratio=8.0)
        restored = root / "node" / "user.db"
        remote.restore_to(restored)
        assert restored.read_bytes() == snapshot_bytes(db)
        assert rows_of(restored) == rows_of(db)
