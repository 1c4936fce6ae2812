"""The disk layer of the embedded file store: one user's folder and the files in it.

:class:`UserDisk` maps user paths into the user's ``files/`` folder (refusing links that
lead out of it), walks it, writes atomically through ``staging/``, keeps version copies
in ``versions/`` and trashed entries in ``trash/``. Beside it: ``grep`` and ``glob``
(which read the disk, so hand edits show at once), and turning a file's bytes into text.
Nothing here touches the index (see ``_local_index``).
"""

from __future__ import annotations

import errno
import io
import mimetypes
import os
import re
import shutil
import uuid
from pathlib import Path

from oracle_plugins.vfs._backend import GrepMatch, ReadWindow, VfsError
from oracle_plugins.vfs._paths import check_path, parent_of

GREP_LIMIT = 200
"""Matching lines one ``grep`` returns at most."""

GLOB_LIMIT = 1000
"""Paths one ``glob`` returns at most (the first in sorted order)."""

_MAX_LINE_CHARS = 500
_BOM = b"\xef\xbb\xbf"

# The built-in table only, so a file's type does not depend on the machine's mime.types.
_MIME = mimetypes.MimeTypes()
for _ext, _type in {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
}.items():
    _MIME.add_type(_type, _ext)


def guess_mime(path: str) -> str:
    """The MIME type of ``path`` by its extension (``application/octet-stream`` unknown)."""
    return _MIME.guess_type(path, strict=False)[0] or "application/octet-stream"


def lines_of(text: str) -> list[str]:
    """The file's lines: a final newline ends the last line rather than starting one.

    Args:
        text: The file's text.

    Returns:
        The lines, without their ``\\n`` or ``\\r\\n``.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def as_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 without NUL bytes, else ``None``.

    Args:
        data: A file's bytes (a UTF-8 byte-order mark is dropped).
    """
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def text_of(path: str, data: bytes, mime_type: str) -> str:
    """A file's text for reading as lines: PDFs as their pages' text, text as itself.

    Args:
        path: The user path (for error messages).
        data: The file's bytes.
        mime_type: The file's MIME type; an octet stream starting ``%PDF-`` is a PDF.

    Raises:
        VfsError: ``unsupported`` for images, other binary files and unreadable PDFs.
    """
    sniffed_pdf = mime_type == "application/octet-stream" and data.startswith(b"%PDF-")
    if mime_type == "application/pdf" or sniffed_pdf:
        return _pdf_text(path, data)
    if mime_type.startswith("image/"):
        raise VfsError(
            "unsupported",
            f"{path} is an image ({mime_type}); reading images needs the hosted VFS's "
            "transcription, which the local store does not have",
        )
    text = as_text(data)
    if text is None:
        raise VfsError(
            "unsupported", f"{path} is binary ({mime_type}); only text and PDFs read as lines"
        )
    return text


def read_window(path: str, data: bytes, mime_type: str, offset: int, limit: int) -> ReadWindow:
    """Up to ``limit`` lines of a file from line ``offset`` (1-based), as ``read`` returns.

    Args:
        path: The user path (for error messages).
        data: The file's bytes.
        mime_type: The file's MIME type (see :func:`text_of`).
        offset: The first line wanted; below 1 reads from the start.
        limit: How many lines at most (at least one).
    """
    text = text_of(path, data, mime_type)
    lines = lines_of(text) if text else []
    start = max(offset, 1) - 1
    window = lines[start : start + max(limit, 1)]
    return ReadWindow(
        text="\n".join(window),
        offset=start + 1,
        count=len(window),
        has_more=start + len(window) < len(lines),
        total_lines=len(lines),
        mime_type=mime_type,
    )


def replace_text(
    path: str, data: bytes, old: str, new: str, *, replace_all: bool
) -> tuple[bytes, int]:
    """A text file's bytes with ``old`` replaced by ``new``, and how often it was replaced.

    Raises:
        VfsError: ``unsupported`` for non-text, ``no_match`` when ``old`` does not occur,
            ``not_unique`` when it occurs more than once and not ``replace_all``.
    """
    text = as_text(data)
    if text is None:
        raise VfsError("unsupported", f"{path} is not a text file; only text can be edited")
    count = text.count(old) if old else 0
    if count == 0:
        raise VfsError("no_match", f"the text to replace does not occur in {path}")
    if count > 1 and not replace_all:
        raise VfsError(
            "not_unique",
            f"the text to replace occurs {count} times in {path}; give more context or replace all",
        )
    edited = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    bom = _BOM if data.startswith(_BOM) else b""
    return bom + edited.encode(), count


