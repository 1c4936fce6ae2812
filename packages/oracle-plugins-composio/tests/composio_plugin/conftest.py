"""Fixtures of the composio plugin tests: keys, the worker double on loopback, UCAN.

The double checks every request's invocation with ``oracle_ucan`` (single-use, as the
worker does); the test runtime mints them with the server's real ixo-mode UCAN service
(``IxoUcanService``) from a delegation the test user signs, so the whole path from
``rt_ctx.ucan`` to the worker is exercised.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime, mark_sensitive
from oracle_plugins.composio import ComposioPlugin
from oracle_plugins.composio.testing import ComposioWorkerDouble
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

SANDBOX_GRANT = {"with": "ixo:sandbox", "can": "sandbox/*"}
API_KEY = "composio-test-api-key-0123456789"
mark_sensitive(API_KEY)

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]
MinterFactory = Callable[..., UcanAccessor]


def user_delegation(user: Ed25519Signer, oracle_did: str, *, grant: Any = None) -> str:
    """The user's delegation to the oracle (sandbox/* on ixo:sandbox by default)."""
    return delegate(
        user,
        audience=oracle_did,
        capabilities=[grant or SANDBOX_GRANT],
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


@pytest.fixture
def make_minter(user_key: Ed25519Signer, oracle_key: Ed25519Signer) -> MinterFactory:
    """``make_minter(grant=None, delegation="")``: ``rt_ctx.ucan`` for the test user."""

    def make(*, grant: Any = None, delegation: str | None = "") -> UcanAccessor:
        if grant is not None:
            delegation = user_delegation(user_key, oracle_key.did(), grant=grant)
        return minter_for(user_key, oracle_key, delegation=delegation)

    return make


@pytest.fixture
async def worker(user_key: Ed25519Signer) -> AsyncIterator[ComposioWorkerDouble]:
    """The double, served on loopback, trusting ``user_key``."""
    double = ComposioWorkerDouble(trusted_users=[user_key.did()], api_key=API_KEY)
    async with LoopbackServer(double.routes) as server:
        double.origin = server.origin
        yield double


@pytest.fixture
def composio_runtime(
    worker: ComposioWorkerDouble, user_key: Ed25519Signer, oracle_key: Ed25519Signer
) -> RuntimeFactory:
    """``async with composio_runtime(plugin=None, **options) as rt``: on the double."""

    @asynccontextmanager
    async def build(
        plugin: ComposioPlugin | None = None,
        *,
        ucan: UcanAccessor | str | None = "default",
        user: UserInfo | None = None,
        config: dict[str, str] | None = None,
    ) -> AsyncIterator[TestRuntime]:
        minter = minter_for(user_key, oracle_key) if ucan == "default" else ucan
        runtime = await create_test_runtime(
            plugins=[plugin or ComposioPlugin()],
            config={
                "COMPOSIO_API_KEY": API_KEY,
                "COMPOSIO_BASE_URL": worker.base_url,
                "NETWORK": "devnet",
                **(config or {}),
            },
            ucan=minter if not isinstance(minter, str) else None,
            user=user or UserInfo(did=user_key.did(), timezone="UTC"),
            model=ScriptedChatModel(),
        )
        async with runtime:
            yield runtime

    return build
