"""Fixtures of the memory plugin tests: keys, the Memory Engine double on loopback, UCAN.

The double checks every request's invocation with ``oracle_ucan``; the test runtime mints
them with the server's real ixo-mode UCAN service (``IxoUcanService``) from a delegation
the test user signs, so the whole path from ``rt_ctx.ucan`` to the engine is exercised.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

ENTITY_DID = "did:ixo:entity:memory-tests"
MEMORY_GRANT = {"with": "ixo:memory", "can": "memory/*"}

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]


def user_delegation(user: Ed25519Signer, oracle_did: str, *, grant: Any = None) -> str:
    """The user's delegation to the oracle (memory/* on ixo:memory by default)."""
    return delegate(
        user,
        audience=oracle_did,
        capabilities=[grant or MEMORY_GRANT],
        expiration=int(time.time()) + 3600,
    ).to_base64()


def minter_for(
    user: Ed25519Signer, oracle: Ed25519Signer, *, delegation: str | None = ""
) -> UcanAccessor:
    """``rt_ctx.ucan`` as the server gives it in ixo mode, for ``user``.

    ``delegation=""`` signs the default one; ``None`` means the user gave none.
    """
    raw = user_delegation(user, oracle.did()) if delegation == "" else delegation
    service = IxoUcanService(oracle_did=oracle.did(), signer=lambda: oracle)
    return service.for_user(UserInfo(did=user.did(), ucan_delegation=raw))


@pytest.fixture
def user_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def oracle_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


MinterFactory = Callable[..., UcanAccessor]


@pytest.fixture
def make_minter(user_key: Ed25519Signer, oracle_key: Ed25519Signer) -> MinterFactory:
    """``make_minter(grant=None, delegation="")``: ``rt_ctx.ucan`` for the test user."""

    def make(*, grant: Any = None, delegation: str | None = "") -> UcanAccessor:
        if grant is not None:
            delegation = user_delegation(user_key, oracle_key.did(), grant=grant)
        return minter_for(user_key, oracle_key, delegation=delegation)

    return make


@pytest.fixture
async def engine(user_key: Ed25519Signer) -> AsyncIterator[MemoryEngineDouble]:
    """The double, served on loopback, trusting ``user_key``."""
    double = MemoryEngineDouble(trusted_users=[user_key.did()])
    async with double.running(), LoopbackServer(double.routes) as server:
        double.origin = server.origin
        yield double


@pytest.fixture
def remote_runtime(
    engine: MemoryEngineDouble, user_key: Ed25519Signer, oracle_key: Ed25519Signer
) -> RuntimeFactory:
    """``async with remote_runtime(plugin=None, **options) as rt``: a runtime on the double."""

    @asynccontextmanager
    async def build(
        plugin: MemoryPlugin | None = None,
        *,
        ucan: UcanAccessor | str | None = "default",
        user: UserInfo | None = None,
        model: Any = None,
        models: Any = None,
        extra_plugins: tuple[Any, ...] = (),
        config: dict[str, str] | None = None,
    ) -> AsyncIterator[TestRuntime]:
        minter = minter_for(user_key, oracle_key) if ucan == "default" else ucan
        runtime = await create_test_runtime(
            plugins=[*extra_plugins, plugin or MemoryPlugin(reconnect_delay=0.01)],
            config={
                "MEMORY_MCP_URL": engine.mcp_url,
                "MEMORY_ENGINE_URL": engine.engine_url,
                "ORACLE_ENTITY_DID": ENTITY_DID,
                **(config or {}),
            },
            ucan=minter if not isinstance(minter, str) else None,
            user=user or UserInfo(did=user_key.did(), timezone="UTC"),
            model=model or ScriptedChatModel(),
            models=models,
        )
        async with runtime:
            yield runtime

    return build


@pytest.fixture
def embedded_runtime(tmp_path: Path) -> RuntimeFactory:
    """``async with embedded_runtime(plugin=None, **options) as rt``: SQLite in ``tmp_path``."""

    @asynccontextmanager
    async def build(
        plugin: MemoryPlugin | None = None,
        *,
        user: UserInfo | None = None,
        model: Any = None,
        models: Any = None,
        extra_plugins: tuple[Any, ...] = (),
        config: dict[str, str] | None = None,
    ) -> AsyncIterator[TestRuntime]:
        runtime = await create_test_runtime(
            plugins=[*extra_plugins, plugin or MemoryPlugin()],
            config={
                "MEMORY_BACKEND": "embedded",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "ORACLE_ENTITY_DID": ENTITY_DID,
                **(config or {}),
            },
            user=user,
            model=model or ScriptedChatModel(),
            models=models,
        )
        async with runtime:
            yield runtime

    return build