def _pdf_text(path: str, data: bytes) -> str:
    """A PDF's text, page by page (``pypdf`` comes with ``oracle-core``)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError as exc:  # pragma: no cover - oracle-core depends on pypdf
        raise VfsError("unsupported", "reading PDFs needs pypdf: pip install pypdf") from exc
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise VfsError("unsupported", f"{path} is an encrypted PDF")
        pages = [
            f"[page {number}]\n{(page.extract_text() or '').strip()}"
            for number, page in enumerate(reader.pages, start=1)
        ]
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise VfsError("unsupported", f"{path} does not read as a PDF") from exc
    return "\n".join(pages)


def join_path(folder: str, name: str) -> str:
    """The user path of ``name`` inside user folder ``folder``."""
    return f"/{name}" if folder == "/" else f"{folder}/{name}"


def os_error(exc: OSError) -> VfsError:
    """The ``VfsError`` a disk failure stands for (``invalid_path``, ``denied``, ...).

    Args:
        exc: The failure the operating system raised.
    """
    if exc.errno == errno.ENAMETOOLONG:
        return VfsError("invalid_path", "a name in the path is too long for the local disk")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return VfsError("denied", "the local disk refused access")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return VfsError("unavailable", "the local disk is full")
    return VfsError("unavailable", f"the local disk failed: {exc.strerror or exc}")


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` within a segment, ``**`` for any number of segments."""
    out = ""
    for part in (part for part in pattern.split("/") if part):
        if part == "**":
            out += "(?:/[^/]+)*"
            continue
        out += "/" + "".join(
            "[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch) for ch in part
        )
    return re.compile(out or "/")


def _glob_base(pattern: str) -> str:
    """The folder a pattern's literal leading segments name (where the walk starts)."""
    fixed: list[str] = []
    parts = [part for part in pattern.split("/") if part]
    for part in parts[:-1]:
        if "*" in part or "?" in part:
            break
        fixed.append(part)
    return "/" + "/".join(fixed)


