"""``skills_invocation``: the ``ixo:skills`` invocation the sandbox sends as
``X-Skills-Invocation`` and the tools send as ``Authorization``."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from oracle_core import RuntimeContext, UserInfo
from oracle_core.testing import TestRuntime
from oracle_plugins.skills import SKILLS_ABILITY, SKILLS_CAPABILITY, skills_invocation
from oracle_plugins.skills.testing import Caller, SkillsRegistryDouble
from oracle_ucan import Delegation, Ed25519Signer

from .conftest import MinterFactory, RuntimeFactory


async def request_context(runtime: TestRuntime) -> RuntimeContext[Any]:
    built = await runtime.build("hello")
    ctx = built.context.runtime_context
    assert ctx is not None
    return ctx.for_plugin("skills")


async def test_it_mints_for_the_registry_did_with_the_skills_ability(
    registry: SkillsRegistryDouble,
    skills_runtime: RuntimeFactory,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with skills_runtime() as rt:
        token = await skills_invocation(await request_context(rt), registry.base_url)
    assert token is not None
    invocation = Delegation.from_base64(token)
    assert invocation.audience == registry.did
    assert invocation.issuer == oracle_key.did()
    assert [(c["with"], c["can"]) for c in invocation.capabilities] == [
        (SKILLS_CAPABILITY, SKILLS_ABILITY)
    ]
    # The registry accepts it, as the sandbox's registry calls will.
    headers = {"authorization": f"Bearer {token}", "x-auth-type": "ucan"}
    assert await registry.authenticate(headers) == Caller(user_key.did(), oracle_key.did())
    assert all(token not in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("case", "logged"),
    [
        ("local", None),
        ("no key", None),
        ("no grant", "does not grant skills/* on ixo:skills"),
        ("no did document", "skills registry DID not resolved (LookupError)"),
        ("no user", None),
    ],
)
async def test_it_returns_none_whenever_it_cannot_mint(
    registry: SkillsRegistryDouble,
    skills_runtime: RuntimeFactory,
    make_minter: MinterFactory,
    caplog: pytest.LogCaptureFixture,
    case: str,
    logged: str | None,
) -> None:
    ucan = {
        "local": None,
        "no key": make_minter(signer=False),
        "no grant": make_minter(grant={"with": "ixo:memory", "can": "memory/*"}),
    }.get(case, make_minter())
    registry.serve_did_document = case != "no did document"
    caplog.set_level(logging.INFO)
    async with skills_runtime(ucan=ucan) as rt:
        ctx = await request_context(rt)
        if case == "no user":
            ctx = dataclasses.replace(ctx, user=UserInfo(did=""))
        assert await skills_invocation(ctx, registry.base_url) is None
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("oracle.test.plugin")]
    skills_logs = [m for m in messages if "skills" in m and "registry at" not in m]
    if logged is None:
        assert skills_logs == []
    else:
        assert any(logged in m for m in skills_logs), skills_logs
    assert registry.rejected == []
