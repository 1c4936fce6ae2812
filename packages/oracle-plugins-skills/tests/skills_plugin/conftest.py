"""Fixtures of the skills plugin tests: keys, the registry double on loopback, UCAN, and a
stand-in sandbox plugin.

The double checks invocations with ``oracle_ucan``; the test runtime mints them with the
server's real ixo-mode UCAN service (``IxoUcanService``) from a delegation the test user
signs, so the path from ``rt_ctx.ucan`` to the registry is the production one. The real
sandbox plugin is built elsewhere; skills only needs a plugin named ``sandbox`` that is
on when ``SANDBOX_MCP_URL`` is set, as the real one will be.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from oracle_core import OraclePlugin, UcanAccessor, UserInfo, define_oracle_plugin
from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime
from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import SkillsRegistryDouble
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

SKILLS_GRANT = {"with": "ixo:skills", "can": "skills/*"}
SANDBOX_URL = "http://127.0.0.1:9/mcp"

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]
MinterFactory = Callable[..., UcanAccessor]


def stand_in_sandbox() -> OraclePlugin:
    """A plugin named ``sandbox``, on when ``SANDBOX_MCP_URL`` is set, with no tools."""

    def auto_detect(env: Mapping[str, str]) -> bool:
        return bool(env.get("SANDBOX_MCP_URL"))

    return define_oracle_plugin(
        name="sandbox",
        version="0.0.0",
        manifest={
            "title": "Sandbox (stand-in)",
            "summary": "Stands in for the sandbox plugin in the skills tests.",
            "category": "core",
            "visibility": "silent",
            "stability": "experimental",
        },
        auto_detect=auto_detect,
        auto_detect_hint="SANDBOX_MCP_URL is set",
    )


def user_delegation(user: Ed25519Signer, oracle_did: str, *, grant: Any = None) -> str:
    """The user's delegation to the oracle (skills/* on ixo:skills by default)."""
    return delegate(
        user,
        audience=oracle_did,
        capabilities=[grant or SKILLS_GRANT],
        expiration=int(time.time()) + 3600,
    ).to_base64()


@pytest.fixture
def user_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def oracle_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def make_minter(user_key: Ed25519Signer, oracle_key: Ed25519Signer) -> MinterFactory:
    """``make_minter(grant=None, delegation="", signer=True)``: ``rt_ctx.ucan`` as the
    server gives it in ixo mode. ``delegation=None``: the user gave none;
    ``signer=False``: the oracle's key is not loaded."""

    def make(
        *, grant: Any = None, delegation: str | None = "", signer: bool = True
    ) -> UcanAccessor:
        raw = (
            user_delegation(user_key, oracle_key.did(), grant=grant)
            if delegation == ""
            else delegation
        )
        service = IxoUcanService(
            oracle_did=oracle_key.did(), signer=lambda: oracle_key if signer else None
        )
        return service.for_user(UserInfo(did=user_key.did(), ucan_delegation=raw))

    return make


@pytest.fixture
async def registry(user_key: Ed25519Signer) -> AsyncIterator[SkillsRegistryDouble]:
    """The double, served on loopback, trusting ``user_key`` (who owns two private skills)."""
    double = SkillsRegistryDouble(trusted_users=[user_key.did()])
    async with LoopbackServer(double.routes) as server:
        double.origin = server.origin
        yield double


@pytest.fixture
def skills_runtime(
    registry: SkillsRegistryDouble, user_key: Ed25519Signer, make_minter: MinterFactory
) -> RuntimeFactory:
    """``async with skills_runtime(ucan="default", **options) as rt``: sandbox stand-in and
    skills on the double; ``ucan=None`` is a local oracle that cannot mint."""

    @asynccontextmanager
    async def build(
        *,
        ucan: UcanAccessor | str | None = "default",
        plugin: SkillsPlugin | None = None,
        config: Mapping[str, str] | None = None,
        model: Any = None,
    ) -> AsyncIterator[TestRuntime]:
        minter = make_minter() if ucan == "default" else ucan
        runtime = await create_test_runtime(
            plugins=[stand_in_sandbox(), plugin or SkillsPlugin()],
            config={
                "SANDBOX_MCP_URL": SANDBOX_URL,
                "SKILLS_CAPSULES_BASE_URL": registry.base_url,
                **(config or {}),
            },
            ucan=minter if not isinstance(minter, str) else None,
            user=UserInfo(did=user_key.did(), timezone="UTC"),
            model=model or ScriptedChatModel(),
        )
        async with runtime:
            yield runtime

    return build
