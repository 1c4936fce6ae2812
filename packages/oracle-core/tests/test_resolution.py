"""Tests of plugin resolution: toggles, auto-detect, dependencies, order, status (§4)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from oracle_core import (
    ExcludedPlugin,
    OracleBootError,
    OraclePlugin,
    PluginContext,
    PluginStatusChangeEvent,
    PluginTool,
    SoftDependencyGap,
    create_runtime,
)
from oracle_core._resolution import check_features, dedupe_candidates, resolve, topological_order
from oracle_core.testing import TestRuntime, create_test_runtime

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


class Recorder:
    """Records which hooks of which plugin ran, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.envs: list[dict[str, str]] = []


def manifest_for(plugin_name: str) -> dict[str, Any]:
    """A valid on-demand manifest titled after the plugin."""
    return {
        "title": plugin_name.title(),
        "summary": f"{plugin_name} things.",
        "when_to_use": [f"{plugin_name} questions"],
    }


def make(
    plugin_name: str,
    *,
    depends: tuple[str, ...] = (),
    soft: tuple[str, ...] = (),
    detect: bool | None = None,
    hint: str | None = None,
    plugin_version: str = "1.0.0",
    recorder: Recorder | None = None,
) -> OraclePlugin:
    """A plugin; with ``detect`` set it has an ``auto_detect`` returning it."""
    rec = recorder or Recorder()

    class Plugin(OraclePlugin):
        name = plugin_name
        version = plugin_version
        manifest = manifest_for(plugin_name)
        depends_on = depends
        soft_depends_on = soft
        auto_detect_hint = hint

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            rec.calls.append((plugin_name, "get_tools"))
            return []

    if detect is None:
        return Plugin()

    class Detecting(Plugin):
        def auto_detect(self, env: Mapping[str, str]) -> bool:
            rec.calls.append((plugin_name, "auto_detect"))
            rec.envs.append(dict(env))
            assert detect is not None
            return detect

    return Detecting()


def messages(caplog: pytest.LogCaptureFixture, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]


LOGGER = logging.getLogger("oracle.test.resolution")


# --- feature toggles and auto-detect (CORE-26, CORE-27) ---------------------------------------


async def test_a_missing_feature_means_auto_and_no_auto_detect_includes_the_plugin() -> None:
    async with await create_test_runtime(plugins=[make("weather")]) as rt:
        assert rt.status().loaded == ["weather"]
        assert rt.status().excluded == []


async def test_false_excludes_the_plugin_without_calling_auto_detect_or_any_hook() -> None:
    rec = Recorder()
    plugins = [make("weather", detect=True, recorder=rec), make("memory")]
    async with await create_test_runtime(plugins=plugins, features={"weather": False}) as rt:
        status = rt.status()
    assert status.loaded == ["memory"]
    assert [(e.plugin, e.code) for e in status.excluded] == [("weather", "feature_disabled")]
    assert isinstance(status.excluded[0], ExcludedPlugin)
    assert rec.calls == []


@pytest.mark.parametrize("toggle", ["auto", None], ids=["auto", "missing"])
async def test_auto_includes_the_plugin_when_auto_detect_returns_true(toggle: str | None) -> None:
    rec = Recorder()
    features: dict[str, Any] = {} if toggle is None else {"weather": toggle}
    plugins = [make("weather", detect=True, recorder=rec)]
    async with await create_test_runtime(plugins=plugins, features=features) as rt:
        assert rt.status().loaded == ["weather"]
    assert rec.calls == [("weather", "auto_detect"), ("weather", "get_tools")]


async def test_auto_excludes_the_plugin_when_auto_detect_returns_false_quoting_the_hint() -> None:
    rec = Recorder()
    plugin = make("weather", detect=False, hint="WEATHER_API_KEY is set", recorder=rec)
    async with await create_test_runtime(plugins=[plugin], features={"weather": "auto"}) as rt:
        status = rt.status()
    assert status.loaded == []
    assert len(status.excluded) == 1
    excluded = status.excluded[0]
    assert (excluded.plugin, excluded.code) == ("weather", "auto_detect_failed")
    assert "WEATHER_API_KEY is set" in excluded.reason
    # An excluded plugin's hooks are never called.
    assert rec.calls == [("weather", "auto_detect")]


