"""What the vfs tools need from a file store: one user's files, remote or local.

``RemoteVfs`` (the IXO VFS worker over REST, two-hop UCAN) and ``LocalVfs`` (a directory
with an SQLite index: trash, versions, FTS5) both implement :class:`VfsBackend`. Paths
reaching a backend have passed :func:`oracle_plugins.vfs._paths.check_path`. A backend
raises :class:`VfsError` with one of the :data:`VfsErrorKind` kinds; the tools turn the
kind into what the model reads, so both backends fail in the same words.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "DeleteResult",
    "FileInfo",
    "GrepMatch",
    "Node",
    "ReadWindow",
    "SearchHit",
    "SearchResult",
    "VfsBackend",
    "VfsError",
    "VfsErrorKind",
]

VfsErrorKind = Literal[
    "invalid_path",  # the path rules (checked before any request)
    "no_delegation",  # no delegation for this oracle in the UCAN store (remote only)
    "denied",  # 403: outside the granted scope, or the grant is read-only
    "not_found",  # 404: missing, or outside the granted scope
    "exists",  # 409 on create: the path is taken (ask before overwriting)
    "not_unique",  # 409 on edit: oldString occurs more than once without replaceAll
    "no_match",  # edit: oldString does not occur
    "occupied",  # 409 on move: the destination is taken
    "version_limit",  # 409: the file has the most versions the store keeps
    "conflict",  # 409: modified concurrently (after the one retry)
    "too_large",  # 413: narrow the scope
    "unsupported",  # 415: a type this operation cannot handle
    "busy",  # 429 (after the one retry)
    "unavailable",  # 5xx, 503, network (after the retry where one applies)
]


class VfsError(Exception):
    """A file operation failed; ``kind`` says how, ``detail`` is safe to show the user."""

    def __init__(self, kind: VfsErrorKind, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind: VfsErrorKind = kind
        self.detail = detail


@dataclass(frozen=True)
class Node:
    """A direct child of a folder. ``path`` is absolute; folders have ``kind="folder"``."""

    path: str
    kind: Literal["file", "folder"]
    id: str | None = None
    size: int | None = None
    mime_type: str | None = None


@dataclass(frozen=True)
class FileInfo:
    """A file after a write or a move."""

    path: str
    id: str
    size: int
    mime_type: str
    version: int | None = None


@dataclass(frozen=True)
class SearchHit:
    """A file that matches, with the line ranges (1-based, inclusive) that back it."""

    path: str
    lines: tuple[tuple[int, int], ...] = ()
    snippet: str = ""
    score: float | None = None


@dataclass(frozen=True)
class SearchResult:
    """Search hits; ``semantic`` is False when only lexical matching answered."""

    hits: tuple[SearchHit, ...]
    semantic: bool


@dataclass(frozen=True)
class GrepMatch:
    """One line holding the exact term."""

    path: str
    line: int
    text: str


@dataclass(frozen=True)
class ReadWindow:
    """A window of a file's lines. ``offset`` is the first line's number (1-based)."""

    text: str
    offset: int
    count: int
    has_more: bool
    total_lines: int
    mime_type: str = "text/plain"


@dataclass(frozen=True)
class DeleteResult:
    """What became of one path of a delete: ``trashed``, ``missing`` or ``failed``."""

    path: str
    status: Literal["trashed", "missing", "failed"]
    error: str | None = None


class VfsBackend(Protocol):
    """One user's files. Every method may raise :class:`VfsError`.

    (``builtins.list`` in annotations below the ``list`` method: inside the class the name
    ``list`` is that method.)"""

    async def search(self, q: str, path: str = "/") -> SearchResult:
        """Hybrid (or, locally, FTS5) search under ``path``."""
        ...

    async def grep(self, q: str, path: str = "/") -> list[GrepMatch]:
        """Lines holding ``q`` exactly, under ``path``."""
        ...

    async def glob(self, pattern: str) -> list[str]:
        """File paths matching ``pattern`` (``*`` within a segment, ``**`` across)."""
        ...

    async def list(self, path: str = "/") -> list[Node]:
        """The direct children of folder ``path``."""
        ...

    async def read(self, path: str, offset: int, limit: int) -> ReadWindow:
        """Up to ``limit`` lines from line ``offset`` (1-based)."""
        ...

    async def content(self, path: str, max_bytes: int) -> tuple[bytes, str]:
        """The file's bytes and MIME type; ``too_large`` beyond ``max_bytes``."""
        ...

    async def write(self, path: str, data: bytes, mime_type: str, *, overwrite: bool) -> FileInfo:
        """Create ``path``; an existing file is ``exists`` unless ``overwrite``."""
        ...

    async def edit(self, path: str, old: str, new: str, *, replace_all: bool) -> int:
        """Replace ``old`` by ``new``; the number of replacements."""
        ...

    async def move(self, source: str, destination: str) -> FileInfo | Node:
        """Move or rename a file or folder."""
        ...

    async def delete(self, paths: builtins.list[str]) -> builtins.list[DeleteResult]:
        """Move each path to the trash (recoverable); missing ones are reported."""
        ...

    async def share(self, path: str, *, public: bool) -> str | None:
        """Publish (the public URL) or unpublish (``None``) a file or folder."""
        ...
