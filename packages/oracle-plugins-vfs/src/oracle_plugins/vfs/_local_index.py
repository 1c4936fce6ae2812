"""The index layer of the embedded file store: ``index.sqlite3`` and what it records.

The SQLite schema (:func:`open_index`) and :class:`UserIndex`, one user's view of it:
file ids and MIME types, reconciling the index with the disk, FTS5 indexing and search,
kept versions, trash entries and share tokens. The disk stays the truth for what exists;
the index follows it (see ``_local_disk``).
"""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from oracle_plugins.vfs._backend import SearchHit, SearchResult
from oracle_plugins.vfs._local_disk import UserDisk, as_text, guess_mime, lines_of

MAX_VERSIONS = 50
"""Earlier contents kept per file; the oldest beyond this are pruned."""

SEARCH_LIMIT = 20
"""Files one ``search`` returns at most."""

CHUNK_LINES = 20
"""Lines per FTS5 row: search cites ranges inside these chunks."""

_MAX_RANGES = 10
_MAX_TERMS = 32
_CANDIDATES = 500
_TERM = re.compile(r"\w+")

_SCHEMA = """
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    path TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    indexed TEXT,
    trash_id TEXT,
    updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS files_live ON files (owner, path) WHERE trash_id IS NULL;
CREATE TABLE IF NOT EXISTS versions (
    file_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mime_type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (file_id, version)
);
CREATE TABLE IF NOT EXISTS trash (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    original_path TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('file', 'folder')),
    trashed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS shares (
    token TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    file_id TEXT UNIQUE,
    folder_path TEXT,
    created_at TEXT NOT NULL,
    CHECK ((file_id IS NULL) != (folder_path IS NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS shares_folder ON shares (owner, folder_path)
    WHERE folder_path IS NOT NULL;
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    file_id TEXT NOT NULL,
    first_line INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks (file_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
    body, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER IF NOT EXISTS chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, body) VALUES ('delete', old.id, old.body);
END;
"""

ShareKey = Literal["file_id", "folder_path"]
"""The column a share names: a file's id or a folder's path."""


@dataclass(frozen=True)
class TrashEntry:
    """A deleted file or folder, recoverable with :meth:`LocalVfs.restore`."""

    id: str
    path: str
    kind: Literal["file", "folder"]
    trashed_at: str


@dataclass(frozen=True)
class FileRow:
    """A live file's row in the index (``indexed``: the stamp its FTS5 rows were built at)."""

    id: str
    path: str
    mime_type: str
    version: int
    indexed: str | None


def now() -> str:
    """The current time, ISO 8601 in UTC, as the index records it."""
    return datetime.now(UTC).isoformat()


def scope_sql(scope: str, column: str = "path") -> tuple[str, tuple[object, ...]]:
    """A SQL condition (and its parameters) for ``column`` at or under ``scope``."""
    if scope == "/":
        return "1", ()
    return f"({column} = ? OR substr({column}, 1, ?) = ?)", (scope, len(scope) + 1, scope + "/")


