"""For tests that run the embedded sandbox: bubblewrap, installed when missing, and a
folder the sandbox user can reach."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["ensure_bubblewrap", "reachable_folder"]


def ensure_bubblewrap() -> str:
    """The path of ``bwrap``, installing the Debian package first when it is missing.

    Raises:
        RuntimeError: it is missing and cannot be installed here (not root, no apt).
    """
    found = shutil.which("bwrap")
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError("these tests need bubblewrap: apt-get install bubblewrap")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", "bubblewrap"]
    if subprocess.run(command, env=env, capture_output=True, check=False).returncode != 0:
        # The package lists may be missing on a fresh machine.
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=True)
        subprocess.run(command, env=env, capture_output=True, check=True)
    found = shutil.which("bwrap")
    if found is None:
        raise RuntimeError("bubblewrap was installed but bwrap is not on PATH")
    return found


def reachable_folder(prefix: str = "oracle-sandbox-") -> Path:
    """A new folder under the system's temporary folder that the sandbox user can walk
    into (pytest's own temporary folders are private to root). The caller removes it."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    return root
