"""The oracle's UCAN signing key: where it comes from and who reads it once it is known."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from oracle_server._settings import ServerSettings
from oracle_ucan import Ed25519Signer

__all__ = ["DEV_KEY_FILE", "OracleKey", "development_key", "oracle_signer"]

DEV_KEY_FILE = "oracle-dev-key.txt"


def oracle_signer(settings: ServerSettings) -> Ed25519Signer | None:
    """The key known at boot: ``ORACLE_SIGNING_MNEMONIC``, or in local mode a development
    key kept under ``SQLITE_DATABASE_PATH`` (created on first run); else ``None`` (the
    Matrix layer reads it from the account room)."""
    if settings.oracle_signing_mnemonic:
        return Ed25519Signer.from_mnemonic(settings.oracle_signing_mnemonic)
    if not settings.is_local:
        return None
    return development_key(Path(settings.sqlite_path) / DEV_KEY_FILE)


def development_key(path: Path) -> Ed25519Signer:
    """The key kept in ``path`` (ucanto's private-key text), made on first use (mode 600).

    Made whole under a temporary name and linked into place, so processes starting at
    once (``oracle serve --workers``) all end with the one key that won, never a key
    another process overwrote or a half-written file.
    """
    if path.exists():
        return Ed25519Signer.parse(path.read_text().strip())
    path.parent.mkdir(parents=True, exist_ok=True)
    signer = Ed25519Signer.generate()
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(signer.format() + "\n")
        os.link(draft, path)
    except FileExistsError:
        return Ed25519Signer.parse(path.read_text().strip())
    finally:
        draft.unlink(missing_ok=True)
    return signer


class OracleKey:
    """The oracle's signing key, shared by everything that signs or waits for it.

    Known at boot (``oracle_signer``), or set later by the Matrix layer when it reads the
    key from the account room; the UCAN service mints with it and readiness waits for it.

    Attributes:
        signer: The key, ``None`` until known.
    """

    def __init__(self, signer: Ed25519Signer | None = None) -> None:
        self.signer = signer

    def __call__(self) -> Ed25519Signer | None:
        """The key now (the shape ``IxoUcanService(signer=…)`` reads it in)."""
        return self.signer