class UserDisk:
    """One user's folder: ``files/`` (their ``/``), ``versions/``, ``trash/``, ``staging/``.

    Args:
        area: The user's folder; it and its four subfolders are made when missing.
        max_file_bytes: The largest file read (``too_large`` beyond), grepped or indexed.
    """

    def __init__(self, area: Path, max_file_bytes: int) -> None:
        self.max_file_bytes = max_file_bytes
        self.files = area / "files"
        self.versions = area / "versions"
        self.trash = area / "trash"
        self.staging = area / "staging"
        for folder in (self.files, self.versions, self.trash, self.staging):
            folder.mkdir(parents=True, exist_ok=True)
        self._files_real = os.path.realpath(self.files)

    def resolve(self, path: str) -> Path:
        """Where user path ``path`` lives; ``denied`` if a link leads out of the folder."""
        check_path(path, root_ok=True)
        target = self.files if path == "/" else self.files.joinpath(*path[1:].split("/"))
        real = os.path.realpath(target)
        if real != self._files_real and not real.startswith(self._files_real + os.sep):
            raise VfsError("denied", f"{path} leads outside the user's folder")
        return target

    def file(self, path: str) -> Path:
        """The disk file at ``path``: ``not_found`` when absent, ``unsupported`` if a folder."""
        target = self.resolve(check_path(path))
        if target.is_dir():
            raise VfsError("unsupported", f"{path} is a folder; list it instead")
        if not target.is_file():
            raise VfsError("not_found", f"no file at {path}")
        return target

    def folder(self, path: str) -> Path:
        """The disk folder at ``path``: ``not_found`` when absent, ``unsupported`` if a file."""
        target = self.resolve(path)
        if target.is_file():
            raise VfsError("unsupported", f"{path} is a file, not a folder")
        if not target.is_dir():
            raise VfsError("not_found", f"no folder at {path}")
        return target

    def read_bytes(self, path: str, target: Path) -> bytes:
        """The bytes of ``target`` (user path ``path``); ``too_large`` past the limit."""
        size = target.stat().st_size
        if size > self.max_file_bytes:
            raise VfsError(
                "too_large",
                f"{path} is {size} bytes; the local store handles up to {self.max_file_bytes}",
            )
        return target.read_bytes()

    def walk(self, path: str) -> list[tuple[str, os.stat_result]]:
        """Every regular file at or under ``path`` (links skipped), sorted by path."""
        target = self.resolve(path)
        if target.is_file():
            return [(path, target.stat())]
        if not target.is_dir():
            raise VfsError("not_found", f"nothing at {path}")
        found: list[tuple[str, os.stat_result]] = []
        pending = [(target, path)]
        while pending:
            folder, user_path = pending.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    child = join_path(user_path, entry.name)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((Path(entry.path), child))
                    elif entry.is_file(follow_symlinks=False):
                        found.append((child, entry.stat(follow_symlinks=False)))
        return sorted(found, key=lambda item: item[0])

    def make_folders(self, folder: str) -> None:
        """Make ``folder`` and its missing parents; ``occupied`` where a file is in the way."""
        ancestors = []
        while folder != "/":
            ancestors.append(folder)
            folder = parent_of(folder)
        for ancestor in reversed(ancestors):
            target = self.resolve(ancestor)
            if target.is_file():
                raise VfsError("occupied", f"{ancestor} is a file, not a folder")
            target.mkdir(exist_ok=True)

    def replace(self, target: Path, data: bytes) -> None:
        """Write ``data`` to ``target`` atomically: readers see the old or the new bytes."""
        staged = self.staging / uuid.uuid4().hex
        try:
            with staged.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(staged, target)
        finally:
            staged.unlink(missing_ok=True)

    def version_file(self, file_id: str, version: int) -> Path:
        """Where version ``version`` of file ``file_id`` is kept."""
        return self.versions / file_id / str(version)

    def keep_copy(self, file_id: str, version: int, target: Path) -> Path:
        """Keep the content of ``target`` as version ``version`` of ``file_id``; the copy."""
        (self.versions / file_id).mkdir(exist_ok=True)
        copy = self.version_file(file_id, version)
        copy.unlink(missing_ok=True)
        try:
            os.link(target, copy)  # the replace gives the live path a new inode
        except OSError:
            shutil.copyfile(target, copy)
        return copy

    def drop_versions(self, file_id: str) -> None:
        """Remove every kept version of ``file_id``."""
        shutil.rmtree(self.versions / file_id, ignore_errors=True)

    def trashed(self, trash_id: str) -> Path:
        """Where trash entry ``trash_id`` is kept."""
        return self.trash / trash_id

    def grep(self, q: str, path: str) -> list[GrepMatch]:
        """Lines holding ``q`` exactly in text files under ``path``, in path and line order.

        At most :data:`GREP_LIMIT` matches; each line is cut to 500 characters.
        """
        matches: list[GrepMatch] = []
        if not q:
            return matches
        for file_path, stat in self.walk(check_path(path, root_ok=True)):
            if stat.st_size > self.max_file_bytes:
                continue
            text = as_text(self.resolve(file_path).read_bytes())
            for number, line in enumerate(lines_of(text or ""), start=1):
                if q in line:
                    matches.append(GrepMatch(file_path, number, line[:_MAX_LINE_CHARS]))
                    if len(matches) >= GREP_LIMIT:
                        return matches
        return matches

    def glob(self, pattern: str) -> list[str]:
        """Sorted file paths matching ``pattern``; at most :data:`GLOB_LIMIT`."""
        if "\x00" in pattern:
            return []
        base = _glob_base(pattern)
        regex = _glob_regex(pattern)
        try:
            candidates = self.walk(base)
        except VfsError as exc:
            if exc.kind in ("not_found", "invalid_path"):
                return []  # no such folder, or a literal segment no path can hold
            raise
        return [path for path, _ in candidates if regex.fullmatch(path)][:GLOB_LIMIT]
