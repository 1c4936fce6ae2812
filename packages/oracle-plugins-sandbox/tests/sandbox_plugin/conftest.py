"""Fixtures of the sandbox plugin tests: keys, the hosted-sandbox double on loopback, UCAN,
and the embedded sandbox (bubblewrap installed when missing).

The double checks every request's invocation with ``oracle_ucan``; the test runtime mints
with the server's real ixo-mode UCAN service from a delegation the test user signs.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime
from oracle_plugins.sandbox import SandboxPlugin
from oracle_plugins.sandbox.testing import SandboxDouble
from oracle_sandbox.testing import ensure_bubblewrap, reachable_folder
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

SANDBOX_GRANT = {"with": "ixo:sandbox", "can": "sandbox/*"}
SKILLS_GRANT = {"with": "ixo:skills", "can": "skills/*"}

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]


class SwitchableMinter:
    """The server's real UCAN accessor for the user, whose minting can be switched off
    (as when the user's delegation lapses between two requests)."""

    def __init__(self, inner: UcanAccessor) -> None:
        self.inner = inner
        self.minting = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def mint_invocation(
        self, did: str, capability: str, *, can: str = "*", skip_cache: bool = False
    ) -> str | None:
        if not self.minting:
            return None
        return await self.inner.mint_invocation(did, capability, can=can, skip_cache=skip_cache)


def minter_for(
    user: Ed25519Signer, oracle: Ed25519Signer, grants: list[dict[str, str]] | None
) -> SwitchableMinter:
    """``rt_ctx.ucan`` as the server gives it in ixo mode; ``grants=None``: no delegation."""
    raw = (
        delegate(
            user, audience=oracle.did(), capabilities=grants, expiration=int(time.time()) + 3600
        ).to_base64()
        if grants is not None
        else None
    )
    service = IxoUcanService(oracle_did=oracle.did(), signer=lambda: oracle)
    return SwitchableMinter(service.for_user(UserInfo(did=user.did(), ucan_delegation=raw)))


@pytest.fixture
def user_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def oracle_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
async def hosted(user_key: Ed25519Signer) -> AsyncIterator[SandboxDouble]:
    """The hosted-sandbox double, served on loopback, trusting ``user_key``."""
    double = SandboxDouble(trusted_users=[user_key.did()])
    async with double.running(), LoopbackServer(double.routes) as server:
        double.origin = server.origin
        yield double


@pytest.fixture
def remote_runtime(
    hosted: SandboxDouble, user_key: Ed25519Signer, oracle_key: Ed25519Signer
) -> RuntimeFactory:
    """``async with remote_runtime(plugin=None, grants=…, **options) as rt``."""

    @asynccontextmanager
    async def build(
        plugin: SandboxPlugin | None = None,
        *,
        grants: list[dict[str, str]] | None = [SANDBOX_GRANT],  # noqa: B006 (never mutated)
        minter: SwitchableMinter | None = None,
        secrets: dict[str, str] | None = None,
        config: dict[str, str] | None = None,
        extra_plugins: tuple[Any, ...] = (),
    ) -> AsyncIterator[TestRuntime]:
        runtime = await create_test_runtime(
            plugins=[*extra_plugins, plugin or SandboxPlugin(reconnect_delay=0.01)],
            config={"SANDBOX_MCP_URL": hosted.mcp_url, **(config or {})},
            ucan=minter or minter_for(user_key, oracle_key, grants),
            user=UserInfo(did=user_key.did(), timezone="UTC"),
            secrets=secrets,
            model=ScriptedChatModel(),
        )
        async with runtime:
            yield runtime

    return build


@pytest.fixture(scope="session")
def bubblewrap() -> str:
    """``bwrap``, installed first when missing (Debian, as root)."""
    return ensure_bubblewrap()


@pytest.fixture
def sandbox_root(bubblewrap: str) -> Iterator[Path]:
    """A folder for an embedded sandbox that its unprivileged user can reach."""
    root = reachable_folder()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def embedded_env(root: Path) -> dict[str, str]:
    """The variables selecting the embedded sandbox, with small limits."""
    return {
        "SANDBOX_BACKEND": "embedded",
        "SANDBOX_ROOT": str(root),
        "SANDBOX_WALL_SECONDS": "10",
        "SANDBOX_CPU_SECONDS": "5",
        "SANDBOX_MEMORY_MB": "512",
    }