async def test_true_runs_auto_detect_and_includes_the_plugin_when_it_passes() -> None:
    rec = Recorder()
    plugins = [make("weather", detect=True, recorder=rec)]
    async with await create_test_runtime(plugins=plugins, features={"weather": True}) as rt:
        assert rt.status().loaded == ["weather"]
    assert ("weather", "auto_detect") in rec.calls


async def test_true_with_auto_detect_false_fails_boot_with_env_missing() -> None:
    plugin = make("weather", detect=False, hint="WEATHER_API_KEY is set")
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[plugin], features={"weather": True})
    assert info.value.code == "boot.plugin.env_missing"
    message = str(info.value)
    assert "'weather'" in message
    assert "WEATHER_API_KEY is set" in message
    assert "features['weather'] = False" in message


async def test_auto_detect_receives_the_raw_environment(tmp_path: Path) -> None:
    rec = Recorder()
    env = {**local_env(tmp_path), "WEATHER_API_KEY": "k-123", "UNDECLARED": ""}
    runtime = await create_runtime(
        {"name": "Test Oracle"},
        plugins=[make("weather", detect=True, recorder=rec)],
        bundled_plugins=[],
        discover_entry_points=False,
        env=env,
    )
    await runtime.aclose()
    assert rec.envs == [env]
    assert "WEATHER_API_KEY" not in runtime.config


async def test_an_async_auto_detect_is_awaited() -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest_for("weather")
        auto_detect_hint = "never"

        async def auto_detect(self, env: Mapping[str, str]) -> bool:
            return False

    async with await create_test_runtime(plugins=[Weather()]) as rt:
        assert [e.code for e in rt.status().excluded] == ["auto_detect_failed"]


async def test_auto_detect_raising_fails_boot() -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest_for("weather")

        def auto_detect(self, env: Mapping[str, str]) -> bool:
            raise LookupError("probe failed")

    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[Weather()])
    assert info.value.code == "boot.plugin.invalid"
    assert "auto_detect of plugin 'weather' raised LookupError: probe failed" in str(info.value)
    assert isinstance(info.value.__cause__, LookupError)


@pytest.mark.parametrize("value", [1, 0, "yes", "AUTO", None, "true"])
async def test_a_feature_value_other_than_true_false_or_auto_is_invalid(value: Any) -> None:
    features: dict[str, Any] = {"weather": value}
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather")], features=features)
    assert info.value.code == "boot.plugin.invalid"
    assert "features['weather']" in str(info.value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("domainIndexer", "'domain-indexer'"),
        ("wether", "'weather'"),
        ("user_preferences", "'user-preferences'"),
    ],
)
async def test_an_unknown_feature_key_is_logged_with_close_matches(
    caplog: pytest.LogCaptureFixture, key: str, suggestion: str
) -> None:
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(plugins=[make("weather")], features={key: True}) as rt:
            assert rt.status().loaded == ["weather"]
    logged = messages(caplog, "boot.feature.unknown_key")
    assert len(logged) == 1
    assert f"'{key}'" in logged[0]
    assert "did you mean" in logged[0]
    assert suggestion in logged[0]


def test_an_unknown_feature_key_with_nothing_close_is_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER.name):
        check_features({"zzzzzz": False}, ["weather"], LOGGER)
    logged = messages(caplog, "boot.feature.unknown_key")
    assert len(logged) == 1
    assert "'zzzzzz'" in logged[0]
    assert "did you mean" not in logged[0]


def test_known_feature_keys_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
        check_features({"weather": False, "memory": "auto"}, ["weather", "memory"], LOGGER)
    assert caplog.records == []


async def test_features_apply_to_bundled_plugins_too(tmp_path: Path) -> None:
    runtime = await create_runtime(
        {"name": "Test Oracle"},
        bundled_plugins=[make("memory"), make("weather")],
        features={"memory": False},
        env=local_env(tmp_path),
    )
    try:
        status = runtime.plugins.status()
        assert status.loaded == ["weather"]
        assert [(e.plugin, e.code) for e in status.excluded] == [("memory", "feature_disabled")]
    finally:
        await runtime.aclose()


# --- candidates (CORE-25) -----------------------------------------------------------------


