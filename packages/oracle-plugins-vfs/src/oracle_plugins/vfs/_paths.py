"""The path rules (03-plugins §17.3), checked before any request reaches a store."""

from __future__ import annotations

from oracle_plugins.vfs._backend import VfsError

__all__ = ["MAX_PATH", "check_path", "parent_of"]

MAX_PATH = 1024


def check_path(path: str, *, root_ok: bool = False) -> str:
    """``path`` when it is absolute, at most 1,024 characters, without ``//``, a trailing
    ``/``, ``.``/``..`` segments or NUL; else ``VfsError("invalid_path")``.

    ``root_ok`` admits ``/`` itself (a folder argument such as a search scope).
    """
    if root_ok and path == "/":
        return path
    problem = None
    if not path.startswith("/"):
        problem = "paths are absolute: they start with '/'"
    elif len(path) > MAX_PATH:
        problem = f"paths are at most {MAX_PATH} characters"
    elif "\x00" in path:
        problem = "paths must not hold NUL characters"
    elif "//" in path:
        problem = "paths must not hold '//'"
    elif path.endswith("/"):
        problem = "paths must not end with '/'"
    elif any(part in (".", "..") for part in path.split("/")):
        problem = "paths must not hold '.' or '..' segments"
    if problem is not None:
        raise VfsError("invalid_path", f"{problem} (got {path[:200]!r})")
    return path


def parent_of(path: str) -> str:
    """The folder holding ``path`` (``/`` for a top-level entry)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"
