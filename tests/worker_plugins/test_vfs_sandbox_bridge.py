"""The vfs bridge tools on one machine: the user's files on the embedded vfs backend,
code in the embedded sandbox (bubblewrap), bytes copied by the oracle, never the model."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oracle_core.testing import TestRuntime, create_test_runtime
from oracle_plugins.sandbox import SandboxPlugin
from oracle_plugins.vfs import VfsPlugin
from oracle_sandbox.testing import ensure_bubblewrap, reachable_folder

PAYLOAD = bytes(range(256)) * 40  # every byte value: a text conversion would show
"""A binary file of 10 KiB."""


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    ensure_bubblewrap()
    root = reachable_folder()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _env(sandbox_root: Path, files: Path) -> dict[str, str]:
    return {
        "SANDBOX_BACKEND": "embedded",
        "SANDBOX_ROOT": str(sandbox_root),
        "SANDBOX_WALL_SECONDS": "10",
        "VFS_LOCAL_ROOT": str(files),
    }


async def _json(rt: TestRuntime, tool: str, args: dict[str, Any]) -> Any:
    answer = await rt.invoke_tool(tool, args)
    assert isinstance(answer, str), answer
    return json.loads(answer)


async def _user_files(rt: TestRuntime) -> Any:
    ctx = (await rt.build("hello")).context.runtime_context
    assert ctx is not None
    assert ctx.shared is not None
    return ctx.shared.get("vfsFiles")


async def test_a_binary_file_goes_to_the_sandbox_and_a_result_comes_back(
    sandbox_root: Path, tmp_path: Path
) -> None:
    plugins = [SandboxPlugin(), VfsPlugin()]
    async with await create_test_runtime(
        plugins=plugins, config=_env(sandbox_root, tmp_path / "files")
    ) as rt:
        assert {"sandbox_to_vfs", "vfs_to_sandbox", "sandbox_run"} <= set(await rt.list_tools())
        files = await _user_files(rt)
        await files.write_bytes("/in/blob.bin", PAYLOAD)

        there = await _json(
            rt, "vfs_to_sandbox", {"vfsPath": "/in/blob.bin", "sandboxPath": "/workspace/data/b"}
        )
        run = await _json(
            rt,
            "sandbox_run",
            {"code": "sha256sum /workspace/data/b | cut -c1-64 | tee /workspace/data/sum.txt"},
        )
        back = await _json(
            rt,
            "sandbox_to_vfs",
            {"sandboxPath": "/workspace/data/b", "vfsPath": "/out/blob.bin"},
        )
        moved = await _json(
            rt,
            "sandbox_to_vfs",
            {
                "sandboxPath": "/workspace/data/sum.txt",
                "vfsPath": "/out/sum.txt",
                "deleteSource": True,
            },
        )
        gone = await _json(rt, "sandbox_run", {"code": "ls /workspace/data"})
        returned, _ = await files.read_bytes("/out/blob.bin", max_bytes=len(PAYLOAD))
        digest, mime_type = await files.read_bytes("/out/sum.txt", max_bytes=100)

    assert there["ok"] is True
    assert there["bytes"] == len(PAYLOAD)
    assert run["stdout"].strip() == hashlib.sha256(PAYLOAD).hexdigest()  # byte for byte
    assert back["bytes"] == len(PAYLOAD)
    assert returned == PAYLOAD
    assert digest.decode().strip() == hashlib.sha256(PAYLOAD).hexdigest()
    assert mime_type == "text/plain"
    assert moved["deletedSource"] is True
    assert set(gone["stdout"].split()) == {"b", "output"}  # sum.txt moved, b only copied
    # On disk, as a user of the machine sees their files.
    on_disk = list((tmp_path / "files").rglob("blob.bin"))
    assert [p.read_bytes() for p in on_disk] == [PAYLOAD, PAYLOAD]


async def test_the_bridge_keeps_its_rules(sandbox_root: Path, tmp_path: Path) -> None:
    plugins = [SandboxPlugin(), VfsPlugin()]
    async with await create_test_runtime(
        plugins=plugins, config=_env(sandbox_root, tmp_path / "files")
    ) as rt:
        files = await _user_files(rt)
        await files.write_bytes("/in/a.txt", b"alpha\n")
        outside = await rt.invoke_tool(
            "vfs_to_sandbox", {"vfsPath": "/in/a.txt", "sandboxPath": "/tmp/a.txt"}
        )
        relative = await rt.invoke_tool(
            "sandbox_to_vfs", {"sandboxPath": "/workspace/data/a", "vfsPath": "in/a.txt"}
        )
        missing = await rt.invoke_tool(
            "vfs_to_sandbox", {"vfsPath": "/in/none.txt", "sandboxPath": "/workspace/data/n"}
        )
        kept = await _json(
            rt,
            "vfs_to_sandbox",
            {"vfsPath": "/in/a.txt", "sandboxPath": "/workspace/data/a", "deleteSource": True},
        )
        taken = await rt.invoke_tool(
            "sandbox_to_vfs", {"sandboxPath": "/workspace/data/a", "vfsPath": "/in/a.txt"}
        )
        no_file = await rt.invoke_tool(
            "sandbox_to_vfs", {"sandboxPath": "/workspace/data/zz", "vfsPath": "/in/zz.txt"}
        )
        still, _ = await files.read_bytes("/in/a.txt", max_bytes=100)

    assert (
        outside == "Error: sandbox paths here are files under /workspace/data/ (got '/tmp/a.txt')."
    )
    assert relative.startswith("Invalid path: paths are absolute")
    assert "was not found" in missing
    assert kept["ok"] is True
    assert "vfs_delete" in kept["note"]  # the user's file is not deleted by a copy tool
    assert still == b"alpha\n"
    assert "already exists" in taken  # no overwrite without asking
    assert no_file.startswith("Error:")


async def test_without_a_sandbox_there_are_no_bridge_tools(tmp_path: Path) -> None:
    config = {"VFS_LOCAL_ROOT": str(tmp_path / "files")}
    async with await create_test_runtime(plugins=[VfsPlugin()], config=config) as rt:
        names = await rt.list_tools()
    assert "vfs_write" in names
    assert not {"sandbox_to_vfs", "vfs_to_sandbox"} & set(names)
