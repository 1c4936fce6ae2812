"""Tests of entry-point discovery (CORE-10) against real ``*.dist-info`` directories."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest

from oracle_core import (
    FailedPlugin,
    OracleBootError,
    OraclePlugin,
    OracleRuntime,
    PluginContext,
    PluginTool,
    create_runtime,
)
from oracle_core._discovery import ENTRY_POINT_GROUP, discover_plugins, load_entry_point

# --- shared helpers ---------------------------------------------------------------------


def local_env(tmp_path: Path) -> dict[str, str]:
    """An offline ``local`` environment for ``create_runtime``."""
    return {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "m",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }


PLUGIN_MODULE = """
from oracle_core import OraclePlugin


class Weather(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = {"title": "Weather", "summary": "Forecasts.", "when_to_use": ["forecasts"]}


plugin = Weather()


def make():
    return Weather()


class Misnamed(OraclePlugin):
    name = "forecast"
    version = "1.0.0"
    manifest = {"title": "Forecast", "summary": "Forecasts.", "when_to_use": ["forecasts"]}


class BadVersion(OraclePlugin):
    name = "weather"
    version = 1
    manifest = {"title": "Weather", "summary": "Forecasts.", "when_to_use": ["forecasts"]}


def make_nothing():
    return None


not_a_plugin = 42
"""


def broken_module(side_file: Path) -> str:
    """A module that records that it was imported, then fails to import."""
    return (
        "from pathlib import Path\n"
        f"Path({str(side_file)!r}).write_text('imported')\n"
        "raise RuntimeError('the broken plugin cannot start')\n"
    )


@dataclass
class Site:
    """A temporary ``site-packages`` on ``sys.path`` holding real distributions."""

    root: Path
    prefix: str
    modules: list[str] = field(default_factory=list)

    def module(self, stem: str) -> str:
        """A module name unique to this test."""
        return f"{self.prefix}_{stem}"

    def dist(self, stem: str) -> str:
        """A distribution name unique to this test."""
        return f"{self.prefix}-{stem}".replace("_", "-")

    def add(self, stem: str, entries: Mapping[str, str], modules: Mapping[str, str]) -> str:
        """Install distribution ``stem``: ``entries`` maps entry-point name to value.

        Returns:
            The distribution name.
        """
        name = self.dist(stem)
        info = self.root / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8"
        )
        lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entries.items()), ""]
        (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
        for module, source in modules.items():
            (self.root / f"{module}.py").write_text(source, encoding="utf-8")
            self.modules.append(module)
        return name

    def entry_point(self, name: str, dist: str) -> EntryPoint:
        """The installed entry point ``name`` of ``dist``, as importlib sees it."""
        found = [
            ep
            for ep in entry_points(group=ENTRY_POINT_GROUP)
            if ep.name == name and ep.dist is not None and ep.dist.name == dist
        ]
        assert len(found) == 1, f"entry point {name!r} of {dist!r} is not visible"
        return found[0]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    result = Site(root=root, prefix=f"oracle_disc_{uuid.uuid4().hex[:10]}")
    yield result
    for module in result.modules:
        sys.modules.pop(module, None)


def others_off(*mine: str) -> dict[str, Any]:
    """``features`` disabling every installed entry point that this test did not add."""
    return {ep.name: False for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in mine}


LOGGER = logging.getLogger("oracle.test.discovery")
CUSTOM_MANIFEST: dict[str, Any] = {"title": "Custom", "summary": "Custom.", "when_to_use": ["c"]}


# --- importlib sees the temporary distributions ------------------------------------------


def test_a_temporary_distribution_is_visible_to_importlib(site: Site) -> None:
    module = site.module("weather")
    dist = site.add("weather", {"weather": f"{module}:plugin"}, {module: PLUGIN_MODULE})
    ep = site.entry_point("weather", dist)
    assert ep.value == f"{module}:plugin"
    assert ep.group == "oracle.plugins"


# --- load_entry_point ---------------------------------------------------------------------


@pytest.mark.parametrize("attr", ["plugin", "Weather", "make"])
def test_an_instance_a_subclass_or_a_zero_argument_factory_loads(site: Site, attr: str) -> None:
    module = site.module("weather")
    dist = site.add("weather", {"weather": f"{module}:{attr}"}, {module: PLUGIN_MODULE})
    plugin = load_entry_point(site.entry_point("weather", dist))
    assert isinstance(plugin, OraclePlugin)
    assert type(plugin).__name__ == "Weather"
    assert plugin.name == "weather"


def test_an_entry_point_named_unlike_its_plugin_fails_to_load(site: Site) -> None:
    module = site.module("weather")
    dist = site.add("weather", {"forecasts": f"{module}:plugin"}, {module: PLUGIN_MODULE})
    with pytest.raises(OracleBootError) as info:
        load_entry_point(site.entry_point("forecasts", dist))
    assert info.value.code == "boot.plugin.load_failed"
    message = str(info.value)
    assert "entry point 'forecasts'" in message
    assert f"distribution '{dist}'" in message
    assert "plugin 'weather'" in message


def test_an_import_error_fails_to_load_naming_entry_point_and_distribution(
    site: Site, tmp_path: Path
) -> None:
    module = site.module("broken")
    side = tmp_path / "imported.txt"
    dist = site.add("broken", {"broken": f"{module}:plugin"}, {module: broken_module(side)})
    with pytest.raises(OracleBootError) as info:
        load_entry_point(site.entry_point("broken", dist))
    assert info.value.code == "boot.plugin.load_failed"
    message = str(info.value)
    assert "entry point 'broken'" in message
    assert f"distribution '{dist}'" in message
    assert "RuntimeError: the broken plugin cannot start" in message
    assert "features['broken'] = False" in message
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    ("ep_name", "attr"),
    [("weather", "not_a_plugin"), ("weather", "make_nothing"), ("weather", "BadVersion")],
)
def test_an_object_that_is_not_a_valid_plugin_fails_to_load(
    site: Site, ep_name: str, attr: str
) -> None:
    module = site.module("weather")
    dist = site.add("weather", {ep_name: f"{module}:{attr}"}, {module: PLUGIN_MODULE})
    with pytest.raises(OracleBootError) as info:
        load_entry_point(site.entry_point(ep_name, dist))
    assert info.value.code == "boot.plugin.load_failed"
    assert f"distribution '{dist}'" in str(info.value)


# --- discover_plugins ---------------------------------------------------------------------


def install_good_and_broken(site: Site, side_file: Path) -> tuple[str, str]:
    good = site.module("weather")
    bad = site.module("broken")
    good_dist = site.add("weather", {"weather": f"{good}:plugin"}, {good: PLUGIN_MODULE})
    bad_dist = site.add("broken", {"broken": f"{bad}:plugin"}, {bad: broken_module(side_file)})
    return good_dist, bad_dist


def test_a_broken_entry_point_is_reported_and_skipped_when_not_strict(
    site: Site, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, bad_dist = install_good_and_broken(site, tmp_path / "imported.txt")
    with caplog.at_level(logging.ERROR, logger=LOGGER.name):
        found = discover_plugins(others_off("weather", "broken"), strict=False, logger=LOGGER)
    assert [p.name for p in found.plugins] == ["weather"]
    assert len(found.failed) == 1
    failed = found.failed[0]
    assert failed.plugin == "broken"
    assert failed.distribution == bad_dist
    assert "RuntimeError" in failed.reason
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER.name]
    assert len(logged) == 1
    assert logged[0].startswith("[boot-error] boot.plugin.load_failed")
    assert "'broken'" in logged[0]
    assert bad_dist in logged[0]


def test_a_broken_entry_point_fails_discovery_in_strict_mode(site: Site, tmp_path: Path) -> None:
    _, bad_dist = install_good_and_broken(site, tmp_path / "imported.txt")
    with pytest.raises(OracleBootError) as info:
        discover_plugins(others_off("weather", "broken"), strict=True, logger=LOGGER)
    assert info.value.code == "boot.plugin.load_failed"
    assert "'broken'" in str(info.value)
    assert bad_dist in str(info.value)


def test_a_broken_entry_point_forced_on_by_features_fails_discovery(
    site: Site, tmp_path: Path
) -> None:
    install_good_and_broken(site, tmp_path / "imported.txt")
    features = {**others_off("weather", "broken"), "broken": True}
    with pytest.raises(OracleBootError) as info:
        discover_plugins(features, strict=False, logger=LOGGER)
    assert info.value.code == "boot.plugin.load_failed"
    assert "'broken'" in str(info.value)


def test_an_entry_point_disabled_by_features_is_never_imported(site: Site, tmp_path: Path) -> None:
    side = tmp_path / "imported.txt"
    install_good_and_broken(site, side)
    features = {**others_off("weather", "broken"), "broken": False}
    found = discover_plugins(features, strict=True, logger=LOGGER)
    assert [p.name for p in found.plugins] == ["weather"]
    assert found.failed == []
    assert not side.exists()
    assert site.module("broken") not in sys.modules


def test_a_broken_entry_point_is_imported_when_not_disabled(site: Site, tmp_path: Path) -> None:
    # The counterpart of the test above: the side file does prove an import.
    side = tmp_path / "imported.txt"
    install_good_and_broken(site, side)
    discover_plugins(others_off("weather", "broken"), strict=False, logger=LOGGER)
    assert side.read_text() == "imported"


def test_a_misnamed_entry_point_is_reported_not_loaded(site: Site) -> None:
    module = site.module("weather")
    dist = site.add("weather", {"forecasts": f"{module}:plugin"}, {module: PLUGIN_MODULE})
    found = discover_plugins(others_off("forecasts"), strict=False, logger=LOGGER)
    assert found.plugins == []
    assert found.failed == [
        FailedPlugin("forecasts", dist, found.failed[0].reason),
    ]
    assert "entry-point name must equal it" in found.failed[0].reason


# --- create_runtime -----------------------------------------------------------------------


async def test_create_runtime_discovers_entry_points_and_reports_the_broken_one(
    site: Site, tmp_path: Path
) -> None:
    _, bad_dist = install_good_and_broken(site, tmp_path / "imported.txt")
    runtime = await create_runtime(
        {"name": "Test Oracle"},
        features=others_off("weather", "broken"),
        env=local_env(tmp_path),
    )
    try:
        status = runtime.plugins.status()
        assert status.loaded == ["weather"]
        assert [(f.plugin, f.distribution) for f in status.failed] == [("broken", bad_dist)]
        assert status.to_dict()["failed"][0]["distribution"] == bad_dist
    finally:
        await runtime.aclose()


async def test_create_runtime_fails_on_a_broken_entry_point_with_strict_plugins(
    site: Site, tmp_path: Path
) -> None:
    install_good_and_broken(site, tmp_path / "imported.txt")
    with pytest.raises(OracleBootError) as info:
        await create_runtime(
            {"name": "Test Oracle"},
            features=others_off("weather", "broken"),
            env=local_env(tmp_path),
            strict_plugins=True,
        )
    assert info.value.code == "boot.plugin.load_failed"
    assert "'broken'" in str(info.value)


@pytest.mark.parametrize(
    "switch",
    [{"bundled_plugins": []}, {"discover_entry_points": False}],
    ids=["bundled_plugins", "discover_entry_points_false"],
)
async def test_discovery_is_off_with_bundled_plugins_or_discover_entry_points_false(
    site: Site, tmp_path: Path, switch: dict[str, Any]
) -> None:
    side = tmp_path / "imported.txt"
    install_good_and_broken(site, side)
    runtime = await create_runtime(
        {"name": "Test Oracle"}, env=local_env(tmp_path), strict_plugins=True, **switch
    )
    try:
        assert runtime.plugins.status().loaded == []
        assert runtime.plugins.status().failed == []
    finally:
        await runtime.aclose()
    assert not side.exists()
    assert site.module("weather") not in sys.modules


async def test_a_user_instance_replaces_the_discovered_plugin(site: Site, tmp_path: Path) -> None:
    module = site.module("weather")
    site.add("weather", {"weather": f"{module}:plugin"}, {module: PLUGIN_MODULE})
    calls: list[str] = []

    class CustomWeather(OraclePlugin):
        name = "weather"
        version = "9.9.9"
        manifest = CUSTOM_MANIFEST

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            calls.append(ctx.plugin_name)
            return []

    runtime: OracleRuntime = await create_runtime(
        {"name": "Test Oracle"},
        plugins=[CustomWeather()],
        features=others_off("weather"),
        env=local_env(tmp_path),
        strict_plugins=True,
    )
    try:
        status = runtime.plugins.status()
        assert status.loaded == ["weather"]
        assert status.versions == {"weather": "9.9.9"}
        assert runtime.registries.manifests["weather"].title == "Custom"
        assert calls == ["weather"]
    finally:
        await runtime.aclose()
    # The discovered distribution was loaded too; the user's instance won.
    assert module in sys.modules
