"""Identity, config, conformance and resolution of the skills plugin: it needs sandbox."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from oracle_core import EnvValidationError, OracleBootError, validate_manifest
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_plugins.skills import (
    DEFAULT_CAPSULES_BASE_URL,
    SkillsConfig,
    SkillsPlugin,
    capsules_base_url,
    plugin,
    registry_network,
)
from oracle_plugins.skills.testing import SkillsRegistryDouble

from .conftest import SANDBOX_URL, stand_in_sandbox


async def test_conformance_suite_passes_with_a_sandbox_and_the_entry_point() -> None:
    report = await validate_plugin(
        plugin,
        config={"SANDBOX_MCP_URL": SANDBOX_URL},
        with_plugins=[stand_in_sandbox()],
        entry_point=True,
    )
    assert report.ok, str(report)
    visible = next(c for c in report.checks if c.name == "tools visible to the runtime")
    assert visible.detail == "list_skills, search_skills"


def test_identity_and_manifest() -> None:
    assert (plugin.name, plugin.depends_on, plugin.soft_depends_on) == ("skills", ("sandbox",), ())
    result = validate_manifest(plugin.manifest, plugin.name, {"list_skills", "search_skills"})
    assert result.valid, result.errors
    assert result.warnings == ()
    assert result.manifest is not None
    assert (result.manifest.category, result.manifest.visibility, result.manifest.stability) == (
        "data",
        "always",
        "stable",
    )
    assert plugin.auto_detect({}) is True  # On: only the sandbox dependency can turn it off
    assert plugin.auto_detect_hint
    assert "SANDBOX_MCP_URL" in plugin.auto_detect_hint


def test_config_defaults_to_the_public_registry_and_checks_the_url() -> None:
    assert SkillsConfig().SKILLS_CAPSULES_BASE_URL == "https://capsules.skills.ixo.earth"
    assert DEFAULT_CAPSULES_BASE_URL == "https://capsules.skills.ixo.earth"
    given = SkillsConfig(SKILLS_CAPSULES_BASE_URL=" https://mirror.example/skills/ ")
    assert given.SKILLS_CAPSULES_BASE_URL == "https://mirror.example/skills"
    for bad in ("capsules.skills.ixo.earth", "ftp://x.example", "https://", "https://x/?a=1"):
        with pytest.raises(ValidationError, match="SKILLS_CAPSULES_BASE_URL"):
            SkillsConfig(SKILLS_CAPSULES_BASE_URL=bad)
    assert capsules_base_url({}) == DEFAULT_CAPSULES_BASE_URL
    assert capsules_base_url({"SKILLS_CAPSULES_BASE_URL": "http://127.0.0.1:8/"}) == (
        "http://127.0.0.1:8"
    )
    with pytest.raises(ValueError, match="http"):
        capsules_base_url({"SKILLS_CAPSULES_BASE_URL": "nope"})
    assert registry_network({}) == "mainnet"
    assert registry_network({"NETWORK": "devnet"}) == "devnet"


async def test_a_bad_registry_url_fails_boot_naming_the_variable() -> None:
    with pytest.raises(EnvValidationError) as caught:
        await create_test_runtime(
            plugins=[stand_in_sandbox(), SkillsPlugin()],
            config={"SANDBOX_MCP_URL": SANDBOX_URL, "SKILLS_CAPSULES_BASE_URL": "not a url"},
        )
    assert caught.value.code == "boot.config.invalid"
    assert "SKILLS_CAPSULES_BASE_URL" in str(caught.value)


async def test_it_loads_after_the_sandbox_with_both_tools(
    registry: SkillsRegistryDouble,
) -> None:
    runtime = await create_test_runtime(
        plugins=[SkillsPlugin(), stand_in_sandbox()],
        config={"SANDBOX_MCP_URL": SANDBOX_URL, "SKILLS_CAPSULES_BASE_URL": registry.base_url},
    )
    async with runtime:
        status = runtime.status()
        assert status.loaded.index("sandbox") < status.loaded.index("skills")
        built = await runtime.build("hello")
        infos = {n: i for n, i in built.tool_infos.items() if i.owner == "skills"}
        assert sorted(infos) == ["list_skills", "search_skills"]
        assert {i.effect for i in infos.values()} == {"read"}
        assert built.degraded == []
        assert "Search before you build" in built.prompt.text


async def test_without_a_sandbox_it_cascades_off_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    runtime = await create_test_runtime(plugins=[stand_in_sandbox(), SkillsPlugin()], config={})
    async with runtime:
        status = runtime.status()
        assert "skills" not in status.loaded
        [excluded] = [e for e in status.excluded if e.plugin == "skills"]
        assert excluded.code == "dependency_excluded"
        assert "list_skills" not in await runtime.list_tools()
    warnings = [r.getMessage() for r in caplog.records if "cascaded_off" in r.getMessage()]
    assert warnings == [
        "boot.plugin.cascaded_off: plugin 'skills' excluded because dependency 'sandbox' "
        "is not loaded"
    ]


async def test_forcing_it_on_without_a_sandbox_fails_boot() -> None:
    with pytest.raises(OracleBootError) as off:
        await create_test_runtime(
            plugins=[stand_in_sandbox(), SkillsPlugin()], config={}, features={"skills": True}
        )
    assert off.value.code == "boot.plugin.dep_missing"
    with pytest.raises(OracleBootError) as absent:
        await create_test_runtime(plugins=[SkillsPlugin()], features={"skills": True})
    assert absent.value.code == "boot.plugin.dep_missing"
    assert "'sandbox'" in str(absent.value)


async def test_one_instance_serves_two_runtimes(registry: SkillsRegistryDouble) -> None:
    shared = SkillsPlugin()
    config = {"SANDBOX_MCP_URL": SANDBOX_URL, "SKILLS_CAPSULES_BASE_URL": registry.base_url}
    first = await create_test_runtime(plugins=[stand_in_sandbox(), shared], config=config)
    second = await create_test_runtime(
        plugins=[stand_in_sandbox(), shared], config={**config, "NETWORK": "testnet"}
    )
    async with first, second:
        await first.invoke_tool("list_skills", {})
        await second.invoke_tool("list_skills", {})
    assert [r.network for r in registry.requests] == ["mainnet", "testnet"]
