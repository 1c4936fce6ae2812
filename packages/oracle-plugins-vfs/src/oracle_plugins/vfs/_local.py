"""The embedded file store (03-plugins §17.7): each user's files in a folder of their own.

Layout under ``root``::

    index.sqlite3                  ids, MIME types, versions, trash, share tokens, FTS5
    users/<sha256 of the DID>/
        files/                     the user's ``/``: real files a person can open
        versions/<file id>/<n>     earlier contents, newest 50 kept
        trash/<trash id>           deleted files and folders, kept whole
        staging/                   writes land here first, then replace their target

User paths only ever resolve inside ``files/``, so no user path reaches the index, the
versions, the trash or another user's folder, and the folder name never shows the DID.
The disk is the truth for what exists; the index follows it. Files edited, added or
removed by hand are picked up lazily: ``list`` gives new files ids, ``search``
reconciles its scope and re-indexes every file whose size, mtime or inode changed.

Choices where the remote worker differs:

* Versions: an overwrite or edit keeps the replaced content as a version; past
  :data:`MAX_VERSIONS` the oldest is pruned (the remote worker refuses with
  ``version_limit`` instead, which would leave a local user unable to save).
* Search is FTS5 (BM25) over 20-line chunks of text files: all terms first, any term
  when that finds nothing. ``SearchResult.semantic`` is always False.
* Sharing: a file's token follows the file (moves keep it, deleting ends it). A shared
  folder's token serves an HTML index of the files under it *when served*; each entry
  links to ``<folder token>.<file id>``, which serves that file while it stays under the
  folder. Unsharing the folder kills all of those; files shared on their own keep their
  own tokens.

One store per ``root`` per process: the index is one SQLite connection behind a lock,
and every operation (index and disk) runs under that lock in a worker thread.

This module holds the store, the per-user async layer and sharing; the disk layer is
``_local_disk`` and the index layer ``_local_index``.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import html
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from oracle_plugins.vfs._backend import (
    DeleteResult,
    FileInfo,
    GrepMatch,
    Node,
    ReadWindow,
    SearchResult,
    VfsError,
)
from oracle_plugins.vfs._local_disk import (
    GLOB_LIMIT,
    GREP_LIMIT,
    UserDisk,
    guess_mime,
    join_path,
    os_error,
    read_window,
    replace_text,
)
from oracle_plugins.vfs._local_index import (
    MAX_VERSIONS,
    SEARCH_LIMIT,
    ShareKey,
    TrashEntry,
    UserIndex,
    open_index,
    share_of,
)
from oracle_plugins.vfs._paths import check_path, parent_of

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "GLOB_LIMIT",
    "GREP_LIMIT",
    "MAX_VERSIONS",
    "SEARCH_LIMIT",
    "LocalVfs",
    "LocalVfsStore",
    "TrashEntry",
]

DEFAULT_MAX_FILE_BYTES = 25 * 1024 * 1024
"""Largest file the store writes, reads, indexes or serves (``too_large`` beyond)."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
_FILE_ID = re.compile(r"[0-9a-f]{32}")

_T = TypeVar("_T")


def _under(path: str, scope: str) -> bool:
    return scope in ("/", path) or path.startswith(scope + "/")


