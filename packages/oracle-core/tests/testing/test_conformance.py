"""Tests of ``validate_plugin``, the conformance suite plugins run (CORE-90 … 93)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    ManifestExample,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_core.testing import TestRuntime, validate_plugin

# --- fixtures -------------------------------------------------------------------------

RUNTIME_CHECKS = [
    "attributes and hook names",
    "manifest rules",
    "boot",
    "manifest examples name real tools",
    "request-time hooks",
    "tool schemas",
    "tools visible to the runtime",
    "list_capabilities",
]


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    city: str


class LooseArgs(BaseModel):
    model_config = ConfigDict(extra="allow")

    city: str


class RequiredConfig(BaseModel):
    WEATHER_API_KEY: str


def forecast_tool(args_schema: type[BaseModel] = CityArgs) -> PluginTool:
    @plugin_tool(name="get_forecast", description="Forecast for a city.", args_schema=args_schema)
    def forecast(args: Any, rt_ctx: RuntimeContext[Any]) -> str:
        return f"sunny in {args.city}"

    return forecast


GOOD_MANIFEST = PluginManifest(
    title="Weather",
    summary="Forecasts.",
    when_to_use=["forecast questions"],
    examples=[ManifestExample(user="Rain in Oslo?", tool="get_forecast", args={"city": "Oslo"})],
)


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = GOOD_MANIFEST

    def __init__(self, **overrides: Any) -> None:
        for key, value in overrides.items():
            setattr(self, key, value)

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [forecast_tool(getattr(self, "args_schema", CityArgs))]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        if getattr(self, "broken_request_tools", False):
            raise RuntimeError("request tools backend down")
        return []


def failed_lines(exc: AssertionError) -> list[str]:
    return [line.strip() for line in str(exc).splitlines() if "[FAIL]" in line]


# --- a conforming plugin --------------------------------------------------------------


async def test_a_good_plugin_passes_every_check() -> None:
    report = await validate_plugin(WeatherPlugin())

    assert report.ok
    assert report.plugin == "weather"
    assert [c.name for c in report.checks] == [*RUNTIME_CHECKS, "lifespan exit"]
    assert report.failures() == []
    tools = next(c for c in report.checks if c.name == "tools visible to the runtime")
    assert tools.detail == "get_forecast"


async def test_silent_plugin_is_expected_to_stay_unlisted() -> None:
    silent = PluginManifest(title="Weather", summary="Forecasts.", visibility="silent")

    report = await validate_plugin(WeatherPlugin(manifest=silent))

    assert report.ok
    listed = next(c for c in report.checks if c.name == "list_capabilities")
    assert listed.detail == "listed: []"


async def test_extra_checks_run_against_the_booted_runtime() -> None:
    seen: list[list[str]] = []

    async def tools_are_bound(runtime: TestRuntime) -> None:
        seen.append(await runtime.list_tools())

    async def always_fails(runtime: TestRuntime) -> None:
        raise ValueError("custom check failed")

    report = await validate_plugin(
        WeatherPlugin(), extra_checks=[tools_are_bound, always_fails], raise_on_failure=False
    )

    assert "get_forecast" in seen[0]
    assert [(c.name, c.ok) for c in report.checks[-3:]] == [
        ("tools_are_bound", True),
        ("always_fails", False),
        ("lifespan exit", True),
    ]
    assert report.failures()[0].detail == "ValueError: custom check failed"


# --- failing plugins ------------------------------------------------------------------


async def test_manifest_warning_fails_unless_allowed() -> None:
    wordy = GOOD_MANIFEST.model_copy(update={"summary": "x" * 130})

    with pytest.raises(AssertionError) as info:
        await validate_plugin(WeatherPlugin(manifest=wordy))

    [line] = failed_lines(info.value)
    assert line.startswith("[FAIL] manifest rules: [boot-warning] [weather] summary")
    assert "conformance of plugin 'weather'" in str(info.value)
    assert (await validate_plugin(WeatherPlugin(manifest=wordy), allow_manifest_warnings=True)).ok


async def test_failing_request_hook_fails_the_suite() -> None:
    with pytest.raises(AssertionError) as info:
        await validate_plugin(WeatherPlugin(broken_request_tools=True))

    assert failed_lines(info.value) == ["[FAIL] request-time hooks: request tools"]


async def test_args_schema_allowing_unknown_keys_fails_the_suite() -> None:
    with pytest.raises(AssertionError) as info:
        await validate_plugin(WeatherPlugin(args_schema=LooseArgs))

    assert failed_lines(info.value) == [
        "[FAIL] tool schemas: get_forecast: args schema allows unknown keys"
    ]


async def test_every_failed_check_is_listed() -> None:
    wordy = GOOD_MANIFEST.model_copy(update={"summary": "x" * 130})

    with pytest.raises(AssertionError) as info:
        await validate_plugin(
            WeatherPlugin(manifest=wordy, args_schema=LooseArgs, broken_request_tools=True)
        )

    assert [line.split(":")[0] for line in failed_lines(info.value)] == [
        "[FAIL] manifest rules",
        "[FAIL] request-time hooks",
        "[FAIL] tool schemas",
    ]


async def test_missing_entry_point_fails_when_required() -> None:
    with pytest.raises(AssertionError) as info:
        await validate_plugin(WeatherPlugin(), entry_point=True)

    assert failed_lines(info.value) == [
        "[FAIL] entry point: no 'oracle.plugins' entry point 'weather'"
    ]


async def test_registered_entry_point_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conformance_sample_plugin.py").write_text(
        textwrap.dedent(
            """
            from oracle_core import OraclePlugin, PluginManifest

            class SamplePlugin(OraclePlugin):
                name = "conformance-sample"
                version = "0.1.0"
                manifest = PluginManifest(
                    title="Sample", summary="A sample.", when_to_use=["samples"]
                )
            """
        )
    )
    dist_info = tmp_path / "conformance_sample-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: conformance-sample\nVersion: 0.1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "[oracle.plugins]\nconformance-sample = conformance_sample_plugin:SamplePlugin\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("conformance_sample_plugin")
        report = await validate_plugin(module.SamplePlugin(), entry_point=True)
    finally:
        sys.modules.pop("conformance_sample_plugin", None)

    entry = next(c for c in report.checks if c.name == "entry point")
    assert entry.ok
    assert entry.detail == "conformance_sample_plugin:SamplePlugin"


async def test_boot_failure_stops_the_suite() -> None:
    plugin = WeatherPlugin(config_schema=RequiredConfig)

    report = await validate_plugin(plugin, raise_on_failure=False)

    assert [(c.name, c.ok) for c in report.checks] == [
        ("attributes and hook names", True),
        ("manifest rules", True),
        ("boot", False),
    ]
    assert "WEATHER_API_KEY" in report.checks[-1].detail
    ok = await validate_plugin(
        WeatherPlugin(config_schema=RequiredConfig), config={"WEATHER_API_KEY": "k"}
    )
    assert ok.ok


async def test_dependencies_boot_alongside() -> None:
    class Units(OraclePlugin):
        name = "units"
        version = "1"
        manifest = PluginManifest(title="Units", summary="Units.", when_to_use=["units"])

    dependent = WeatherPlugin(depends_on=("units",))

    without = await validate_plugin(dependent, raise_on_failure=False)
    with_dependency = await validate_plugin(dependent, with_plugins=[Units()])

    assert [c.name for c in without.failures()] == ["boot"]
    assert "units" in without.failures()[0].detail
    assert with_dependency.ok


async def test_near_miss_hook_name_fails_the_first_check() -> None:
    class Misspelt(OraclePlugin):
        name = "misspelt"
        version = "1"
        manifest = GOOD_MANIFEST

        def get_tool(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return []

    report = await validate_plugin(Misspelt(), raise_on_failure=False)

    [check] = report.checks
    assert check.name == "attributes and hook names"
    assert not check.ok
    assert "get_tools" in check.detail
    assert str(report).startswith("conformance of plugin 'misspelt':\n  [FAIL] attributes")
