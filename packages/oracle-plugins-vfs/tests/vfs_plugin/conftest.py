"""Fixtures of the vfs plugin tests: keys, the VFS worker and UCAN Store doubles on
loopback, and a test runtime whose ``rt_ctx.ucan`` is the server's ixo-mode service.

The oracle is a ``did:key`` here (the doubles verify it without a resolver); the user
signs a delegation of ``fs/*`` on ``ixo:filesystem`` to it, kept in the store double.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from oracle_core import UserInfo
from oracle_core.testing import TestRuntime, create_test_runtime
from oracle_plugins.vfs import VfsPlugin
from oracle_plugins.vfs.testing import UcanStoreDouble, VfsWorkerDouble
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

FS_GRANT = {"with": "ixo:filesystem", "can": "fs/*"}

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]


def user_delegation(
    user: Ed25519Signer, oracle_did: str, *, grants: list[dict[str, str]] | None = None
) -> str:
    """The user's delegation to the oracle (``fs/*`` on ``ixo:filesystem`` by default)."""
    return delegate(
        user,
        audience=oracle_did,
        capabilities=grants or [FS_GRANT],
        expiration=int(time.time()) + 3600,
    ).to_base64()


@pytest.fixture
def user_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def oracle_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
async def worker(tmp_path: Path, user_key: Ed25519Signer) -> AsyncIterator[VfsWorkerDouble]:
    """The VFS worker double on loopback, trusting ``user_key``."""
    double = VfsWorkerDouble(tmp_path / "vfs", trusted_users=[user_key.did()])
    async with LoopbackServer(double.routes) as served:
        double.origin = served.origin
        yield double


@pytest.fixture
async def store(
    user_key: Ed25519Signer, oracle_key: Ed25519Signer
) -> AsyncIterator[UcanStoreDouble]:
    """The UCAN Store double on loopback, holding the user's grant to the oracle."""
    double = UcanStoreDouble(oracle_key.did())
    double.grant(user_delegation(user_key, oracle_key.did()))
    async with LoopbackServer(double.routes) as served:
        double.origin = served.origin
        yield double


@pytest.fixture
def vfs_runtime(
    worker: VfsWorkerDouble,
    store: UcanStoreDouble,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> RuntimeFactory:
    """``async with vfs_runtime(signer=True, config=None, plugin=None) as rt``."""

    @asynccontextmanager
    async def build(
        *,
        signer: bool = True,
        config: Mapping[str, str] | None = None,
        plugin: VfsPlugin | None = None,
    ) -> AsyncIterator[TestRuntime]:
        service = IxoUcanService(
            oracle_did=oracle_key.did(), signer=lambda: oracle_key if signer else None
        )
        user = UserInfo(did=user_key.did(), timezone="UTC")
        runtime = await create_test_runtime(
            plugins=[plugin or VfsPlugin()],
            config={
                # The test runtime is a local one: name the backend.
                "VFS_BACKEND": "remote",
                "VFS_URL": worker.base_url,
                "UCAN_STORE_URL": store.base_url,
                "ORACLE_DID": oracle_key.did(),
                **(config or {}),
            },
            ucan=service.for_user(user),
            user=user,
        )
        async with runtime:
            yield runtime

    return build


async def call(rt: TestRuntime, tool: str, args: Mapping[str, Any] | None = None) -> str:
    """Run one tool and return what the model reads."""
    result = await rt.invoke_tool(tool, args or {})
    assert isinstance(result, str), result
    return result
