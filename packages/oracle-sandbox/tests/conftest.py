"""The isolation tests need bubblewrap: installed here when missing (Debian, as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle_sandbox import BubblewrapSandbox, SandboxLimits


def _install_bubblewrap() -> None:
    if shutil.which("bwrap") is not None:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.fail("these tests need bubblewrap: apt-get install bubblewrap")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    installed = subprocess.run(
        ["apt-get", "install", "-y", "-q", "bubblewrap"], env=env, capture_output=True, check=False
    )
    if installed.returncode != 0:  # the package lists may be missing on a fresh machine
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "bubblewrap"],
            env=env,
            capture_output=True,
            check=True,
        )


@pytest.fixture(scope="session")
def bubblewrap() -> str:
    """The path of ``bwrap``, installing the package first when it is missing."""
    _install_bubblewrap()
    path = shutil.which("bwrap")
    assert path is not None
    return path


@pytest.fixture
def sandbox(bubblewrap: str) -> Iterator[BubblewrapSandbox]:
    """A sandbox with small limits, its workspaces in a folder of its own under ``/tmp``
    (pytest's own temporary folders are private: the sandbox user could not reach
    them)."""
    root = Path(tempfile.mkdtemp(prefix="oracle-sandbox-"))
    root.chmod(0o711)
    limits = SandboxLimits(
        cpu_seconds=3, memory_bytes=512 * 1024 * 1024, processes=32, output_bytes=4096,
        wall_seconds=5.0, file_bytes=8 * 1024 * 1024,
    )  # fmt: skip
    try:
        yield BubblewrapSandbox(root / "workspaces", limits=limits)
    finally:
        shutil.rmtree(root, ignore_errors=True)