def _fold(text: str) -> str:
    """Case and accents folded, as the FTS5 tokenizer sees words."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def _stamp(stat: os.stat_result) -> str:
    return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def _terms(q: str) -> list[str]:
    """The words of a user query; each is quoted for FTS5, so no syntax reaches it."""
    return _TERM.findall(q)[:_MAX_TERMS]


def _ranges(lines: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for line in sorted(set(lines)):
        if out and line == out[-1][1] + 1:
            out[-1] = (out[-1][0], line)
        else:
            out.append((line, line))
    return tuple(out[:_MAX_RANGES])


def open_index(path: Path) -> sqlite3.Connection:
    """Open (and create or upgrade the schema of) the index at ``path``.

    Raises:
        RuntimeError: ``vfs.local.index`` when SQLite cannot open it (or lacks FTS5).
    """
    db = sqlite3.connect(path, check_same_thread=False)
    try:
        db.executescript(_SCHEMA)
    except sqlite3.OperationalError as exc:
        db.close()
        raise RuntimeError(f"vfs.local.index: cannot open the file index: {exc}") from exc
    db.execute("PRAGMA busy_timeout = 5000")
    return db


def share_of(db: sqlite3.Connection, token: str) -> tuple[str, str | None, str | None] | None:
    """The owner, shared file id and shared folder path of ``token``; ``None`` if unknown."""
    found: tuple[str, str | None, str | None] | None = db.execute(
        "SELECT owner, file_id, folder_path FROM shares WHERE token = ?", (token,)
    ).fetchone()
    return found


class UserIndex:
    """One user's rows in the index, kept in step with their :class:`UserDisk`.

    Args:
        connect: Returns the index connection (raising once the store is closed).
        owner: The user's folder name (their DID's SHA-256).
        disk: The user's folder, read to index and to keep versions.

    Writes are not committed here: callers group them with ``with index.db:``.
    """

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], owner: str, disk: UserDisk
    ) -> None:
        self._connect = connect
        self._owner = owner
        self._disk = disk

    @property
    def db(self) -> sqlite3.Connection:
        """The index connection (its context manager is one transaction)."""
        return self._connect()

    # -- files --------------------------------------------------------------------------------

    def row(self, path: str) -> FileRow | None:
        """The row of the live file at ``path``, if the store has seen it."""
        found = self.db.execute(
            "SELECT id, path, mime_type, version, indexed FROM files"
            " WHERE owner = ? AND path = ? AND trash_id IS NULL",
            (self._owner, path),
        ).fetchone()
        return None if found is None else FileRow(*found)

    def rows_under(self, scope: str) -> list[FileRow]:
        """The rows of the live files at or under ``scope``."""
        condition, params = scope_sql(scope)
        return [
            FileRow(*found)
            for found in self.db.execute(
                "SELECT id, path, mime_type, version, indexed FROM files"
                f" WHERE owner = ? AND trash_id IS NULL AND {condition}",
                (self._owner, *params),
            )
        ]

    def track(self, path: str, mime_type: str = "") -> FileRow:
        """The row of the file at ``path``, made (version 1) when the store never saw it."""
        row = self.row(path)
        if row is not None:
            return row
        row = FileRow(uuid.uuid4().hex, path, mime_type or guess_mime(path), 1, None)
        self.db.execute(
            "INSERT INTO files (id, owner, path, mime_type, version, updated_at)"
            " VALUES (?, ?, ?, ?, 1, ?)",
            (row.id, self._owner, path, row.mime_type, now()),
        )
        return row

    def mark_written(self, file_id: str, mime_type: str, version: int) -> None:
        """Record new content: its MIME type and version, to be re-indexed."""
        self.db.execute(
            "UPDATE files SET mime_type = ?, version = ?, indexed = NULL, updated_at = ?"
            " WHERE id = ?",
            (mime_type, version, now(), file_id),
        )

    def forget(self, row: FileRow) -> None:
        """Drop a file that vanished from the disk, with its versions and shares."""
        for table in ("chunks", "versions", "shares"):
            self.db.execute(f"DELETE FROM {table} WHERE file_id = ?", (row.id,))
        self.db.execute("DELETE FROM files WHERE id = ?", (row.id,))
        self._disk.drop_versions(row.id)

    def reconcile(self, scope: str) -> dict[str, tuple[FileRow, os.stat_result]]:
        """Match the index to the disk under ``scope``: the files there, with their rows."""
        on_disk = self._disk.walk(scope)
        present = {path for path, _ in on_disk}
        for row in self.rows_under(scope):
            if row.path not in present:
                self.forget(row)
        return {path: (self.track(path), stat) for path, stat in on_disk}

    def repath(self, source: str, destination: str) -> None:
        """Point the index (files, folder shares) at ``destination`` instead of ``source``."""
        for table, column in (("files", "path"), ("shares", "folder_path")):
            condition, params = scope_sql(source, column)
            extra = " AND trash_id IS NULL" if table == "files" else ""
            self.db.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?)"
                f" WHERE owner = ? AND {condition}{extra}",
                (destination, len(source) + 1, self._owner, *params),
            )

    # -- search -------------------------------------------------------------------------------

    def search(self, q: str, scope: str) -> SearchResult:
        """FTS5 (BM25) search under ``scope``, after re-indexing the files that changed."""
        with self.db:
            self._reindex(self.reconcile(scope))
        terms = _terms(q)
        if not terms:
            return SearchResult(hits=(), semantic=False)
        quoted = [f'"{term}"' for term in terms]
        found = self._match(" AND ".join(quoted), scope)
        if not found and len(quoted) > 1:
            found = self._match(" OR ".join(quoted), scope)
        return SearchResult(hits=self._hits(found, [_fold(term) for term in terms]), semantic=False)

    def _reindex(self, files: dict[str, tuple[FileRow, os.stat_result]]) -> None:
        """Rebuild the FTS5 rows of each file whose size, mtime or inode changed."""
        for path, (row, stat) in files.items():
            stamp = _stamp(stat)
            if row.indexed == stamp:
                continue
            self.db.execute("DELETE FROM chunks WHERE file_id = ?", (row.id,))
            text = None
            if stat.st_size <= self._disk.max_file_bytes:
                text = as_text(self._disk.resolve(path).read_bytes())
            lines = lines_of(text) if text else []
            self.db.executemany(
                "INSERT INTO chunks (file_id, first_line, body) VALUES (?, ?, ?)",
                (
                    (row.id, start + 1, "\n".join(lines[start : start + CHUNK_LINES]))
                    for start in range(0, len(lines), CHUNK_LINES)
                ),
            )
            self.db.execute("UPDATE files SET indexed = ? WHERE id = ?", (stamp, row.id))

    def _match(self, expression: str, scope: str) -> list[tuple[str, int, str, float]]:
        condition, params = scope_sql(scope, "f.path")
        query = (
            "SELECT f.path, c.first_line, c.body, bm25(chunks_fts) FROM chunks_fts"
            " JOIN chunks c ON c.id = chunks_fts.rowid JOIN files f ON f.id = c.file_id"
            f" WHERE chunks_fts MATCH ? AND f.owner = ? AND f.trash_id IS NULL AND {condition}"
            " ORDER BY bm25(chunks_fts) LIMIT ?"
        )
        try:
            return self.db.execute(
                query, (expression, self._owner, *params, _CANDIDATES)
            ).fetchall()
        except sqlite3.OperationalError:  # every term is quoted; this is a last guard
            return []

    def _hits(
        self, found: list[tuple[str, int, str, float]], folded: list[str]
    ) -> tuple[SearchHit, ...]:
        lines: dict[str, list[int]] = {}
        best: dict[str, tuple[float, str]] = {}
        for path, first_line, body, score in found:
            chunk = body.split("\n")
            matching = [n for n, line in enumerate(chunk) if any(t in _fold(line) for t in folded)]
            numbers = [first_line + n for n in matching] or [
                first_line + n for n in range(len(chunk))
            ]
            lines.setdefault(path, []).extend(numbers)
            if path not in best:  # rows come best first
                snippet = chunk[matching[0] if matching else 0].strip()[:200]
                best[path] = (score, snippet)
        ranked = sorted(best, key=lambda path: best[path][0])[:SEARCH_LIMIT]
        return tuple(
            SearchHit(path, _ranges(lines[path]), best[path][1], -best[path][0]) for path in ranked
        )

    # -- versions -----------------------------------------------------------------------------

    def keep_version(self, row: FileRow, target: Path) -> int:
        """Keep the current content as version ``row.version``; the next version number."""
        copy = self._disk.keep_copy(row.id, row.version, target)
        self.db.execute(
            "INSERT OR REPLACE INTO versions (file_id, version, size, mime_type, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (row.id, row.version, copy.stat().st_size, row.mime_type, now()),
        )
        pruned = self.db.execute(
            "SELECT version FROM versions WHERE file_id = ?"
            " ORDER BY version DESC LIMIT -1 OFFSET ?",
            (row.id, MAX_VERSIONS),
        ).fetchall()
        for (number,) in pruned:
            self.db.execute(
                "DELETE FROM versions WHERE file_id = ? AND version = ?", (row.id, number)
            )
            self._disk.version_file(row.id, number).unlink(missing_ok=True)
        return row.version + 1

    def version_numbers(self, file_id: str) -> list[int]:
        """The version numbers kept for file ``file_id``, oldest first."""
        return [
            number
            for (number,) in self.db.execute(
                "SELECT version FROM versions WHERE file_id = ? ORDER BY version", (file_id,)
            )
        ]

    # -- trash --------------------------------------------------------------------------------

    def record_trash(
        self,
        trash_id: str,
        path: str,
        kind: Literal["file", "folder"],
        rows: dict[str, tuple[FileRow, os.stat_result]],
    ) -> None:
        """Record ``path`` (holding ``rows``) as trashed: unindexed, unshared, recoverable."""
        self.db.execute(
            "INSERT INTO trash (id, owner, original_path, kind, trashed_at) VALUES (?, ?, ?, ?, ?)",
            (trash_id, self._owner, path, kind, now()),
        )
        for row, _ in rows.values():
            self.db.execute("DELETE FROM chunks WHERE file_id = ?", (row.id,))
            self.db.execute("DELETE FROM shares WHERE file_id = ?", (row.id,))
            self.db.execute(
                "UPDATE files SET trash_id = ?, indexed = NULL WHERE id = ?", (trash_id, row.id)
            )
        condition, params = scope_sql(path, "folder_path")
        self.db.execute(
            f"DELETE FROM shares WHERE owner = ? AND {condition}", (self._owner, *params)
        )

    def trashed(self) -> list[TrashEntry]:
        """What is in the user's trash, newest first."""
        return [
            TrashEntry(*found)
            for found in self.db.execute(
                "SELECT id, original_path, kind, trashed_at FROM trash WHERE owner = ?"
                " ORDER BY trashed_at DESC, rowid DESC",
                (self._owner,),
            )
        ]

    def trashed_path(self, trash_id: str) -> str | None:
        """The path trash entry ``trash_id`` was deleted from; ``None`` if not this user's."""
        found = self.db.execute(
            "SELECT original_path FROM trash WHERE id = ? AND owner = ?", (trash_id, self._owner)
        ).fetchone()
        return None if found is None else str(found[0])

    def untrash(self, trash_id: str) -> None:
        """Make the files of trash entry ``trash_id`` live again and drop the entry."""
        self.db.execute("UPDATE files SET trash_id = NULL WHERE trash_id = ?", (trash_id,))
        self.db.execute("DELETE FROM trash WHERE id = ?", (trash_id,))

    # -- shares -------------------------------------------------------------------------------

    def share(self, key: ShareKey, value: str, *, public: bool) -> str | None:
        """Share the file id or folder path ``value`` (its token, the same while shared).

        Args:
            key: Whether ``value`` is a file id or a folder path.
            value: What to share.
            public: False to stop sharing it (then ``None``).
        """
        owned = f"owner = ? AND {key} = ?"
        if not public:
            self.db.execute(f"DELETE FROM shares WHERE {owned}", (self._owner, value))
            return None
        found = self.db.execute(
            f"SELECT token FROM shares WHERE {owned}", (self._owner, value)
        ).fetchone()
        token: str = found[0] if found else secrets.token_urlsafe(24)
        if found is None:
            self.db.execute(
                f"INSERT INTO shares (token, owner, {key}, created_at) VALUES (?, ?, ?, ?)",
                (token, self._owner, value, now()),
            )
        return token

    def live_file(self, file_id: str) -> tuple[str, str] | None:
        """The path and MIME type of this user's live file ``file_id``, if any."""
        found = self.db.execute(
            "SELECT path, mime_type FROM files WHERE id = ? AND owner = ? AND trash_id IS NULL",
            (file_id, self._owner),
        ).fetchone()
        return None if found is None else (found[0], found[1])
