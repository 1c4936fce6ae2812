"""The user's files for other plugins: bytes moved by the oracle, never by the model.

Published as the shared-state key ``vfsFiles`` (``rt_ctx.shared.get("vfsFiles")``,
``None`` when the request has no file store: no user, no signing key, or no backend).
The bridge tools (``sandbox_to_vfs`` / ``vfs_to_sandbox``) copy between the user's files
and the sandbox's (``sandboxFiles``) with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from oracle_plugins.vfs._backend import FileInfo, VfsBackend
from oracle_plugins.vfs._paths import check_path
from oracle_plugins.vfs._tools import mime_type_for

__all__ = ["VfsFiles"]


@dataclass(frozen=True)
class VfsFiles:
    """One request's user's files, as bytes.

    Every method checks the path rules first and raises
    :class:`~oracle_plugins.vfs.VfsError` on failure; ``error_text`` turns one into what
    the model should read.

    Args:
        backend: The request's backend (remote or local).
    """

    backend: VfsBackend

    async def read_bytes(self, path: str, max_bytes: int) -> tuple[bytes, str]:
        """The bytes and MIME type of ``path``; ``too_large`` beyond ``max_bytes``."""
        return await self.backend.content(check_path(path), max_bytes)

    async def write_bytes(
        self,
        path: str,
        data: bytes,
        mime_type: str | None = None,
        overwrite: bool = False,
    ) -> FileInfo:
        """Create ``path`` with ``data`` (``exists`` unless ``overwrite``).

        ``mime_type`` defaults to the one of the path's extension.
        """
        checked = check_path(path)
        return await self.backend.write(
            checked, data, mime_type or mime_type_for(checked), overwrite=overwrite
        )
