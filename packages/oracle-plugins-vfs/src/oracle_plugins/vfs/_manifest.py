"""What the model and the operator read about the vfs plugin."""

from __future__ import annotations

from typing import Any

__all__ = ["MANIFEST", "OPERATING_GUIDE"]

MANIFEST: dict[str, Any] = {
    "title": "Files",
    "summary": "The user's own files: search, read, write, edit, move, trash and share them.",
    "when_to_use": [
        "The user mentions their files, documents or notes",
        "Find something in the user's files (vfs_search by meaning, vfs_grep exact text)",
        "Save something for the user to keep (vfs_write)",
        "Share a file with a public link (vfs_share)",
    ],
    "when_not_to_use": [
        "Scratch work or running code: use the sandbox",
        "Facts about the user: use memory",
    ],
    "examples": [
        {
            "user": "What did I write about the budget?",
            "tool": "vfs_search",
            "args": {"q": "budget"},
        },
        {
            "user": "Save these meeting notes",
            "tool": "vfs_write",
            "args": {"path": "/notes/meeting.md", "content": "# Meeting\n..."},
        },
    ],
    "tags": ["files", "documents", "storage", "search"],
    "category": "data",
    "visibility": "always",
    "stability": "stable",
    # Without the VFS worker (forced on, ORACLE_BACKEND=local): a local directory.
    "backends": {"variable": "VFS_BACKEND", "default": "remote", "embedded": "embedded"},
}

OPERATING_GUIDE = """\
- Paths are absolute (/notes/todo.md). Read before you edit; vfs_edit needs the exact text.
- Never overwrite without asking: vfs_write refuses an existing file until the user agrees.
- When a tool says access was denied, say so; do not tell the user a file is missing.
- Without vfs_* tools the user has not granted this oracle their files: they grant it in \
Portal → the domain → Library → Files → Access → Manage access, with the oracle's DID.
- The file store is not end-to-end encrypted; never describe it as zero-knowledge."""
