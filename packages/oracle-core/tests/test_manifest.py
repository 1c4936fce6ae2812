"""Tests of plugin manifests: model, rules, messages and overrides (CORE-20 … CORE-24)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from oracle_core import (
    ManifestValidationError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    create_runtime,
    validate_manifest,
)
from oracle_core._manifest import apply_manifest_override
from oracle_core.testing import create_test_runtime

# --- shared helpers ---------------------------------------------------------------------


def base(**changes: Any) -> dict[str, Any]:
    """A valid manifest with ``changes`` applied."""
    data: dict[str, Any] = {
        "title": "Weather",
        "summary": "Forecasts for any city.",
        "when_to_use": ["The user asks about the weather"],
    }
    data.update(changes)
    return data


class NoArgs(BaseModel):
    """Arguments of a tool that takes none."""


def make_tool(name: str) -> PluginTool:
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return "ok"

    return PluginTool(name=name, description=f"{name} tool.", args_schema=NoArgs, handler=handler)


def make_plugin(
    plugin_name: str,
    plugin_manifest: PluginManifest | dict[str, Any],
    *,
    tools: tuple[str, ...] = (),
    sub_agents: tuple[str, ...] = (),
) -> OraclePlugin:
    """A plugin with a manifest whose ``get_tools``/``get_sub_agents`` return the names."""

    class Plugin(OraclePlugin):
        name = plugin_name
        version = "1.0.0"
        manifest = plugin_manifest

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [make_tool(t) for t in tools]

        def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
            return [
                PluginSubAgent(name=s, description=f"{s} helper.", system_prompt="Help.")
                for s in sub_agents
            ]

    return Plugin()


def only_error(manifest: Any, *, tool_names: list[str] | None = None) -> str:
    result = validate_manifest(manifest, "weather", tool_names)
    assert not result.valid
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


def only_warning(manifest: Any) -> str:
    result = validate_manifest(manifest, "weather")
    assert result.valid, result.errors
    assert len(result.warnings) == 1, result.warnings
    return result.warnings[0]


def assert_clean(manifest: Any, *, tool_names: list[str] | None = None) -> None:
    result = validate_manifest(manifest, "weather", tool_names)
    assert result.valid, result.errors
    assert result.errors == ()
    assert result.warnings == ()


# --- the model (CORE-20) ------------------------------------------------------------------


def test_snake_case_and_camel_case_input_parse_to_the_same_manifest() -> None:
    snake = PluginManifest.model_validate(
        base(when_not_to_use=["Climate history"], examples=[{"user": "Rain?", "tool": "f"}])
    )
    camel = PluginManifest.model_validate(
        {
            "title": "Weather",
            "summary": "Forecasts for any city.",
            "whenToUse": ["The user asks about the weather"],
            "whenNotToUse": ["Climate history"],
            "examples": [{"user": "Rain?", "tool": "f"}],
        }
    )
    assert snake == camel
    assert camel.when_to_use == ["The user asks about the weather"]
    assert camel.when_not_to_use == ["Climate history"]


def test_manifest_defaults() -> None:
    manifest = PluginManifest.model_validate(base())
    assert manifest.visibility == "on-demand"
    assert manifest.when_not_to_use == []
    assert manifest.examples == []
    assert manifest.tags == []
    assert manifest.category is None
    assert manifest.stability is None


def test_to_wire_uses_camel_case_and_drops_unset_optionals() -> None:
    manifest = PluginManifest.model_validate(
        base(
            when_not_to_use=["Climate history"],
            examples=[{"user": "Rain in Oslo?", "tool": "forecast", "args": {"city": "Oslo"}}],
            tags=["weather"],
            category="data",
        )
    )
    assert manifest.to_wire() == {
        "title": "Weather",
        "summary": "Forecasts for any city.",
        "whenToUse": ["The user asks about the weather"],
        "whenNotToUse": ["Climate history"],
        "examples": [{"user": "Rain in Oslo?", "tool": "forecast", "args": {"city": "Oslo"}}],
        "tags": ["weather"],
        "category": "data",
        "visibility": "on-demand",
    }


@pytest.mark.parametrize(
    "category",
    [
        "data",
        "communication",
        "automation",
        "memory",
        "integration",
        "ui",
        "auth",
        "observability",
        "core",
    ],
)
def test_every_stable_category_is_accepted(category: str) -> None:
    assert_clean(base(category=category))


@pytest.mark.parametrize("visibility", ["always", "on-demand", "silent"])
def test_every_stable_visibility_is_accepted(visibility: str) -> None:
    assert_clean(base(visibility=visibility))


@pytest.mark.parametrize("stability", ["stable", "beta", "experimental"])
def test_every_stable_stability_is_accepted(stability: str) -> None:
    assert_clean(base(stability=stability))


def test_a_manifest_is_immutable() -> None:
    manifest = PluginManifest.model_validate(base())
    with pytest.raises(ValidationError):
        manifest.title = "Other"  # type: ignore[misc]


# --- hard rules (CORE-21) ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["title", "summary"])
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_title_or_summary_is_a_hard_error(field: str, value: str) -> None:
    assert only_error(base(**{field: value})) == (
        f"[boot-error] [weather] {field}: must not be empty"
    )


@pytest.mark.parametrize("field", ["title", "summary"])
def test_missing_title_or_summary_is_a_hard_error(field: str) -> None:
    data = base()
    del data[field]
    assert only_error(data).startswith(f"[boot-error] [weather] {field}: ")


@pytest.mark.parametrize("visibility", ["on-demand", "always"])
@pytest.mark.parametrize("when_to_use", [[], ["  "]])
def test_empty_when_to_use_of_a_non_silent_plugin_is_a_hard_error(
    visibility: str, when_to_use: list[str]
) -> None:
    error = only_error(base(visibility=visibility, when_to_use=when_to_use))
    assert error.startswith("[boot-error] [weather] when_to_use: ")
    assert visibility in error


def test_a_silent_plugin_needs_no_when_to_use() -> None:
    data = base(visibility="silent")
    del data["when_to_use"]
    assert_clean(data)


def test_an_example_naming_an_unknown_tool_is_a_hard_error_quoting_it() -> None:
    data = base(
        examples=[
            {"user": "Rain?", "tool": "forecast"},
            {"user": "Plan a trip", "tool": "call_planner_agent"},
            {"user": "Wind?", "tool": "wind"},
        ]
    )
    error = only_error(data, tool_names=["forecast", "call_planner_agent"])
    assert error.startswith("[boot-error] [weather] examples[2].tool: 'wind' ")
    assert "call_planner_agent, forecast" in error


@pytest.mark.parametrize("tool_names", [None, []], ids=["not_checked", "no_boot_tools"])
def test_the_example_cross_check_is_skipped_without_boot_tool_names(
    tool_names: list[str] | None,
) -> None:
    assert_clean(base(examples=[{"user": "Rain?", "tool": "forecast"}]), tool_names=tool_names)


def test_a_tag_with_uppercase_letters_is_a_hard_error_with_its_index() -> None:
    assert only_error(base(tags=["weather", "Forecast", "rain"])) == (
        "[boot-error] [weather] tags[1]: 'Forecast' must be lower case"
    )


@pytest.mark.parametrize("key", ["colour", "whenToUsee", "when_to_use_"])
def test_an_unknown_field_is_a_hard_error(key: str) -> None:
    assert only_error(base(**{key: "x"})).startswith(f"[boot-error] [weather] {key}: ")


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"title": 5}, "title"),
        ({"tags": "weather"}, "tags"),
        ({"when_to_use": "weather"}, "when_to_use"),
        ({"examples": [{"user": "Rain?"}]}, "examples[0].tool"),
        ({"examples": [{"user": "Rain?", "tool": "f", "args": [1]}]}, "examples[0].args"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_hard_error_at_its_path(
    changes: dict[str, Any], path: str
) -> None:
    assert only_error(base(**changes)).startswith(f"[boot-error] [weather] {path}: ")


@pytest.mark.parametrize(
    ("field", "value"),
    [("visibility", "hidden"), ("category", "weather"), ("stability", "alpha")],
)
def test_a_value_outside_the_enums_is_a_hard_error(field: str, value: str) -> None:
    assert only_error(base(**{field: value})).startswith(f"[boot-error] [weather] {field}: ")


def test_a_manifest_that_is_not_a_mapping_is_a_hard_error() -> None:
    assert only_error("Weather") == "[boot-error] [weather] manifest: expected a mapping"


def test_all_hard_errors_are_reported_together() -> None:
    result = validate_manifest(
        base(title="", when_to_use=[], tags=["A", "B"]), "weather", ["forecast"]
    )
    assert not result.valid
    assert [e.split(": ")[0] for e in result.errors] == [
        "[boot-error] [weather] title",
        "[boot-error] [weather] when_to_use",
        "[boot-error] [weather] tags[0]",
        "[boot-error] [weather] tags[1]",
    ]


# --- soft rules (CORE-21) ------------------------------------------------------------------


def test_a_summary_over_120_characters_is_a_warning() -> None:
    assert_clean(base(summary="s" * 120))
    assert only_warning(base(summary="s" * 121)).startswith(
        "[boot-warning] [weather] summary: is 121 characters"
    )


def test_more_than_8_when_to_use_entries_is_a_warning() -> None:
    assert_clean(base(when_to_use=[f"case {i}" for i in range(8)]))
    assert only_warning(base(when_to_use=[f"case {i}" for i in range(9)])).startswith(
        "[boot-warning] [weather] when_to_use: has 9 entries"
    )


def test_a_when_to_use_entry_over_100_characters_is_a_warning() -> None:
    assert_clean(base(when_to_use=["ok", "w" * 100]))
    assert only_warning(base(when_to_use=["ok", "w" * 101])).startswith(
        "[boot-warning] [weather] when_to_use[1]: is 101 characters"
    )


def test_more_than_4_when_not_to_use_entries_is_a_warning() -> None:
    assert_clean(base(when_not_to_use=[f"case {i}" for i in range(4)]))
    assert only_warning(base(when_not_to_use=[f"case {i}" for i in range(5)])).startswith(
        "[boot-warning] [weather] when_not_to_use: has 5 entries"
    )


def test_a_when_not_to_use_entry_over_80_characters_is_a_warning() -> None:
    assert_clean(base(when_not_to_use=["n" * 80]))
    assert only_warning(base(when_not_to_use=["n" * 81])).startswith(
        "[boot-warning] [weather] when_not_to_use[0]: is 81 characters"
    )


def test_more_than_3_examples_is_a_warning() -> None:
    def examples(n: int) -> list[dict[str, str]]:
        return [{"user": f"q{i}", "tool": "forecast"} for i in range(n)]

    assert_clean(base(examples=examples(3)))
    assert only_warning(base(examples=examples(4))).startswith(
        "[boot-warning] [weather] examples: has 4 entries"
    )


async def test_a_title_equal_to_another_plugins_ignoring_case_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [make_plugin("weather", base()), make_plugin("forecast", base(title="WEATHER"))]
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(plugins=plugins) as rt:
            assert rt.status().loaded == ["forecast", "weather"]
    warnings = [r.getMessage() for r in caplog.records if "title_collision" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("boot.registry.title_collision")
    assert "'forecast'" in warnings[0]
    assert "'weather'" in warnings[0]


async def test_soft_rules_are_logged_at_boot_and_boot_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(
            plugins=[make_plugin("weather", base(summary="s" * 130))]
        ) as rt:
            assert rt.status().loaded == ["weather"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("boot.manifest.warning: [boot-warning] [weather] summary:") for m in messages
    )


# --- boot gathers every error (CORE-22, CORE-23) ------------------------------------------------


async def test_boot_gathers_every_plugins_errors_into_one_error() -> None:
    plugins = [
        make_plugin("weather", base(title="")),
        make_plugin("memory", base(title="Memory", tags=["Notes"])),
        make_plugin("clean", base(title="Clean")),
    ]
    with pytest.raises(ManifestValidationError) as info:
        await create_test_runtime(plugins=plugins)
    error = info.value
    assert error.code == "boot.manifest.invalid"
    assert str(error).startswith("Plugin manifest validation failed")
    assert sorted(error.errors) == [
        "[boot-error] [memory] tags[0]: 'Notes' must be lower case",
        "[boot-error] [weather] title: must not be empty",
    ]
    assert all(e in str(error) for e in error.errors)


async def test_structural_manifest_errors_surface_before_env_validation(tmp_path: Path) -> None:
    # ixo backend with no ixo variables: env validation would fail, the manifest first.
    with pytest.raises(ManifestValidationError) as info:
        await create_runtime(
            {"name": "Test Oracle"},
            plugins=[make_plugin("weather", base(summary=""))],
            bundled_plugins=[],
            discover_entry_points=False,
            env={"SQLITE_DATABASE_PATH": str(tmp_path)},
        )
    assert info.value.errors == ("[boot-error] [weather] summary: must not be empty",)


async def test_boot_cross_checks_examples_against_boot_tools_and_sub_agents() -> None:
    manifest = base(
        examples=[
            {"user": "Rain?", "tool": "forecast"},
            {"user": "Plan a trip", "tool": "call_planner_agent"},
            {"user": "Wind?", "tool": "wind"},
        ]
    )
    plugin = make_plugin("weather", manifest, tools=("forecast",), sub_agents=("planner",))
    with pytest.raises(ManifestValidationError) as info:
        await create_test_runtime(plugins=[plugin])
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("[boot-error] [weather] examples[2].tool: 'wind' ")


async def test_boot_accepts_examples_naming_boot_tools_and_sub_agents() -> None:
    manifest = base(
        examples=[
            {"user": "Rain?", "tool": "forecast"},
            {"user": "Plan a trip", "tool": "call_planner_agent"},
        ]
    )
    plugin = make_plugin("weather", manifest, tools=("forecast",), sub_agents=("planner",))
    async with await create_test_runtime(plugins=[plugin]) as rt:
        rt.assert_manifest_valid()
        assert rt.get_manifest("weather").examples[1].tool == "call_planner_agent"


async def test_boot_skips_the_example_check_for_a_plugin_without_boot_tools() -> None:
    plugin = make_plugin("weather", base(examples=[{"user": "Rain?", "tool": "mcp_forecast"}]))
    async with await create_test_runtime(plugins=[plugin]) as rt:
        assert rt.get_manifest("weather").examples[0].tool == "mcp_forecast"


# --- manifest_overrides (CORE-24) ----------------------------------------------------------


def weather_manifest() -> PluginManifest:
    return PluginManifest.model_validate(
        base(when_not_to_use=["Climate history"], tags=["weather", "forecast"])
    )


def test_an_override_is_a_shallow_merge() -> None:
    merged, errors = apply_manifest_override(
        weather_manifest(), {"summary": "Local forecasts."}, "weather"
    )
    assert errors == []
    assert merged is not None
    assert merged.summary == "Local forecasts."
    assert merged.title == "Weather"
    assert merged.when_not_to_use == ["Climate history"]
    assert merged.tags == ["weather", "forecast"]


def test_none_values_in_an_override_are_ignored() -> None:
    merged, errors = apply_manifest_override(
        weather_manifest(), {"summary": None, "tags": None, "visibility": "always"}, "weather"
    )
    assert errors == []
    assert merged is not None
    assert merged.summary == "Forecasts for any city."
    assert merged.tags == ["weather", "forecast"]
    assert merged.visibility == "always"


def test_lists_in_an_override_replace_the_original_wholesale() -> None:
    merged, _ = apply_manifest_override(weather_manifest(), {"tags": ["rain"]}, "weather")
    assert merged is not None
    assert merged.tags == ["rain"]


def test_dicts_in_an_override_replace_the_original_wholesale() -> None:
    original = PluginManifest.model_validate(
        base(examples=[{"user": "Rain?", "tool": "forecast", "args": {"city": "Oslo", "d": 1}}])
    )
    override = {"examples": [{"user": "Wind?", "tool": "forecast", "args": {"city": "Rome"}}]}
    merged, _ = apply_manifest_override(original, override, "weather")
    assert merged is not None
    assert [e.args for e in merged.examples] == [{"city": "Rome"}]


@pytest.mark.parametrize("key", ["when_not_to_use", "whenNotToUse"])
def test_an_override_accepts_either_key_style(key: str) -> None:
    merged, errors = apply_manifest_override(weather_manifest(), {key: ["Tides"]}, "weather")
    assert errors == []
    assert merged is not None
    assert merged.when_not_to_use == ["Tides"]


def test_an_unknown_field_in_an_override_is_a_hard_error() -> None:
    merged, errors = apply_manifest_override(weather_manifest(), {"colour": "blue"}, "weather")
    assert merged is None
    assert errors == ["[boot-error] [weather] manifest_overrides.colour: unknown manifest field"]


def test_an_override_value_of_the_wrong_type_is_a_hard_error() -> None:
    merged, errors = apply_manifest_override(
        weather_manifest(), {"visibility": "hidden"}, "weather"
    )
    assert merged is None
    assert len(errors) == 1
    assert errors[0].startswith("[boot-error] [weather] visibility: ")


async def test_the_merged_manifest_is_what_the_runtime_sees() -> None:
    plugin = make_plugin("weather", base(tags=["weather"]))
    overrides = {
        "weather": {
            "summary": "Forecasts for the operator's region.",
            "whenToUse": ["Regional weather"],
            "tags": None,
            "category": "data",
        }
    }
    async with await create_test_runtime(plugins=[plugin], manifest_overrides=overrides) as rt:
        manifest = rt.get_manifest("weather")
        capabilities = await rt.list_capabilities()
    assert manifest.title == "Weather"
    assert manifest.summary == "Forecasts for the operator's region."
    assert manifest.when_to_use == ["Regional weather"]
    assert manifest.tags == ["weather"]
    assert manifest.category == "data"
    assert [c["name"] for c in capabilities] == ["weather"]
    assert capabilities[0]["summary"] == "Forecasts for the operator's region."
    assert capabilities[0]["category"] == "data"


async def test_an_override_can_make_a_plugin_always_visible() -> None:
    plugin = make_plugin("weather", base())
    overrides = {"weather": {"visibility": "always"}}
    async with await create_test_runtime(plugins=[plugin], manifest_overrides=overrides) as rt:
        assert rt.get_manifest("weather").visibility == "always"
        assert rt.runtime.always_plugins == {"weather"}


async def test_emptying_when_to_use_of_a_non_silent_plugin_fails_boot() -> None:
    plugin = make_plugin("weather", base())
    with pytest.raises(ManifestValidationError) as info:
        await create_test_runtime(
            plugins=[plugin], manifest_overrides={"weather": {"when_to_use": []}}
        )
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("[boot-error] [weather] when_to_use: must list")


async def test_emptying_when_to_use_while_making_the_plugin_silent_is_valid() -> None:
    plugin = make_plugin("weather", base())
    overrides = {"weather": {"when_to_use": [], "visibility": "silent"}}
    async with await create_test_runtime(plugins=[plugin], manifest_overrides=overrides) as rt:
        assert rt.get_manifest("weather").visibility == "silent"
        assert await rt.list_capabilities() == []


async def test_an_unknown_field_in_an_override_fails_boot() -> None:
    plugin = make_plugin("weather", base())
    with pytest.raises(ManifestValidationError) as info:
        await create_test_runtime(plugins=[plugin], manifest_overrides={"weather": {"icon": "x"}})
    assert info.value.errors == (
        "[boot-error] [weather] manifest_overrides.icon: unknown manifest field",
    )


@pytest.mark.parametrize("features", [{}, {"weather": False}], ids=["absent", "disabled"])
async def test_an_override_for_a_plugin_not_loaded_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture, features: dict[str, bool]
) -> None:
    plugins = [make_plugin("weather", base()), make_plugin("memory", base(title="Memory"))]
    overrides = {"wether" if not features else "weather": {"title": "Ignored"}}
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(
            plugins=plugins, features=features, manifest_overrides=overrides
        ) as rt:
            titles = {name: rt.get_manifest(name).title for name in rt.status().loaded}
    assert "Ignored" not in titles.values()
    key = next(iter(overrides))
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("boot.plugin.manifest_override_unknown")
    ]
    assert len(warnings) == 1
    assert f"'{key}'" in warnings[0]
