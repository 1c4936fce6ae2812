"""Backend selection from ``manifest.backends`` (03-plugins §0): embedded defaults.

A plugin declares the variable that names its backend, the backend of its outside
service, and optionally an embedded one. The runtime picks: the named backend, else the
default when ``auto_detect`` passes, else the embedded one when forced on or in local
mode — and tells the plugin through its own variable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from oracle_core import (
    ManifestBackends,
    OracleBootError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
)
from oracle_core._resolution import BackendSelection, resolve
from oracle_core.testing import create_test_runtime

LOGGER = logging.getLogger("oracle.test.backends")


class SearchConfig(BaseModel):
    """The search plugin's variables."""

    SEARCH_URL: str | None = None
    SEARCH_BACKEND: str | None = None


def search_plugin(*, embedded: str | None = "index", local: bool = True) -> OraclePlugin:
    """Auto(``SEARCH_URL``); a remote service, and an in-process index unless ``None``
    (picked in local mode unless ``local`` is false)."""
    backends: dict[str, Any] = {"variable": "SEARCH_BACKEND", "default": "service"}
    if embedded is not None:
        backends["embedded"] = embedded
    if not local:
        backends["local"] = False

    class SearchPlugin(OraclePlugin):
        name = "search"
        version = "1.0.0"
        config_schema = SearchConfig
        auto_detect_hint = "SEARCH_URL is set"
        manifest = {
            "title": "Search",
            "summary": "Search the web.",
            "when_to_use": ["The user asks to look something up"],
            "backends": backends,
        }
        opened: str | None = None

        def auto_detect(self, env: Mapping[str, str]) -> bool:
            return bool(env.get("SEARCH_URL"))

        def get_tools(self, ctx: PluginContext[SearchConfig]) -> list[Any]:
            type(self).opened = ctx.plugin_config.SEARCH_BACKEND
            return []

    return SearchPlugin()


def chosen(
    plugin: OraclePlugin,
    *,
    env: Mapping[str, str],
    local: bool,
    toggle: Any = "auto",
    detected: bool,
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Resolve one plugin: (included names, backends, variables set for it)."""
    declared = PluginManifest.model_validate(plugin.manifest).backends
    selection = BackendSelection(
        declared={plugin.name: declared} if declared else {}, env=env, local=local
    )
    resolution = resolve([plugin], {plugin.name: toggle}, lambda _: detected, LOGGER, selection)
    return [p.name for p in resolution.ordered], resolution.backends, resolution.backend_env


def test_forced_on_without_its_service_a_plugin_runs_embedded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    included, backends, env = chosen(
        search_plugin(), env={}, local=False, toggle=True, detected=False
    )
    assert included == ["search"]
    assert backends == {"search": "index"}
    assert env == {"SEARCH_BACKEND": "index"}
    assert "boot.plugin.embedded_backend: plugin 'search'" in caplog.text
    assert "forced on by features" in caplog.text


def test_forced_on_without_an_embedded_backend_still_fails_with_env_missing() -> None:
    with pytest.raises(OracleBootError) as failed:
        chosen(search_plugin(embedded=None), env={}, local=False, toggle=True, detected=False)
    assert failed.value.code == "boot.plugin.env_missing"
    assert "SEARCH_URL is set" in str(failed.value)


def test_outside_local_mode_an_auto_plugin_without_its_service_stays_off() -> None:
    assert chosen(search_plugin(), env={}, local=False, detected=False) == ([], {}, {})


def test_in_local_mode_an_embedded_backend_is_on_by_default() -> None:
    assert chosen(search_plugin(), env={}, local=True, detected=False) == (
        ["search"],
        {"search": "index"},
        {"SEARCH_BACKEND": "index"},
    )
    # Without an embedded backend, local mode changes nothing.
    assert chosen(search_plugin(embedded=None), env={}, local=True, detected=False) == (
        [],
        {},
        {},
    )
    # Switched off by features, it stays off.
    assert chosen(search_plugin(), env={}, local=True, toggle=False, detected=False)[0] == []


def test_an_embedded_backend_kept_out_of_local_mode_runs_only_when_chosen() -> None:
    plugin = search_plugin(local=False)
    # Local mode alone does not pick it ...
    assert chosen(plugin, env={}, local=True, detected=False) == ([], {}, {})
    # ... naming it or forcing the plugin on does.
    named = {"SEARCH_BACKEND": "index"}
    assert chosen(plugin, env=named, local=True, detected=False)[:2] == (
        ["search"],
        {"search": "index"},
    )
    assert chosen(plugin, env={}, local=True, toggle=True, detected=False) == (
        ["search"],
        {"search": "index"},
        {"SEARCH_BACKEND": "index"},
    )


def test_the_service_present_selects_the_default_backend_even_in_local_mode() -> None:
    env = {"SEARCH_URL": "https://search.test"}
    assert chosen(search_plugin(), env=env, local=True, detected=True) == (
        ["search"],
        {"search": "service"},
        {},
    )


def test_the_backend_variable_is_the_operators_choice() -> None:
    # Naming the embedded backend turns the plugin on without its service.
    named = {"SEARCH_BACKEND": "index"}
    assert chosen(search_plugin(), env=named, local=False, detected=False) == (
        ["search"],
        {"search": "index"},
        {},
    )
    # Naming the service without its variables is a missing environment, as before.
    remote = {"SEARCH_BACKEND": "service"}
    assert chosen(search_plugin(), env=remote, local=True, detected=False)[0] == []
    with pytest.raises(OracleBootError) as failed:
        chosen(search_plugin(), env=remote, local=True, toggle=True, detected=False)
    assert failed.value.code == "boot.plugin.env_missing"


async def test_the_plugin_reads_the_chosen_backend_from_its_own_variable() -> None:
    plugin = search_plugin()
    async with await create_test_runtime(plugins=[plugin]) as rt:
        status = rt.status()
        assert status.loaded == ["search"]
        assert status.backends == {"search": "index"}
        assert status.to_dict()["backends"] == {"search": "index"}
    assert type(plugin).opened == "index"  # type: ignore[attr-defined]


async def test_a_host_override_of_backends_is_what_the_runtime_reads() -> None:
    with pytest.raises(OracleBootError) as failed:
        await create_test_runtime(
            plugins=[search_plugin()],
            features={"search": True},
            manifest_overrides={
                "search": {"backends": {"variable": "SEARCH_BACKEND", "default": "service"}}
            },
        )
    assert failed.value.code == "boot.plugin.env_missing"


def test_backends_never_reach_the_model() -> None:
    manifest = PluginManifest.model_validate(search_plugin().manifest)
    assert manifest.backends == ManifestBackends(
        variable="SEARCH_BACKEND", default="service", embedded="index"
    )
    assert "backends" not in manifest.to_wire()