def test_a_user_instance_replaces_the_discovered_one_of_the_same_name() -> None:
    discovered = [make("memory", plugin_version="1"), make("weather", plugin_version="1")]
    user = [make("memory", plugin_version="2"), make("notes")]
    candidates = dedupe_candidates(discovered, user)
    assert [(p.name, p.version) for p in candidates] == [
        ("memory", "2"),
        ("weather", "1"),
        ("notes", "1.0.0"),
    ]
    assert candidates[0] is user[0]


async def test_a_user_instance_replaces_a_bundled_plugin_at_boot(tmp_path: Path) -> None:
    runtime = await create_runtime(
        {"name": "Test Oracle"},
        bundled_plugins=[make("memory", plugin_version="1.0.0")],
        plugins=[make("memory", plugin_version="2.0.0")],
        env=local_env(tmp_path),
    )
    try:
        assert runtime.plugins.status().versions == {"memory": "2.0.0"}
    finally:
        await runtime.aclose()


async def test_duplicate_names_within_plugins_fail_boot() -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather"), make("memory"), make("weather")])
    assert info.value.code == "boot.plugin.duplicate_name"
    assert "'weather'" in str(info.value)


# --- dependencies (CORE-28) ---------------------------------------------------------------


async def test_a_dependency_excluded_by_auto_detect_cascades_to_an_auto_dependant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = Recorder()
    plugins = [
        make("skills", depends=("sandbox",), recorder=rec),
        make("sandbox", detect=False, hint="SANDBOX_URL is set", recorder=rec),
        make("memory"),
    ]
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(plugins=plugins) as rt:
            status = rt.status()
    assert status.loaded == ["memory"]
    assert [(e.plugin, e.code) for e in status.excluded] == [
        ("skills", "dependency_excluded"),
        ("sandbox", "auto_detect_failed"),
    ]
    assert status.excluded[0].reason == "dependency 'sandbox' not loaded"
    cascaded = messages(caplog, "boot.plugin.cascaded_off")
    assert len(cascaded) == 1
    assert "'skills'" in cascaded[0]
    assert "'sandbox'" in cascaded[0]
    assert ("skills", "get_tools") not in rec.calls


async def test_a_cascade_runs_to_a_fixed_point_through_a_chain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [
        make("alpha", depends=("beta",)),
        make("beta", depends=("gamma",)),
        make("gamma", detect=False),
        make("delta", depends=("alpha",)),
        make("omega"),
    ]
    with caplog.at_level(logging.WARNING):
        async with await create_test_runtime(plugins=plugins) as rt:
            status = rt.status()
    assert status.loaded == ["omega"]
    by_plugin = {e.plugin: e for e in status.excluded}
    assert by_plugin["gamma"].code == "auto_detect_failed"
    assert by_plugin["beta"].reason == "dependency 'gamma' not loaded"
    assert by_plugin["alpha"].reason == "dependency 'beta' not loaded"
    assert by_plugin["delta"].reason == "dependency 'alpha' not loaded"
    assert {by_plugin[p].code for p in ("alpha", "beta", "delta")} == {"dependency_excluded"}
    assert len(messages(caplog, "boot.plugin.cascaded_off")) == 3


async def test_a_dependency_that_is_not_a_candidate_fails_boot_with_dep_missing() -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("skills", depends=("sandbox",))])
    assert info.value.code == "boot.plugin.dep_missing"
    message = str(info.value)
    assert "'skills'" in message
    assert "'sandbox'" in message
    assert "features={'skills': False}" in message


async def test_a_dependency_disabled_by_features_fails_boot_with_dep_missing() -> None:
    plugins = [make("skills", depends=("sandbox",)), make("sandbox")]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins, features={"sandbox": False})
    assert info.value.code == "boot.plugin.dep_missing"
    assert "'skills'" in str(info.value)
    assert "disabled by features" in str(info.value)


async def test_a_forced_dependant_of_an_auto_excluded_plugin_fails_boot_with_dep_missing() -> None:
    plugins = [make("skills", depends=("sandbox",)), make("sandbox", detect=False)]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins, features={"skills": True})
    assert info.value.code == "boot.plugin.dep_missing"
    assert "'skills'" in str(info.value)
    assert "'sandbox'" in str(info.value)


async def test_a_forced_dependant_of_a_cascaded_plugin_fails_boot_with_dep_missing() -> None:
    plugins = [
        make("top", depends=("middle",)),
        make("middle", depends=("bottom",)),
        make("bottom", detect=False),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins, features={"top": True})
    assert info.value.code == "boot.plugin.dep_missing"
    assert "'top'" in str(info.value)
    assert "'middle'" in str(info.value)


