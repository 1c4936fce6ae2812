"""The isolation tests need bubblewrap: installed here when missing (Debian, as root)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from oracle_sandbox import BubblewrapSandbox, SandboxLimits
from oracle_sandbox.testing import ensure_bubblewrap, reachable_folder


@pytest.fixture(scope="session")
def bubblewrap() -> str:
    """The path of ``bwrap``, installing the package first when it is missing."""
    return ensure_bubblewrap()


@pytest.fixture
def sandbox(bubblewrap: str) -> Iterator[BubblewrapSandbox]:
    """A sandbox with small limits, its workspaces in a folder of its own under ``/tmp``
    (pytest's own temporary folders are private: the sandbox user could not reach
    them)."""
    root = reachable_folder()
    limits = SandboxLimits(
        cpu_seconds=3, memory_bytes=512 * 1024 * 1024, processes=32, output_bytes=4096,
        wall_seconds=5.0, file_bytes=8 * 1024 * 1024,
    )  # fmt: skip
    try:
        yield BubblewrapSandbox(root / "workspaces", limits=limits)
    finally:
        shutil.rmtree(root, ignore_errors=True)
