"""The plugin as the runtime sees it: conformance, manifest, configuration, auto-detect."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from langchain_core.messages import ToolMessage

from oracle_core import EnvValidationError, OracleBootError, validate_manifest
from oracle_core.testing import (
    ScriptedChatModel,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_plugins.domain_indexer import (
    DOMAIN_INDEXER_URLS,
    MANIFEST,
    DomainIndexerConfig,
    DomainIndexerPlugin,
    plugin,
    resolve_base_url,
)
from oracle_plugins.domain_indexer.testing import DomainIndexerDouble


@pytest.fixture
async def indexer() -> AsyncIterator[DomainIndexerDouble]:
    async with DomainIndexerDouble() as double:
        yield double


async def test_conformance_suite_passes_with_the_entry_point(
    indexer: DomainIndexerDouble,
) -> None:
    report = await validate_plugin(
        plugin, config={"DOMAIN_INDEXER_URL": indexer.base_url}, entry_point=True
    )
    assert report.ok
    assert "entry point" in [check.name for check in report.checks]
    assert "manifest rules" in [check.name for check in report.checks]


def test_manifest_has_no_warnings() -> None:
    result = validate_manifest(MANIFEST, "domain-indexer", ["call_domain_indexer_agent"])
    assert (result.valid, list(result.errors), list(result.warnings)) == (True, [], [])


async def test_registers_one_always_visible_sub_agent(indexer: DomainIndexerDouble) -> None:
    runtime = await create_test_runtime(
        plugins=[DomainIndexerPlugin()], config={"DOMAIN_INDEXER_URL": indexer.base_url}
    )
    async with runtime:
        assert runtime.status().loaded == ["domain-indexer"]
        assert await runtime.list_tools() == [
            "list_capabilities",
            "load_capability",
            "call_domain_indexer_agent",
        ]
        [entry] = await runtime.list_capabilities()
        assert (entry["name"], entry["visibility"], entry["loaded"]) == (
            "domain-indexer",
            "always",
            True,
        )
        built = await runtime.build("hello")
        assert "- **domain-indexer** — Look up IXO entities" in built.prompt.text
        [tool] = [t for t in built.tools if t.name == "call_domain_indexer_agent"]
        assert tool.description.startswith("[Domain Indexer] Looks up IXO entities")
        assert list(tool.tool_call_schema.model_json_schema()["properties"]) == ["task"]
        await runtime.assert_no_collisions()
        runtime.assert_manifest_valid(allow_warnings=False)
    # Nothing was looked up at boot or while building.
    assert indexer.requests == []


@pytest.mark.parametrize("network", ["mainnet", "testnet", "devnet"])
def test_the_network_picks_the_public_indexer(network: str) -> None:
    assert resolve_base_url({"NETWORK": network}, None) == DOMAIN_INDEXER_URLS[network]


def test_the_override_wins_and_mainnet_is_the_fallback() -> None:
    assert DOMAIN_INDEXER_URLS == {
        "mainnet": "https://domain-indexer.ixo.earth",
        "testnet": "https://domain-indexer.testnet.ixo.earth",
        "devnet": "https://domain-indexer.devnet.ixo.earth",
    }
    override = "http://127.0.0.1:8080/indexer"
    assert resolve_base_url({"NETWORK": "devnet"}, override) == override
    assert resolve_base_url({"NETWORK": None}, None) == DOMAIN_INDEXER_URLS["mainnet"]


def test_config_accepts_urls_and_catalogs_and_rejects_the_rest() -> None:
    assert DomainIndexerConfig().DOMAIN_INDEXER_URL is None
    url = DomainIndexerConfig.model_validate({"DOMAIN_INDEXER_URL": "https://idx.example/v1/"})
    assert url.DOMAIN_INDEXER_URL == "https://idx.example/v1"
    catalog = DomainIndexerConfig.model_validate({"DOMAIN_INDEXER_URL": "sqlite:///./cards.db"})
    assert catalog.DOMAIN_INDEXER_URL == "sqlite:///./cards.db"
    for bad in ("not-a-url", "ftp://idx.example", "https://", "https://idx.example/?a=1"):
        with pytest.raises(ValueError, match="DOMAIN_INDEXER_URL"):
            DomainIndexerConfig.model_validate({"DOMAIN_INDEXER_URL": bad})


async def test_a_bad_url_fails_boot_naming_the_variable() -> None:
    with pytest.raises(EnvValidationError) as caught:
        await create_test_runtime(
            plugins=[DomainIndexerPlugin()], config={"DOMAIN_INDEXER_URL": "indexer.local"}
        )
    assert "Plugin 'domain-indexer' env validation failed for 'DOMAIN_INDEXER_URL'" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ORACLE_BACKEND": "ixo", "NETWORK": "testnet"}, True),
        ({}, True),  # ixo is the default backend, where NETWORK is required anyway
        ({"ORACLE_BACKEND": "local", "NETWORK": "devnet"}, True),
        ({"ORACLE_BACKEND": "local", "DOMAIN_INDEXER_URL": "http://127.0.0.1:1"}, True),
        ({"ORACLE_BACKEND": "local"}, False),
        ({"ORACLE_BACKEND": "local", "NETWORK": ""}, False),
    ],
)
def test_auto_detect_keeps_a_local_oracle_offline(env: dict[str, str], expected: bool) -> None:
    assert DomainIndexerPlugin().auto_detect(env) is expected


async def test_a_local_oracle_without_network_leaves_it_off() -> None:
    runtime = await create_test_runtime(plugins=[DomainIndexerPlugin()])
    async with runtime:
        [excluded] = runtime.status().excluded
        assert (excluded.plugin, excluded.code) == ("domain-indexer", "auto_detect_failed")
        assert "call_domain_indexer_agent" not in await runtime.list_tools()
    with pytest.raises(OracleBootError) as caught:
        await create_test_runtime(
            plugins=[DomainIndexerPlugin()], features={"domain-indexer": True}
        )
    assert caught.value.code == "boot.plugin.env_missing"


async def test_network_alone_turns_it_on_against_the_public_indexer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="oracle.test")
    runtime = await create_test_runtime(
        plugins=[DomainIndexerPlugin()], config={"NETWORK": "testnet"}
    )
    async with runtime:
        assert runtime.status().loaded == ["domain-indexer"]
    assert "domain indexer at https://domain-indexer.testnet.ixo.earth" in caplog.messages


async def test_one_instance_serves_two_runtimes(indexer: DomainIndexerDouble) -> None:
    shared = DomainIndexerPlugin()
    config = {"DOMAIN_INDEXER_URL": indexer.base_url}
    sub = ScriptedChatModel([call_tool("domain_indexer_search", {"query": "water"}), reply("ok")])
    first = await create_test_runtime(plugins=[shared], config=config)
    second = await create_test_runtime(plugins=[shared], config=config, model=sub)
    await first.aclose()
    async with second:
        # The second runtime's connection pool outlives the first runtime's shutdown.
        assert await second.invoke_sub_agent("call_domain_indexer_agent", "water?") == "ok"
    [message] = [m for m in sub.calls[-1].messages if isinstance(m, ToolMessage)]
    assert message.status == "success"
    assert len(indexer.searches()) == 1
