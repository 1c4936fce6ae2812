"""Identity, manifest, config, conformance and the ``vfsFiles`` shared state."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oracle_core import validate_manifest
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_plugins.vfs import (
    TOOL_NAMES,
    VfsConfig,
    VfsError,
    VfsFiles,
    VfsPlugin,
    VfsReads,
    plugin,
)
from oracle_plugins.vfs.testing import VfsWorkerDouble

from .conftest import RuntimeFactory


async def test_conformance_suite_passes_with_the_entry_point() -> None:
    report = await validate_plugin(plugin, entry_point=True)
    assert report.ok, str(report)
    visible = next(c for c in report.checks if c.name == "tools visible to the runtime")
    # A local runtime runs the embedded backend: the ten tools, no UCAN needed.
    assert visible.detail == ", ".join(TOOL_NAMES)


def test_identity_and_manifest() -> None:
    # No dependency: the sandbox is an optional sibling (its files feed the bridge tools).
    assert (plugin.name, plugin.depends_on, plugin.soft_depends_on) == ("vfs", (), ("sandbox",))
    result = validate_manifest(plugin.manifest, plugin.name, set(TOOL_NAMES))
    assert result.valid, result.errors
    assert result.warnings == ()
    assert result.manifest is not None
    manifest = result.manifest
    assert (manifest.category, manifest.visibility, manifest.stability) == (
        "data",
        "always",
        "stable",
    )
    assert manifest.backends is not None
    assert (manifest.backends.variable, manifest.backends.default) == ("VFS_BACKEND", "remote")
    assert plugin.auto_detect({}) is True
    assert plugin.auto_detect({"ORACLE_BACKEND": "ixo"}) is True
    assert plugin.auto_detect({"ORACLE_BACKEND": "local"}) is False
    assert plugin.auto_detect({"ORACLE_BACKEND": "local", "VFS_BACKEND": "remote"}) is True
    assert plugin.auto_detect({"ORACLE_BACKEND": "local", "VFS_LOCAL_ROOT": "/srv"}) is True
    wire = str(manifest.to_wire()) + str(plugin.operating_guide)
    assert "zero-knowledge" not in wire.replace("never describe it as zero-knowledge", "")


def test_config_defaults_networks_and_overrides() -> None:
    config = VfsConfig()
    assert (config.VFS_MAX_READ_LINES, config.VFS_REQUEST_TIMEOUT_MS) == (2000, 20000)
    assert config.backend == "remote"
    assert VfsConfig(VFS_LOCAL_ROOT="/srv/files").backend == "embedded"
    assert VfsConfig(VFS_LOCAL_ROOT="/srv/files", VFS_BACKEND="remote").backend == "remote"
    assert VfsConfig(VFS_MAX_READ_LINES=9000).max_read_lines == 5000
    expected = {
        None: ("https://devnet.vfs.ixo.earth", "https://devnet.store.ucan.ixo.earth"),
        "devnet": ("https://devnet.vfs.ixo.earth", "https://devnet.store.ucan.ixo.earth"),
        "testnet": ("https://testnet.vfs.ixo.earth", "https://testnet.store.ucan.ixo.earth"),
        "mainnet": ("https://vfs.ixo.earth", "https://store.ucan.ixo.earth"),
    }
    for network, (vfs, store) in expected.items():
        reads = VfsReads.from_config({"NETWORK": network} if network else {})
        assert (reads.vfs_url(config), reads.ucan_store_url(config)) == (vfs, store)
    custom = VfsConfig(VFS_URL="http://127.0.0.1:9/", UCAN_STORE_URL="http://127.0.0.1:8")
    reads = VfsReads.from_config({"NETWORK": "mainnet", "PORT": 4100})
    assert (reads.vfs_url(custom), reads.ucan_store_url(custom)) == (
        "http://127.0.0.1:9",
        "http://127.0.0.1:8",
    )
    assert reads.public_base_url(config) == "http://127.0.0.1:4100"
    assert reads.public_base_url(VfsConfig(VFS_PUBLIC_BASE_URL="https://o.example/")) == (
        "https://o.example"
    )
    assert VfsReads.from_config({"SANDBOX_MCP_URL": "http://s/mcp"}).sandbox_mcp_url == (
        "http://s/mcp"
    )
    for bad in ({"VFS_URL": "vfs.ixo.earth"}, {"VFS_MAX_READ_LINES": 0}, {"VFS_BACKEND": "x"}):
        with pytest.raises(ValidationError):
            VfsConfig.model_validate(bad)


async def test_local_mode_runs_the_embedded_backend_and_ixo_style_names_remote() -> None:
    async with await create_test_runtime(plugins=[VfsPlugin()]) as local:
        assert local.runtime.backends == {"vfs": "embedded"}
        assert [n for n in await local.list_tools() if n.startswith("vfs_")] == list(TOOL_NAMES)
    named = await create_test_runtime(plugins=[VfsPlugin()], config={"VFS_BACKEND": "remote"})
    async with named:
        assert named.runtime.backends == {"vfs": "remote"}


async def test_a_bad_variable_fails_boot_naming_it() -> None:
    with pytest.raises(Exception, match="VFS_REQUEST_TIMEOUT_MS"):
        await create_test_runtime(plugins=[VfsPlugin()], config={"VFS_REQUEST_TIMEOUT_MS": "-1"})


async def test_vfs_files_moves_bytes_for_other_plugins(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/in/photo.png", b"\x89PNG\r\n", "image/png")
    async with vfs_runtime() as rt:
        ctx = (await rt.build()).context.runtime_context
        assert ctx is not None
        assert ctx.shared is not None
        files = ctx.shared.get("vfsFiles")
        assert isinstance(files, VfsFiles)
        data, mime = await files.read_bytes("/in/photo.png", max_bytes=1024)
        info = await files.write_bytes("/out/copy.csv", b"a,b\n")
        with pytest.raises(VfsError) as exists:
            await files.write_bytes("/out/copy.csv", b"c")
        with pytest.raises(VfsError) as large:
            await files.read_bytes("/in/photo.png", max_bytes=2)
        with pytest.raises(VfsError) as invalid:
            await files.read_bytes("in/photo.png", max_bytes=2)
        replaced = await files.write_bytes("/out/copy.csv", b"c", "text/x-c", overwrite=True)
    assert (data, mime) == (b"\x89PNG\r\n", "image/png")
    assert (info.path, info.size, info.mime_type) == ("/out/copy.csv", 4, "text/csv")
    assert (exists.value.kind, large.value.kind, invalid.value.kind) == (
        "exists",
        "too_large",
        "invalid_path",
    )
    assert (replaced.version, replaced.mime_type) == (2, "text/x-c")
    assert [c.ability for c in worker.calls_to("/files/{id}/content")] == ["fs/read"]


async def test_vfs_files_is_none_without_a_signing_key(vfs_runtime: RuntimeFactory) -> None:
    async with vfs_runtime(signer=False) as rt:
        ctx = (await rt.build()).context.runtime_context
        assert ctx is not None
        assert ctx.shared is not None
        assert ctx.shared.get("vfsFiles") is None
