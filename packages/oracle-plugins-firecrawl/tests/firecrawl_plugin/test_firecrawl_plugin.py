"""The plugin as the runtime sees it: conformance, manifest, configuration, auto-detect,
and what the main agent is given."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from oracle_core import EnvValidationError, OracleBootError, validate_manifest
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_plugins.firecrawl import (
    MANIFEST,
    SUB_AGENT_TOOL,
    FirecrawlConfig,
    FirecrawlPlugin,
    plugin,
)
from oracle_plugins.firecrawl.testing import FirecrawlDouble

if TYPE_CHECKING:
    from tests.firecrawl_plugin.conftest import RuntimeFactory

SECRET_URL = "https://mcp.firecrawl.example/fc-0123456789abcdef/v2/mcp"


async def test_conformance_suite_passes_with_the_entry_point(firecrawl: FirecrawlDouble) -> None:
    report = await validate_plugin(
        plugin, config={"FIRECRAWL_MCP_URL": firecrawl.mcp_url}, entry_point=True
    )
    checks = {check.name: check for check in report.checks}
    assert report.ok
    assert checks["manifest rules"].ok
    assert checks["entry point"].ok
    assert SUB_AGENT_TOOL in checks["tools visible to the runtime"].detail


def test_manifest_has_no_warnings_and_routes_elsewhere() -> None:
    result = validate_manifest(MANIFEST, "firecrawl", [SUB_AGENT_TOOL])
    assert (result.valid, list(result.errors), list(result.warnings)) == (True, [], [])
    assert result.manifest is not None
    assert (result.manifest.category, result.manifest.visibility) == ("data", "on-demand")
    assert result.manifest.stability == "stable"
    api, ixo, *_ = result.manifest.when_not_to_use
    for marker in ("/api/", "/v1/", "/v2/", "/v3/", "JSON/XML", "sandbox"):
        assert marker in api
    assert "IXO entities" in ixo
    assert "domain indexer" in ixo


def test_config_accepts_http_urls_as_given() -> None:
    config = FirecrawlConfig.model_validate({"FIRECRAWL_MCP_URL": " http://127.0.0.1:3000/mcp/ "})
    assert config.FIRECRAWL_MCP_URL == "http://127.0.0.1:3000/mcp/"
    assert FirecrawlConfig.model_validate({"FIRECRAWL_MCP_URL": SECRET_URL}).FIRECRAWL_MCP_URL == (
        SECRET_URL
    )


@pytest.mark.parametrize(
    "bad", ["mcp.firecrawl.dev/mcp", "ftp://mcp.example/mcp", "https://", "https://h/mcp#x"]
)
def test_config_rejects_what_is_not_an_http_url(bad: str) -> None:
    with pytest.raises(ValueError, match="FIRECRAWL_MCP_URL"):
        FirecrawlConfig.model_validate({"FIRECRAWL_MCP_URL": bad})


async def test_a_bad_url_fails_boot_naming_the_variable_and_not_the_value() -> None:
    bad = "fc-0123456789abcdef@mcp.firecrawl.example/mcp"
    with pytest.raises(EnvValidationError) as caught:
        await create_test_runtime(plugins=[FirecrawlPlugin()], config={"FIRECRAWL_MCP_URL": bad})
    assert caught.value.code == "boot.config.invalid"
    message = str(caught.value)
    assert "Plugin 'firecrawl' env validation failed for 'FIRECRAWL_MCP_URL'" in message
    assert "must be an http:// or https:// URL" in message
    assert "fc-0123456789abcdef" not in message


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FIRECRAWL_MCP_URL": "http://127.0.0.1:3000/mcp"}, True),
        ({"FIRECRAWL_MCP_URL": "  "}, False),
        ({"FIRECRAWL_MCP_URL": ""}, False),
        ({}, False),
    ],
)
def test_auto_detect_is_the_url(env: dict[str, str], expected: bool) -> None:
    assert FirecrawlPlugin().auto_detect(env) is expected


async def test_off_without_the_url_and_forcing_it_on_fails_boot() -> None:
    async with await create_test_runtime(plugins=[FirecrawlPlugin()]) as runtime:
        [excluded] = runtime.status().excluded
        assert (excluded.plugin, excluded.code) == ("firecrawl", "auto_detect_failed")
        assert "FIRECRAWL_MCP_URL is set" in excluded.reason
        assert SUB_AGENT_TOOL not in await runtime.list_tools()
    # No embedded backend: web access is online.
    with pytest.raises(OracleBootError) as caught:
        await create_test_runtime(plugins=[FirecrawlPlugin()], features={"firecrawl": True})
    assert caught.value.code == "boot.plugin.env_missing"


async def test_the_main_agent_gets_the_sub_agent_only(runtime_on: RuntimeFactory) -> None:
    async with runtime_on() as runtime:
        assert runtime.status().loaded == ["firecrawl"]
        built = await runtime.build("hello")
        [entry] = [c for c in await runtime.list_capabilities() if c["name"] == "firecrawl"]
        await runtime.assert_no_collisions()
        runtime.assert_manifest_valid(allow_warnings=False)
    own = sorted(n for n, info in built.tool_infos.items() if info.owner == "firecrawl")
    assert own == [SUB_AGENT_TOOL]
    assert built.tool_infos[SUB_AGENT_TOOL].visibility == "on-demand"
    assert not [n for n in built.tool_infos if n.startswith("firecrawl_")]
    [tool] = [t for t in built.tools if t.name == SUB_AGENT_TOOL]
    assert tool.description.startswith("[Web Search] Searches the web and reads web pages")
    assert list(tool.tool_call_schema.model_json_schema()["properties"]) == ["task"]
    assert entry["visibility"] == "on-demand"
    assert built.degraded == []


async def test_one_instance_serves_two_runtimes_on_one_client(
    firecrawl: FirecrawlDouble,
) -> None:
    shared = FirecrawlPlugin()
    config = {"FIRECRAWL_MCP_URL": firecrawl.mcp_url}
    first = await create_test_runtime(plugins=[shared], config=config)
    second = await create_test_runtime(plugins=[shared], config=config)
    await first.build()
    listed = firecrawl.mcp_requests
    await first.aclose()
    async with second:
        # The second runtime's client outlives the first runtime and reuses its listing.
        built = await second.build()
    assert SUB_AGENT_TOOL in built.tool_infos
    assert firecrawl.mcp_requests == listed