# --- topological order (CORE-29) ------------------------------------------------------------


def names(plugins: list[OraclePlugin]) -> list[str]:
    return [p.name for p in plugins]


def test_independent_plugins_are_ordered_by_name() -> None:
    assert names(topological_order([make("c"), make("a"), make("b")])) == ["a", "b", "c"]


def test_a_dependency_comes_first_and_ties_break_by_name() -> None:
    plugins = [make("alpha", depends=("zeta",)), make("zeta"), make("mid")]
    assert names(topological_order(plugins)) == ["mid", "zeta", "alpha"]


def test_a_diamond_is_ordered_by_dependencies_then_name() -> None:
    plugins = [
        make("d", depends=("c", "b")),
        make("c", depends=("a",)),
        make("b", depends=("a",)),
        make("a"),
    ]
    assert names(topological_order(plugins)) == ["a", "b", "c", "d"]


async def test_status_loaded_is_in_topological_order() -> None:
    plugins = [make("alpha", depends=("zeta",)), make("zeta"), make("mid")]
    async with await create_test_runtime(plugins=plugins) as rt:
        assert rt.status().loaded == ["mid", "zeta", "alpha"]


@pytest.mark.parametrize(
    ("edges", "quoted"),
    [
        ({"a": ("b",), "b": ("a",)}, "a → b → a"),
        ({"a": ("b",), "b": ("c",), "c": ("a",)}, "a → b → c → a"),
        ({"solo": ("solo",)}, "solo → solo"),
    ],
    ids=["two", "three", "self"],
)
async def test_a_dependency_cycle_fails_boot_quoting_it(
    edges: dict[str, tuple[str, ...]], quoted: str
) -> None:
    plugins = [make(name, depends=deps) for name, deps in edges.items()]
    plugins.append(make("outside", depends=(next(iter(edges)),)))
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins)
    assert info.value.code == "boot.plugin.dep_cycle"
    assert quoted in str(info.value)


# --- soft dependencies (CORE-30) ------------------------------------------------------------


async def test_a_missing_soft_dependency_logs_once_and_yields_a_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [make("skills", soft=("memory", "sandbox")), make("sandbox")]
    with caplog.at_level(logging.INFO):
        async with await create_test_runtime(plugins=plugins) as rt:
            status = rt.status()
    assert status.loaded == ["sandbox", "skills"]
    assert status.soft_dep_gaps == [SoftDependencyGap("skills", "memory")]
    logged = messages(caplog, "boot.plugin.soft_dep_missing")
    assert len(logged) == 1
    assert "'skills'" in logged[0]
    assert "'memory'" in logged[0]


async def test_soft_dependencies_never_affect_order() -> None:
    plugins = [make("zeta"), make("alpha", soft=("zeta",))]
    async with await create_test_runtime(plugins=plugins) as rt:
        assert rt.status().loaded == ["alpha", "zeta"]
        assert rt.status().soft_dep_gaps == []


async def test_soft_dependencies_never_affect_inclusion() -> None:
    plugins = [make("skills", soft=("sandbox",)), make("sandbox", detect=False)]
    async with await create_test_runtime(plugins=plugins) as rt:
        status = rt.status()
    assert status.loaded == ["skills"]
    assert status.soft_dep_gaps == [SoftDependencyGap("skills", "sandbox")]


def test_resolve_reports_excluded_in_candidate_order() -> None:
    plugins = [make("b", detect=False), make("a"), make("c")]
    detected = {"b": False}
    resolution = resolve(plugins, {"c": False}, lambda p: detected.get(p.name), LOGGER)
    assert names(resolution.ordered) == ["a"]
    assert [(e.plugin, e.code) for e in resolution.excluded] == [
        ("b", "auto_detect_failed"),
        ("c", "feature_disabled"),
    ]


# --- status report (CORE-31) --------------------------------------------------------------


async def status_runtime() -> TestRuntime:
    return await create_test_runtime(
        plugins=[
            make("weather", plugin_version="1.2.3", soft=("memory",)),
            make("notes", plugin_version="0.4.0"),
            make("sandbox", detect=False, hint="SANDBOX_URL is set"),
        ],
    )


