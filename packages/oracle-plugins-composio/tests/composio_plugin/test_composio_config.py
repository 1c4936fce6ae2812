"""Identity, gate, configuration and conformance of the composio plugin."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from oracle_core import OracleBootError, validate_manifest
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_plugins.composio import (
    DEFAULT_BASE_URL,
    MANIFEST,
    ComposioConfig,
    ComposioPlugin,
    plugin,
    wants_composio,
)

from .conftest import API_KEY

URL = "COMPOSIO_BASE_URL"


def test_identity_follows_the_spec() -> None:
    assert plugin.name == "composio"
    assert isinstance(plugin, ComposioPlugin)
    assert MANIFEST["category"] == "integration"
    assert MANIFEST["visibility"] == "on-demand"
    assert MANIFEST["stability"] == "stable"
    assert plugin.config_schema is ComposioConfig
    assert plugin.auto_detect_hint == "COMPOSIO_API_KEY is set"


def test_manifest_has_no_warnings() -> None:
    result = validate_manifest(MANIFEST, "composio")
    assert result.valid, result.errors
    assert result.warnings == ()


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"COMPOSIO_API_KEY": ""}, False),
        ({"COMPOSIO_API_KEY": "   "}, False),
        ({"COMPOSIO_BASE_URL": "https://composio.example"}, False),
        ({"COMPOSIO_API_KEY": "k"}, True),
    ],
)
def test_auto_detect_is_the_api_key(env: dict[str, str], on: bool) -> None:
    assert wants_composio(env) is on
    assert plugin.auto_detect(env) is on


def test_config_defaults_and_normalises() -> None:
    config = ComposioConfig.model_validate({"COMPOSIO_API_KEY": f" {API_KEY} "})
    assert config.COMPOSIO_API_KEY == API_KEY
    assert config.COMPOSIO_BASE_URL == DEFAULT_BASE_URL == "https://composio.ixo.earth"
    trimmed = ComposioConfig.model_validate(
        {"COMPOSIO_API_KEY": "k", "COMPOSIO_BASE_URL": "http://127.0.0.1:8080/"}
    )
    assert trimmed.COMPOSIO_BASE_URL == "http://127.0.0.1:8080"
    assert API_KEY not in repr(config)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({}, "COMPOSIO_API_KEY"),
        ({"COMPOSIO_API_KEY": "  "}, "COMPOSIO_API_KEY"),
        ({"COMPOSIO_API_KEY": "k", "COMPOSIO_BASE_URL": "composio.ixo.earth"}, "COMPOSIO_BASE_URL"),
        ({"COMPOSIO_API_KEY": "k", "COMPOSIO_BASE_URL": "ftp://x.test"}, "COMPOSIO_BASE_URL"),
        (
            {"COMPOSIO_API_KEY": "k", "COMPOSIO_BASE_URL": "https://x.test/?a=1"},
            "COMPOSIO_BASE_URL",
        ),
    ],
)
def test_bad_config_names_the_variable(values: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ComposioConfig.model_validate(values)
    assert [e["loc"][0] for e in caught.value.errors()] == [field]


async def test_forced_on_without_the_key_fails_boot() -> None:
    with pytest.raises(OracleBootError) as caught:
        await create_test_runtime(plugins=[ComposioPlugin()], features={"composio": True})
    assert caught.value.code == "boot.plugin.env_missing"


async def test_auto_without_the_key_leaves_it_out() -> None:
    async with await create_test_runtime(plugins=[ComposioPlugin()]) as runtime:
        assert "composio" not in runtime.runtime.registries.manifests


async def test_validate_plugin_passes() -> None:
    # No minting backend in the conformance runtime: zero tools, and that is no degradation.
    report = await validate_plugin(
        ComposioPlugin(), config={"COMPOSIO_API_KEY": API_KEY}, entry_point=True
    )
    assert report.ok, str(report)
