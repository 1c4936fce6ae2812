"""Tests of the plugin API (CORE-4 … CORE-9): class form, functional form, checks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from oracle_core import (
    BUNDLED_PLUGIN_NAMES,
    HOOK_NAMES,
    OracleBootError,
    OraclePlugin,
    OracleRuntime,
    PluginContext,
    PluginTool,
    RuntimeContext,
    create_runtime,
    define_oracle_plugin,
    hookimpl,
    not_a_hook,
)
from oracle_core._plugin import check_plugin_object, near_miss_hook
from oracle_core.testing import create_test_runtime

# --- shared helpers ---------------------------------------------------------------------


def manifest(title: str = "Weather") -> dict[str, Any]:
    """A minimal valid on-demand manifest."""
    return {"title": title, "summary": f"{title} things.", "when_to_use": [f"{title} asks"]}


def local_env(tmp_path: Path) -> dict[str, str]:
    """An offline ``local`` environment for ``create_runtime``."""
    return {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "m",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }


async def boot(tmp_path: Path, *plugins: OraclePlugin, **kwargs: Any) -> OracleRuntime:
    """``create_runtime`` with only ``plugins``, no discovery, on the local backend."""
    return await create_runtime(
        {"name": "Test Oracle"},
        plugins=plugins,
        bundled_plugins=[],
        discover_entry_points=False,
        env=local_env(tmp_path),
        **kwargs,
    )


class NoArgs(BaseModel):
    """Arguments of a tool that takes none."""


def make_tool(name: str, answer: str = "ok") -> PluginTool:
    """A tool that answers ``answer``."""

    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return answer

    return PluginTool(name=name, description=f"{name} tool.", args_schema=NoArgs, handler=handler)


IMPL_MARK = "oracle_impl"


# --- class form (CORE-4, CORE-5, CORE-8) ----------------------------------------------------


def test_class_form_methods_named_like_hooks_are_marked_as_implementations() -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return []

        async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return []

        def forecast(self) -> str:
            return "sunny"

    assert hasattr(Weather.get_tools, IMPL_MARK)
    assert hasattr(Weather.get_request_tools, IMPL_MARK)
    assert not hasattr(Weather.forecast, IMPL_MARK)
    assert Weather().implemented_hooks() == {"get_tools", "get_request_tools"}


async def test_class_form_sync_and_async_hooks_are_both_called() -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [make_tool("sync_tool", "from sync")]

        async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [make_tool("async_tool", "from async")]

    async with await create_test_runtime(plugins=[Weather()]) as rt:
        assert set(await rt.list_tools()) >= {"sync_tool", "async_tool"}
        assert await rt.invoke_tool("sync_tool") == "from sync"
        assert await rt.invoke_tool("async_tool") == "from async"


async def test_boot_and_request_variants_are_both_used_boot_first() -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return [make_tool("alerts")]

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [make_tool("forecast")]

    async with await create_test_runtime(plugins=[Weather()]) as rt:
        built = await rt.build("hi")
    assert [tool.name for tool in built.tools] == [
        "list_capabilities",
        "load_capability",
        "forecast",
        "alerts",
    ]


async def test_class_form_async_get_turn_state_and_sync_get_prompt_blocks() -> None:
    class Prefs(OraclePlugin):
        name = "prefs"
        version = "1.0.0"
        manifest = manifest("Prefs")

        async def get_turn_state(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:
            return {"user_preferences": {"tone": "dry"}}

        def get_prompt_blocks(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
            return {"operational_mode": "Prefs mode is on."}

    async with await create_test_runtime(plugins=[Prefs()]) as rt:
        built = await rt.build("hi")
    assert built.input["user_preferences"] == {"tone": "dry"}
    assert "Prefs mode is on." in built.prompt.text


async def test_class_form_hook_may_take_a_subset_of_the_spec_parameters() -> None:
    calls: list[str] = []

    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        def get_tools(self) -> list[PluginTool]:
            calls.append("get_tools")
            return [make_tool("forecast")]

    async with await create_test_runtime(plugins=[Weather()]) as rt:
        assert "forecast" in await rt.list_tools()
    assert calls == ["get_tools"]


async def test_class_form_hook_with_a_parameter_outside_the_spec_is_rejected(
    tmp_path: Path,
) -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        def get_tools(self, ctx: PluginContext[Any], city: str) -> list[PluginTool]:
            return []

    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, Weather())
    assert info.value.code == "boot.plugin.unknown_hook"
    assert "'weather'" in str(info.value)
    assert "get_tools" in str(info.value)
    assert "city" in str(info.value)


# --- define_oracle_plugin (CORE-9) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "closest"),
    [
        ("get_tool", "get_tools"),
        ("get_middleware", "get_middlewares"),
        ("depend_on", "depends_on"),
        ("operatingGuide", "operating_guide"),
        ("config_shema", "config_schema"),
    ],
)
def test_define_oracle_plugin_rejects_an_unknown_key_naming_the_closest(
    key: str, closest: str
) -> None:
    members: dict[str, Any] = {key: lambda ctx: []}
    with pytest.raises(TypeError) as info:
        define_oracle_plugin(name="weather", version="1", manifest=manifest(), **members)
    assert repr(key) in str(info.value)
    assert f"did you mean {closest!r}" in str(info.value)


@pytest.mark.parametrize("missing", ["name", "version", "manifest"])
def test_define_oracle_plugin_requires_name_version_and_manifest(missing: str) -> None:
    kwargs: dict[str, Any] = {"name": "weather", "version": "1", "manifest": manifest()}
    del kwargs[missing]
    with pytest.raises(TypeError) as info:
        define_oracle_plugin(**kwargs)
    assert repr(missing) in str(info.value)


def test_define_oracle_plugin_rejects_a_hook_that_is_not_callable() -> None:
    with pytest.raises(TypeError) as info:
        define_oracle_plugin(name="weather", version="1", manifest=manifest(), get_tools=[])
    assert "'get_tools'" in str(info.value)


def test_define_oracle_plugin_builds_a_plugin_instance_with_the_attributes() -> None:
    class Config(BaseModel):
        WEATHER_UNITS: str = "metric"

    plugin = define_oracle_plugin(
        name="domain-weather",
        version="2.1.0",
        manifest=manifest(),
        depends_on=("memory",),
        soft_depends_on=("portal",),
        config_schema=Config,
        auto_detect_hint="WEATHER_API_KEY is set",
        operating_guide="Always give units.",
        get_tools=lambda ctx: [],
    )
    assert isinstance(plugin, OraclePlugin)
    assert plugin.name == "domain-weather"
    assert plugin.version == "2.1.0"
    assert plugin.depends_on == ("memory",)
    assert plugin.soft_depends_on == ("portal",)
    assert plugin.config_schema is Config
    assert plugin.auto_detect_hint == "WEATHER_API_KEY is set"
    assert plugin.operating_guide == "Always give units."
    assert plugin.implemented_hooks() == {"get_tools"}
    assert check_plugin_object(plugin) is plugin


def test_define_oracle_plugin_does_not_mark_the_callers_function() -> None:
    def get_tools(ctx: PluginContext[Any]) -> list[PluginTool]:
        return []

    define_oracle_plugin(name="weather", version="1", manifest=manifest(), get_tools=get_tools)
    assert not hasattr(get_tools, IMPL_MARK)


async def test_define_oracle_plugin_hooks_are_called_without_self_with_their_arguments() -> None:
    seen: list[tuple[str, str]] = []

    def get_tools(ctx: PluginContext[Any]) -> list[PluginTool]:
        seen.append(("get_tools", ctx.plugin_name))
        return [make_tool("boot_forecast", "boot")]

    async def get_request_tools(rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        seen.append(("get_request_tools", rt_ctx.plugin_name))
        return [make_tool("request_forecast", "request")]

    plugin = define_oracle_plugin(
        name="weather",
        version="1",
        manifest=manifest(),
        get_tools=get_tools,
        get_request_tools=get_request_tools,
    )
    async with await create_test_runtime(plugins=[plugin]) as rt:
        tools = await rt.list_tools()
        assert rt.runtime.booted[0].boot_failures == []
    assert {"boot_forecast", "request_forecast"} <= set(tools)
    assert ("get_tools", "weather") in seen
    assert ("get_request_tools", "weather") in seen


async def test_define_oracle_plugin_accepts_a_hookimpl_decorated_function() -> None:
    @hookimpl
    def get_tools(ctx: PluginContext[Any]) -> list[PluginTool]:
        return [make_tool("decorated", "yes")]

    plugin = define_oracle_plugin(
        name="weather", version="1", manifest=manifest(), get_tools=get_tools
    )
    async with await create_test_runtime(plugins=[plugin]) as rt:
        assert await rt.invoke_tool("decorated") == "yes"


async def test_define_oracle_plugin_is_interchangeable_with_a_class_instance() -> None:
    class Memory(OraclePlugin):
        name = "memory"
        version = "1.0.0"
        manifest = manifest("Memory")

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return [make_tool("remember", "class form")]

    functional = define_oracle_plugin(
        name="weather",
        version="3.0.0",
        manifest=manifest(),
        depends_on=("memory",),
        get_tools=lambda ctx: [make_tool("forecast", "functional form")],
    )
    async with await create_test_runtime(plugins=[functional, Memory()]) as rt:
        status = rt.status()
        assert status.loaded == ["memory", "weather"]
        assert status.versions == {"memory": "1.0.0", "weather": "3.0.0"}
        assert await rt.invoke_tool("remember") == "class form"
        assert await rt.invoke_tool("forecast") == "functional form"


async def test_define_oracle_plugin_hook_with_a_parameter_outside_the_spec_is_rejected(
    tmp_path: Path,
) -> None:
    def get_tools(ctx: PluginContext[Any], city: str) -> list[PluginTool]:
        return []

    plugin = define_oracle_plugin(
        name="weather", version="1", manifest=manifest(), get_tools=get_tools
    )
    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, plugin)
    assert info.value.code == "boot.plugin.unknown_hook"
    assert "'weather'" in str(info.value)


# --- name and attribute checks (CORE-4) -----------------------------------------------------


def plugin_with(**attrs: Any) -> OraclePlugin:
    """An instance of a fresh subclass with valid attributes overridden by ``attrs``."""
    namespace: dict[str, Any] = {"name": "weather", "version": "1.0.0", "manifest": manifest()}
    namespace.update(attrs)
    for key in [k for k, v in namespace.items() if v is DELETE]:
        del namespace[key]
    cls = type("Weather", (OraclePlugin,), namespace)
    instance: OraclePlugin = cls()
    return instance


DELETE = object()


@pytest.mark.parametrize("name", ["weather", "domain-indexer", "a1", "x-2", "matrix-group-chats"])
def test_kebab_case_names_are_accepted(name: str) -> None:
    plugin = plugin_with(name=name)
    assert check_plugin_object(plugin) is plugin


@pytest.mark.parametrize(
    "name",
    [
        "Weather",
        "domain_indexer",
        "domainIndexer",
        "-weather",
        "weather-",
        "1weather",
        "a--b",
        "",
        "dom indexer",
        "wéather",
    ],
)
def test_names_that_are_not_kebab_case_are_invalid(name: str) -> None:
    with pytest.raises(OracleBootError) as info:
        check_plugin_object(plugin_with(name=name))
    assert info.value.code == "boot.plugin.invalid"
    assert repr(name) in str(info.value)


def test_a_missing_name_is_invalid() -> None:
    with pytest.raises(OracleBootError) as info:
        check_plugin_object(plugin_with(name=DELETE))
    assert info.value.code == "boot.plugin.invalid"


async def test_an_invalid_name_fails_boot(tmp_path: Path) -> None:
    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, plugin_with(name="Bad_Name"))
    assert info.value.code == "boot.plugin.invalid"
    assert "'Bad_Name'" in str(info.value)


@pytest.mark.parametrize(
    ("attrs", "problem"),
    [
        ({"version": 1}, "version must be a string"),
        ({"version": DELETE}, "version must be a string"),
        ({"manifest": "Weather"}, "manifest must be a PluginManifest or a dict"),
        ({"manifest": DELETE}, "manifest must be a PluginManifest or a dict"),
        ({"depends_on": "memory"}, "depends_on must be a tuple of plugin names"),
        ({"depends_on": ("memory", 3)}, "depends_on must be a tuple of plugin names"),
        ({"soft_depends_on": "portal"}, "soft_depends_on must be a tuple of plugin names"),
        ({"config_schema": dict}, "config_schema must be a pydantic BaseModel subclass"),
        ({"config_schema": NoArgs()}, "config_schema must be a pydantic BaseModel subclass"),
        ({"auto_detect_hint": 5}, "auto_detect_hint must be a string or None"),
        ({"operating_guide": ["x"]}, "operating_guide must be a string or None"),
    ],
)
def test_attributes_of_the_wrong_type_are_invalid(attrs: dict[str, Any], problem: str) -> None:
    with pytest.raises(OracleBootError) as info:
        check_plugin_object(plugin_with(**attrs))
    assert info.value.code == "boot.plugin.invalid"
    assert "'weather'" in str(info.value)
    assert problem in str(info.value)


def test_every_attribute_problem_is_reported_at_once() -> None:
    with pytest.raises(OracleBootError) as info:
        check_plugin_object(plugin_with(version=2, operating_guide=3))
    assert "version must be a string" in str(info.value)
    assert "operating_guide must be a string or None" in str(info.value)


def test_an_object_that_is_not_an_oracle_plugin_is_invalid() -> None:
    class Lookalike:
        name = "weather"
        version = "1"
        manifest = manifest()

    with pytest.raises(OracleBootError) as info:
        check_plugin_object(Lookalike(), source="plugins=")
    assert info.value.code == "boot.plugin.invalid"
    assert "plugins=" in str(info.value)


def test_optional_attributes_default_to_empty() -> None:
    plugin = plugin_with()
    assert plugin.depends_on == ()
    assert plugin.soft_depends_on == ()
    assert plugin.config_schema is None
    assert plugin.auto_detect_hint is None
    assert plugin.operating_guide is None


# --- near-miss hook names (CORE-8) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "hook"),
    [
        ("getTools", "get_tools"),
        ("get_tool", "get_tools"),
        ("get_middleware", "get_middlewares"),
        ("getSharedState", "get_shared_state"),
        ("get_request_tool", "get_request_tools"),
        ("get_subagents", "get_sub_agents"),
        ("autoDetect", "auto_detect"),
    ],
)
def test_near_miss_method_names_are_rejected(method: str, hook: str) -> None:
    assert near_miss_hook(method) == hook

    def impl(self: OraclePlugin, ctx: Any = None) -> list[Any]:
        return []

    with pytest.raises(OracleBootError) as info:
        check_plugin_object(plugin_with(**{method: impl}))
    assert info.value.code == "boot.plugin.unknown_hook"
    assert f"'{method}'" in str(info.value)
    assert f"'{hook}'" in str(info.value)
    assert "@not_a_hook" in str(info.value)


@pytest.mark.parametrize("method", ["getTools", "get_tool", "get_middleware"])
def test_not_a_hook_allows_a_near_miss_name(method: str) -> None:
    @not_a_hook
    def impl(self: OraclePlugin) -> str:
        return "plain"

    plugin = plugin_with(**{method: impl})
    assert check_plugin_object(plugin) is plugin


@pytest.mark.parametrize(
    "method", ["fetch_forecast", "_get_tool", "get_weather", "lookup", "tools"]
)
def test_methods_far_from_any_hook_are_ordinary(method: str) -> None:
    assert near_miss_hook(method) is None

    def impl(self: OraclePlugin) -> str:
        return "plain"

    plugin = plugin_with(**{method: impl})
    assert check_plugin_object(plugin) is plugin


def test_exact_hook_names_are_not_near_misses() -> None:
    assert all(near_miss_hook(hook) is None for hook in HOOK_NAMES)


async def test_a_near_miss_method_fails_boot(tmp_path: Path) -> None:
    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        def getTools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return []

    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, Weather())
    assert info.value.code == "boot.plugin.unknown_hook"
    assert "'weather'" in str(info.value)
    assert "'getTools'" in str(info.value)


async def test_only_exact_hook_names_are_called() -> None:
    calls: list[str] = []

    class Weather(OraclePlugin):
        name = "weather"
        version = "1.0.0"
        manifest = manifest()

        @not_a_hook
        def get_tool(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            calls.append("get_tool")
            return [make_tool("never")]

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            calls.append("get_tools")
            return [make_tool("forecast")]

    async with await create_test_runtime(plugins=[Weather()]) as rt:
        tools = await rt.list_tools()
    assert calls == ["get_tools"]
    assert "forecast" in tools
    assert "never" not in tools


# --- unknown hooks at registration (CORE-7) -------------------------------------------------


class UnknownHookPlugin(OraclePlugin):
    """Declares an ``@hookimpl`` that matches no hook spec."""

    name = "weather"
    version = "1.0.0"
    manifest = manifest()

    @hookimpl
    def get_weather_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return []


async def test_an_unknown_hookimpl_fails_boot_naming_plugin_and_method(tmp_path: Path) -> None:
    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, UnknownHookPlugin())
    assert info.value.code == "boot.plugin.unknown_hook"
    assert "'weather'" in str(info.value)
    assert "get_weather_tools" in str(info.value)


async def test_an_unknown_hookimpl_fails_boot_through_the_test_runtime() -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[UnknownHookPlugin()])
    assert info.value.code == "boot.plugin.unknown_hook"


async def test_a_plugin_later_excluded_by_auto_detect_is_still_checked(tmp_path: Path) -> None:
    class Hidden(UnknownHookPlugin):
        def auto_detect(self, env: Mapping[str, str]) -> bool:
            return False

    with pytest.raises(OracleBootError) as info:
        await boot(tmp_path, Hidden())
    assert info.value.code == "boot.plugin.unknown_hook"


async def test_a_plugin_disabled_by_features_is_not_registered(tmp_path: Path) -> None:
    runtime = await boot(tmp_path, UnknownHookPlugin(), features={"weather": False})
    try:
        assert runtime.plugins.status().loaded == []
        assert [e.code for e in runtime.plugins.status().excluded] == ["feature_disabled"]
    finally:
        await runtime.aclose()


# --- bundled plugin names (CORE-11) ---------------------------------------------------------


def test_bundled_plugin_names_are_sixteen_unique_kebab_case_names() -> None:
    assert len(BUNDLED_PLUGIN_NAMES) == 16
    assert len(set(BUNDLED_PLUGIN_NAMES)) == 16
    assert {
        "memory",
        "portal",
        "domain-indexer",
        "sandbox",
        "skills",
        "editor",
        "user-preferences",
        "matrix-group-chats",
        "vfs",
    } <= set(BUNDLED_PLUGIN_NAMES)
    assert "flows" not in BUNDLED_PLUGIN_NAMES
    assert all(check_plugin_object(plugin_with(name=n)).name == n for n in BUNDLED_PLUGIN_NAMES)