async def test_status_reports_loaded_excluded_gaps_and_versions() -> None:
    async with await status_runtime() as rt:
        status = rt.status()
    assert status.loaded == ["notes", "weather"]
    assert [(e.plugin, e.code) for e in status.excluded] == [("sandbox", "auto_detect_failed")]
    assert status.soft_dep_gaps == [SoftDependencyGap("weather", "memory")]
    assert status.versions == {"notes": "0.4.0", "weather": "1.2.3"}
    assert status.failed == []
    as_dict = status.to_dict()
    assert as_dict["loaded"] == ["notes", "weather"]
    assert as_dict["excluded"][0]["code"] == "auto_detect_failed"
    assert as_dict["soft_dep_gaps"] == [{"plugin": "weather", "missing": "memory"}]
    assert as_dict["versions"] == {"notes": "0.4.0", "weather": "1.2.3"}


async def test_status_is_a_copy() -> None:
    async with await status_runtime() as rt:
        first = rt.status()
        first.loaded.append("intruder")
        first.excluded.clear()
        first.soft_dep_gaps.clear()
        first.versions["intruder"] = "6.6.6"
        second = rt.status()
        assert second.loaded == ["notes", "weather"]
        assert len(second.excluded) == 1
        assert len(second.soft_dep_gaps) == 1
        assert "intruder" not in second.versions
        assert rt.runtime.plugins.status() == second


# --- status events and background errors (CORE-32) -------------------------------------------


def test_a_status_change_event_serialises_from_as_from() -> None:
    event = PluginStatusChangeEvent("matrix", "pending", "failed", reason="no homeserver")
    assert event.to_dict() == {
        "plugin": "matrix",
        "from": "pending",
        "to": "failed",
        "reason": "no homeserver",
    }
    assert "from_" not in event.to_dict()


async def test_every_status_handler_receives_every_event_and_failures_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first: list[PluginStatusChangeEvent] = []
    second: list[PluginStatusChangeEvent] = []

    def broken(event: PluginStatusChangeEvent) -> None:
        raise RuntimeError("handler bug")

    events = [
        PluginStatusChangeEvent("matrix", "pending", "loaded"),
        PluginStatusChangeEvent("matrix", "loaded", "failed", reason="sync stopped"),
    ]
    async with await create_test_runtime(plugins=[make("weather")]) as rt:
        rt.runtime.on_plugin_status_change(first.append)
        rt.runtime.on_plugin_status_change(broken)
        rt.runtime.on_plugin_status_change(second.append)
        with caplog.at_level(logging.ERROR):
            for event in events:
                rt.runtime.emit_status_change(event)
    assert first == events
    assert second == events
    failures = [r for r in caplog.records if "on_plugin_status_change handler failed" in r.message]
    assert len(failures) == 2
    assert [r.exc_info[0] if r.exc_info else None for r in failures] == [RuntimeError] * 2


async def test_status_events_without_handlers_are_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with await create_test_runtime(plugins=[make("weather")]) as rt:
        with caplog.at_level(logging.DEBUG):
            rt.runtime.emit_status_change(PluginStatusChangeEvent("matrix", "pending", "loaded"))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_error_handlers_receive_exception_and_source_and_failures_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    received: list[tuple[BaseException, str]] = []
    also: list[str] = []

    def broken(exc: BaseException, source: str) -> None:
        raise ValueError("handler bug")

    error = ConnectionError("homeserver unreachable")
    async with await create_test_runtime(plugins=[make("weather")]) as rt:
        rt.runtime.on_error(lambda exc, source: received.append((exc, source)))
        rt.runtime.on_error(broken)
        rt.runtime.on_error(lambda exc, source: also.append(source))
        with caplog.at_level(logging.ERROR):
            rt.runtime.report_error(error, "matrix-init")
    assert received == [(error, "matrix-init")]
    assert also == ["matrix-init"]
    failures = [r for r in caplog.records if "on_error handler failed" in r.message]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert failures[0].exc_info[0] is ValueError


async def test_background_errors_without_handlers_are_logged_at_error_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ConnectionError("homeserver unreachable")
    async with await create_test_runtime(plugins=[make("weather")]) as rt:
        with caplog.at_level(logging.ERROR):
            rt.runtime.report_error(error, "matrix-init")
    records = [r for r in caplog.records if "matrix-init" in r.getMessage()]
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None
    assert records[0].exc_info[1] is error