class LocalVfsStore:
    """The embedded store: one index and one folder per user under ``root``.

    Args:
        root: The store's folder (made when missing).
        max_file_bytes: The largest file written, read, indexed or served.

    Close it with :meth:`close` (or use it as a context manager).
    """

    def __init__(self, root: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        if max_file_bytes < 1:
            raise ValueError("max_file_bytes must be positive")
        self.root = root
        self.max_file_bytes = max_file_bytes
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = open_index(root / "index.sqlite3")

    def __enter__(self) -> LocalVfsStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the index; later calls fail with ``unavailable``. Safe to call twice."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @property
    def _connection(self) -> sqlite3.Connection:
        """The index connection (only under the lock); ``unavailable`` once closed."""
        if self._db is None:
            raise VfsError("unavailable", "the local file store is closed")
        return self._db

    def for_user(self, user_did: str, *, public_base_url: str | None = None) -> LocalVfs:
        """The files of ``user_did``, a :class:`~oracle_plugins.vfs._backend.VfsBackend`.

        Args:
            user_did: The user; their folder is named by the DID's SHA-256.
            public_base_url: Where the host serves ``/vfs/public/{token}``; ``share``
                returns a root-relative URL without it.
        """
        if not user_did:
            raise ValueError("user_did must not be empty")
        owner = hashlib.sha256(user_did.encode()).hexdigest()
        return LocalVfs(self, owner, public_base_url)

    def _run(self, call: Callable[[], _T]) -> _T:
        """Run ``call`` under the store's lock, disk failures turned into ``VfsError``."""
        with self._lock:
            try:
                return call()
            except OSError as exc:
                raise os_error(exc) from exc
            except sqlite3.Error as exc:
                raise VfsError("unavailable", f"the local file index failed: {exc}") from exc

    def _user_folder(self, owner: str) -> Path:
        """The folder of the user whose DID hashes to ``owner``."""
        return self.root / "users" / owner

    def public_file(self, token: str) -> tuple[bytes, str, str] | None:
        """The bytes, MIME type and file name a share token serves; ``None`` when dead.

        Blocking: from asyncio use :meth:`read_public`. A shared folder's token serves an
        HTML index of its files (relative links to their ``<token>.<file id>`` tokens).
        """
        folder_token, _, file_id = token.partition(".")
        if not _TOKEN.fullmatch(folder_token) or (file_id and not _FILE_ID.fullmatch(file_id)):
            return None
        try:
            return self._run(lambda: self._public(folder_token, file_id))
        except VfsError:
            return None

    async def read_public(self, token: str) -> tuple[bytes, str, str] | None:
        """:meth:`public_file` in a worker thread."""
        return await asyncio.to_thread(self.public_file, token)

    def _public(self, token: str, file_id: str) -> tuple[bytes, str, str] | None:
        share = share_of(self._connection, token)
        if share is None:
            return None
        owner, shared_file, folder = share
        files = LocalVfs(self, owner, None)
        if shared_file is not None:
            return None if file_id else files._public_bytes(shared_file, "/")
        assert folder is not None  # the schema's CHECK: a share without a file has a folder
        if file_id:
            return files._public_bytes(file_id, folder)
        return files._folder_index(folder, token)


class LocalVfs:
    """One user's files in a :class:`LocalVfsStore`; implements ``VfsBackend``.

    Make it with :meth:`LocalVfsStore.for_user`. Every method runs in a worker thread.
    (``builtins.list`` in annotations: inside the class ``list`` is the method.)
    """

    def __init__(self, store: LocalVfsStore, owner: str, public_base_url: str | None) -> None:
        self._store = store
        self._base_url = (public_base_url or "").rstrip("/")
        self._disk = UserDisk(store._user_folder(owner), store.max_file_bytes)
        self._index = UserIndex(lambda: store._connection, owner, self._disk)

    # -- the backend protocol ------------------------------------------------------------

    async def search(self, q: str, path: str = "/") -> SearchResult:
        """FTS5 (BM25) search of text files under ``path``; re-indexes changed files first.

        All of the query's words must match; when no file has them all, any word does.
        Hits cite the lines holding a query word (the whole chunk when the match was a
        stemmed form). ``score`` is the negated BM25: higher is better.
        """
        return await self._call(lambda: self._index.search(q, check_path(path, root_ok=True)))

    async def grep(self, q: str, path: str = "/") -> builtins.list[GrepMatch]:
        """Lines holding ``q`` exactly (case-sensitive) in text files under ``path``.

        At most :data:`GREP_LIMIT` matches, in path and line order; each line is cut to
        500 characters. Reads the disk, so hand edits show at once.
        """
        return await self._call(lambda: self._disk.grep(q, path))

    async def glob(self, pattern: str) -> builtins.list[str]:
        """Sorted file paths matching ``pattern``: ``*``/``?`` in a segment, ``**`` across.

        A pattern not starting with ``/`` is taken from the root. At most
        :data:`GLOB_LIMIT` paths.
        """
        return await self._call(lambda: self._disk.glob(pattern))

    async def list(self, path: str = "/") -> builtins.list[Node]:
        """The direct children of folder ``path``: folders first, then files, by name."""
        return await self._call(lambda: self._list(path))

    async def read(self, path: str, offset: int, limit: int) -> ReadWindow:
        """Up to ``limit`` lines from line ``offset`` (1-based), joined with ``\\n``.

        PDFs read as their text (``[page N]`` headers); images and other binary files are
        ``unsupported``.
        """
        return await self._call(lambda: self._read(path, offset, limit))

    async def content(self, path: str, max_bytes: int) -> tuple[bytes, str]:
        """The file's bytes and MIME type; ``too_large`` beyond ``max_bytes``."""
        return await self._call(lambda: self._content(path, max_bytes))

    async def write(self, path: str, data: bytes, mime_type: str, *, overwrite: bool) -> FileInfo:
        """Create ``path`` (and missing folders); ``exists`` unless ``overwrite``.

        An overwrite keeps the replaced content as a version. ``mime_type`` empty: guessed
        from the extension.
        """
        return await self._call(lambda: self._write(path, data, mime_type, overwrite=overwrite))

    async def edit(self, path: str, old: str, new: str, *, replace_all: bool) -> int:
        """Replace the exact string ``old`` by ``new``; the number of replacements."""
        return await self._call(lambda: self._edit(path, old, new, replace_all=replace_all))

    async def move(self, source: str, destination: str) -> FileInfo | Node:
        """Move or rename a file or folder; ids, versions and shares follow it."""
        return await self._call(lambda: self._move(source, destination))

    async def delete(self, paths: builtins.list[str]) -> builtins.list[DeleteResult]:
        """Move each path to the trash; absent ones are ``missing``.

        Every path is checked first, so an invalid one trashes nothing.
        """
        return await self._call(lambda: self._delete(paths))

    async def share(self, path: str, *, public: bool) -> str | None:
        """Publish (the public URL, the same while shared) or unpublish (``None``)."""
        return await self._call(lambda: self._share(path, public=public))

    # -- beyond the protocol ---------------------------------------------------------------

    async def trashed(self) -> builtins.list[TrashEntry]:
        """What is in the user's trash, newest first."""
        return await self._call(self._index.trashed)

    async def restore(self, trash_id: str) -> FileInfo | Node:
        """Put a trashed file or folder back at its path (``occupied`` if taken)."""
        return await self._call(lambda: self._restore(trash_id))

    async def versions(self, path: str) -> builtins.list[int]:
        """The version numbers kept for a file's earlier contents, oldest first."""
        return await self._call(lambda: self._version_numbers(path))

    async def read_version(self, path: str, version: int) -> bytes:
        """An earlier content of a file (``not_found`` when not kept)."""
        return await self._call(lambda: self._read_version(path, version))

    # -- serving shares (called by the store under its lock) ------------------------------

    def _public_bytes(self, file_id: str, folder: str) -> tuple[bytes, str, str] | None:
        """A live file of this user, if it lies under ``folder``."""
        row = self._index.live_file(file_id)
        if row is None or not _under(row[0], folder):
            return None
        target = self._disk.resolve(row[0])
        if not target.is_file() or target.stat().st_size > self._disk.max_file_bytes:
            return None
        return target.read_bytes(), row[1], row[0].rsplit("/", 1)[1]

    def _folder_index(self, folder: str, token: str) -> tuple[bytes, str, str] | None:
        """An HTML page linking to each file under a shared folder."""
        if not self._disk.resolve(folder).is_dir():
            return None
        name = folder.rsplit("/", 1)[1]
        with self._db:
            files = self._index.reconcile(folder)
        items = "".join(
            f'<li><a href="{token}.{row.id}">{html.escape(path[len(folder) + 1 :])}</a></li>'
            for path, (row, _) in files.items()
        )
        page = (
            f"<!doctype html><meta charset=utf-8><title>{html.escape(name)}</title>"
            f"<h1>{html.escape(name)}</h1><ul>{items}</ul>\n"
        )
        return page.encode(), "text/html; charset=utf-8", f"{name}.html"

    def _share(self, path: str, *, public: bool) -> str | None:
        target = self._disk.resolve(check_path(path))
        if not target.exists():
            raise VfsError("not_found", f"nothing at {path}")
        with self._db:
            key: ShareKey
            if target.is_dir():
                key, value = "folder_path", path
            else:
                key, value = "file_id", self._index.track(path).id
            token = self._index.share(key, value, public=public)
        return None if token is None else f"{self._base_url}/vfs/public/{token}"

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        return self._store._connection

    async def _call(self, call: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(self._store._run, call)

    # -- reading ------------------------------------------------------------------------------

    def _list(self, path: str) -> builtins.list[Node]:
        folder = self._disk.folder(check_path(path, root_ok=True))
        nodes: builtins.list[Node] = []
        with self._db, os.scandir(folder) as entries:
            for entry in entries:
                child = join_path(path, entry.name)
                if entry.is_dir(follow_symlinks=False):
                    nodes.append(Node(child, "folder"))
                elif entry.is_file(follow_symlinks=False):
                    row = self._index.track(child)
                    size = entry.stat(follow_symlinks=False).st_size
                    nodes.append(Node(child, "file", row.id, size, row.mime_type))
        return sorted(nodes, key=lambda node: (node.kind != "folder", node.path))

    def _read(self, path: str, offset: int, limit: int) -> ReadWindow:
        target = self._disk.file(path)
        row = self._index.row(path)
        mime_type = row.mime_type if row else guess_mime(path)
        return read_window(path, self._disk.read_bytes(path, target), mime_type, offset, limit)

    def _content(self, path: str, max_bytes: int) -> tuple[bytes, str]:
        target = self._disk.file(path)
        size = target.stat().st_size
        if size > max_bytes:
            raise VfsError("too_large", f"{path} is {size} bytes; at most {max_bytes} here")
        row = self._index.row(path)
        return self._disk.read_bytes(path, target), row.mime_type if row else guess_mime(path)

    def _version_numbers(self, path: str) -> builtins.list[int]:
        self._disk.file(path)
        row = self._index.row(path)
        return [] if row is None else self._index.version_numbers(row.id)

    def _read_version(self, path: str, version: int) -> bytes:
        if version not in self._version_numbers(path):
            raise VfsError("not_found", f"{path} has no version {version} kept")
        row = self._index.row(path)
        assert row is not None  # versions exist only for tracked files
        return self._disk.version_file(row.id, version).read_bytes()

    # -- writing ------------------------------------------------------------------------------

    def _write(self, path: str, data: bytes, mime_type: str, *, overwrite: bool) -> FileInfo:
        target = self._disk.resolve(check_path(path))
        if len(data) > self._disk.max_file_bytes:
            raise VfsError(
                "too_large",
                f"{len(data)} bytes; the local store keeps files up to {self._disk.max_file_bytes}",
            )
        if target.is_dir():
            raise VfsError("occupied", f"a folder is at {path}; a file cannot replace it")
        with self._db:
            if target.is_file():
                if not overwrite:
                    raise VfsError("exists", f"{path} already exists")
                row = self._index.track(path)
                version = self._index.keep_version(row, target)
            else:
                self._disk.make_folders(parent_of(path))
                stale = self._index.row(path)  # removed by hand since the store saw it
                if stale is not None:
                    self._index.forget(stale)
                row, version = self._index.track(path, mime_type), 1
            self._disk.replace(target, data)
            mime_type = mime_type or row.mime_type
            self._index.mark_written(row.id, mime_type, version)
        return FileInfo(path, row.id, len(data), mime_type, version)

    def _edit(self, path: str, old: str, new: str, *, replace_all: bool) -> int:
        target = self._disk.file(path)
        data = self._disk.read_bytes(path, target)
        edited, count = replace_text(path, data, old, new, replace_all=replace_all)
        self._write(path, edited, "", overwrite=True)
        return count

    def _move(self, source: str, destination: str) -> FileInfo | Node:
        source, destination = check_path(source), check_path(destination)
        origin, target = self._disk.resolve(source), self._disk.resolve(destination)
        if not origin.exists():
            raise VfsError("not_found", f"nothing at {source}")
        if destination.startswith(source + "/"):
            raise VfsError("invalid_path", f"cannot move {source} into itself")
        if source != destination:
            if target.exists():
                raise VfsError("occupied", f"{destination} is taken")
            with self._db:
                self._index.reconcile(source)
                for stale in self._index.rows_under(destination):
                    self._index.forget(stale)
                self._disk.make_folders(parent_of(destination))
                os.rename(origin, target)
                self._index.repath(source, destination)
        return self._describe(destination, target)

    def _describe(self, path: str, target: Path) -> FileInfo | Node:
        if target.is_dir():
            return Node(path, "folder")
        with self._db:
            row = self._index.track(path)
        return FileInfo(path, row.id, target.stat().st_size, row.mime_type, row.version)

    def _delete(self, paths: builtins.list[str]) -> builtins.list[DeleteResult]:
        for path in paths:
            check_path(path)
        return [self._trash_one(path) for path in paths]

    def _trash_one(self, path: str) -> DeleteResult:
        try:
            target = self._disk.resolve(path)
        except VfsError as exc:
            return DeleteResult(path, "failed", exc.detail)
        if not target.exists():
            return DeleteResult(path, "missing")
        trash_id = uuid.uuid4().hex
        kind: Literal["file", "folder"] = "folder" if target.is_dir() else "file"
        try:
            with self._db:
                rows = self._index.reconcile(path)
                os.rename(target, self._disk.trashed(trash_id))
                self._index.record_trash(trash_id, path, kind, rows)
        except OSError as exc:
            return DeleteResult(path, "failed", os_error(exc).detail)
        return DeleteResult(path, "trashed")

    def _restore(self, trash_id: str) -> FileInfo | Node:
        path = self._index.trashed_path(trash_id)
        if path is None or not self._disk.trashed(trash_id).exists():
            raise VfsError("not_found", "no such entry in the trash")
        target = self._disk.resolve(path)
        if target.exists():
            raise VfsError("occupied", f"{path} is taken; move it away first")
        with self._db:
            for stale in self._index.rows_under(path):
                self._index.forget(stale)
            self._disk.make_folders(parent_of(path))
            os.rename(self._disk.trashed(trash_id), target)
            self._index.untrash(trash_id)
        return self._describe(path, target)
