"""Tests of the boot-time registries and request-time tool collisions (§6, CORE-40, CORE-41)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from pydantic import BaseModel

from oracle_core import (
    RESERVED_MIDDLEWARE_NAMES,
    Accessor,
    AuthExcludedRoute,
    MainAgentHooks,
    OracleBootError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    ReadonlyState,
    Registries,
    RuntimeContext,
)
from oracle_core.testing import ScriptedChatModel, TestRuntime, create_test_runtime

# --- shared helpers ---------------------------------------------------------------------


class NoArgs(BaseModel):
    """Arguments of a tool that takes none."""


def make_tool(name: str, answer: str = "ok") -> PluginTool:
    """A tool that answers ``answer``."""

    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return answer

    return PluginTool(name=name, description=f"{name} tool.", args_schema=NoArgs, handler=handler)


def make_sub_agent(name: str) -> PluginSubAgent:
    return PluginSubAgent(name=name, description=f"{name} helper.", system_prompt="Help.")


class Labelled(AgentMiddleware[AgentState[Any], Any, Any]):
    """A middleware that does nothing, named ``label``."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    @property
    def name(self) -> str:
        return self.label


class Unnamed(AgentMiddleware[AgentState[Any], Any, Any]):
    """A middleware named after its class."""


def manifest_for(plugin_name: str) -> dict[str, Any]:
    return {
        "title": plugin_name.title(),
        "summary": f"{plugin_name} things.",
        "when_to_use": [f"{plugin_name} questions"],
    }


def make(
    plugin_name: str,
    *,
    tools: Callable[[], list[PluginTool]] | None = None,
    sub_agents: Callable[[], list[PluginSubAgent]] | None = None,
    request_tools: Callable[[RuntimeContext[Any]], list[PluginTool]] | None = None,
    request_sub_agents: Callable[[], list[PluginSubAgent]] | None = None,
    middlewares: Callable[[], list[Any]] | None = None,
    shared: Callable[[], Mapping[str, Any]] | None = None,
    routes: Callable[[], list[Any]] | None = None,
    excluded_routes: Callable[[], list[Any]] | None = None,
    depends: tuple[str, ...] = (),
) -> OraclePlugin:
    """A plugin whose hooks return what the given callables return."""

    class Plugin(OraclePlugin):
        name = plugin_name
        version = "1.0.0"
        manifest = manifest_for(plugin_name)
        depends_on = depends

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            return tools() if tools else []

        def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
            return sub_agents() if sub_agents else []

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            return request_tools(rt_ctx) if request_tools else []

        def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
            return request_sub_agents() if request_sub_agents else []

        def get_middlewares(self, ctx: PluginContext[Any]) -> list[Any]:
            return middlewares() if middlewares else []

        def get_shared_state(self) -> Mapping[str, Any]:
            return shared() if shared else {}

        def get_routes(self, ctx: PluginContext[Any]) -> list[Any]:
            return routes() if routes else []

        def get_auth_excluded_routes(self) -> list[Any]:
            return excluded_routes() if excluded_routes else []

    return Plugin()


async def bound_tool_names(rt: TestRuntime) -> list[str]:
    """Names of the LangChain tools bound for one build, duplicates kept."""
    built = await rt.build("hi")
    return [tool.name for tool in built.tools]


def collision_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and "boot.registry.tool_collision" in r.getMessage()
    ]


# --- boot-time tool namespace (CORE-40) -----------------------------------------------------


async def test_boot_tools_are_registered_with_their_owner() -> None:
    plugins = [
        make("weather", tools=lambda: [make_tool("forecast")]),
        make("travel", sub_agents=lambda: [make_sub_agent("planner")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        registries = rt.runtime.registries
        assert registries.tools["forecast"].owner == "weather"
        assert registries.sub_agents["call_planner_agent"].owner == "travel"
        assert [t.name for t in registries.tools_of("weather")] == ["forecast"]
        assert [s.name for s in registries.sub_agents_of("travel")] == ["planner"]
        assert registries.tools_of("travel") == []


async def test_two_plugins_registering_one_tool_name_fail_boot_naming_both() -> None:
    plugins = [
        make("weather", tools=lambda: [make_tool("lookup")]),
        make("notes", tools=lambda: [make_tool("lookup")]),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins)
    assert info.value.code == "boot.registry.tool_collision"
    assert "'lookup'" in str(info.value)
    assert "'notes'" in str(info.value)
    assert "'weather'" in str(info.value)


async def test_one_plugin_registering_a_tool_name_twice_fails_boot() -> None:
    plugin = make("weather", tools=lambda: [make_tool("lookup"), make_tool("lookup")])
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[plugin])
    assert info.value.code == "boot.registry.tool_collision"


@pytest.mark.parametrize("meta", ["list_capabilities", "load_capability"])
async def test_a_tool_named_like_a_meta_tool_fails_boot(meta: str) -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather", tools=lambda: [make_tool(meta)])])
    assert info.value.code == "boot.registry.tool_collision"
    assert f"'{meta}'" in str(info.value)
    assert "'weather'" in str(info.value)
    assert "meta-tool" in str(info.value)


@pytest.mark.parametrize("tool_first", [True, False], ids=["tool_first", "sub_agent_first"])
async def test_a_tool_and_a_sub_agent_share_one_namespace(tool_first: bool) -> None:
    tool_plugin = make("alpha" if tool_first else "zeta", tools=lambda: [make_tool("call_x_agent")])
    sub_plugin = make("zeta" if tool_first else "alpha", sub_agents=lambda: [make_sub_agent("x")])
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[tool_plugin, sub_plugin])
    assert info.value.code == "boot.registry.tool_collision"
    assert "'call_x_agent'" in str(info.value)
    assert "'alpha'" in str(info.value)
    assert "'zeta'" in str(info.value)


async def test_two_sub_agents_with_one_call_name_fail_boot() -> None:
    plugins = [
        make("weather", sub_agents=lambda: [make_sub_agent("planner")]),
        make("travel", sub_agents=lambda: [make_sub_agent("Planner Agent")]),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins)
    assert info.value.code == "boot.registry.tool_collision"
    assert "'call_planner_agent'" in str(info.value)


async def test_get_tools_returning_something_else_than_plugin_tools_fails_boot() -> None:
    plugin = make("weather", tools=lambda: ["forecast"])  # type: ignore[list-item]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[plugin])
    assert info.value.code == "boot.plugin.invalid"
    assert "'weather'" in str(info.value)


async def test_a_failing_get_tools_degrades_the_plugin_and_boot_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> list[PluginTool]:
        raise ConnectionError("upstream down")

    plugins = [make("weather", tools=broken), make("notes", tools=lambda: [make_tool("note")])]
    with caplog.at_level(logging.ERROR):
        async with await create_test_runtime(plugins=plugins) as rt:
            assert rt.status().loaded == ["notes", "weather"]
            assert rt.runtime.registries.tools_of("weather") == []
            assert "note" in rt.runtime.registries.tools
            built = await rt.build("hi")
    assert ("weather", "get_tools: ConnectionError") in built.degraded
    assert any("'weather'" in r.getMessage() and "get_tools" in r.getMessage()
               for r in caplog.records)  # fmt: skip


# --- shared state (CORE-40, CORE-48) ------------------------------------------------------------


async def test_shared_state_is_registered_and_read_by_other_plugins() -> None:
    reads: list[Any] = []

    def units(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> str:
        return f"metric for {rt_ctx.plugin_name}"

    def read(rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        assert rt_ctx.shared is not None
        reads.append(rt_ctx.shared.weather_units)
        reads.append(rt_ctx.shared.get("absent_key", "default"))
        return []

    plugins = [
        make("weather", shared=lambda: {"weather_units": units}),
        make("travel", request_tools=read),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        assert rt.runtime.registries.shared_state["weather_units"] == ("weather", units)
        await rt.build("hi")
    assert reads == ["metric for weather", "default"]


async def test_a_shared_state_key_published_twice_fails_boot_naming_both() -> None:
    def accessor(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> int:
        return 1

    plugins = [
        make("weather", shared=lambda: {"region": accessor}),
        make("travel", shared=lambda: {"region": accessor}),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins)
    assert info.value.code == "boot.registry.shared_key_collision"
    assert "'region'" in str(info.value)
    assert "'travel'" in str(info.value)
    assert "'weather'" in str(info.value)


@pytest.mark.parametrize("key", ["_private", "not-an-identifier", "class", "1st", "", "a b"])
async def test_a_shared_state_key_that_is_not_a_public_identifier_fails_boot(key: str) -> None:
    def accessor(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> int:
        return 1

    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather", shared=lambda: {key: accessor})])
    assert info.value.code == "boot.plugin.invalid"
    assert repr(key) in str(info.value)
    assert "'weather'" in str(info.value)


async def test_a_shared_state_value_that_is_not_callable_fails_boot() -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather", shared=lambda: {"units": "metric"})])
    assert info.value.code == "boot.plugin.invalid"
    assert "'units'" in str(info.value)


# --- middleware (CORE-40, CORE-76, CORE-82) -------------------------------------------------


async def test_middleware_is_registered_per_plugin_in_topological_order() -> None:
    first, second, third = Labelled("audit"), Labelled("trace"), Labelled("redact")
    plugins = [
        make("zeta", middlewares=lambda: [first, second]),
        make("alpha", middlewares=lambda: [third], depends=("zeta",)),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        # Typed as lists while boot fills them; frozen into tuples afterwards.
        registered: Mapping[str, Any] = rt.runtime.registries.middlewares
        assert list(registered) == ["zeta", "alpha"]
        assert registered["zeta"] == (first, second)
        assert registered["alpha"] == (third,)
        assert [m.name for m in rt.runtime.plugin_middleware] == ["audit", "trace", "redact"]


async def test_two_plugins_middleware_with_one_name_fail_boot_naming_both() -> None:
    plugins = [
        make("weather", middlewares=lambda: [Labelled("audit")]),
        make("notes", middlewares=lambda: [Labelled("audit")]),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=plugins)
    assert info.value.code == "boot.registry.middleware_name_collision"
    assert "'audit'" in str(info.value)
    assert "'notes'" in str(info.value)
    assert "'weather'" in str(info.value)


async def test_two_middleware_of_one_class_in_one_plugin_collide() -> None:
    plugin = make("weather", middlewares=lambda: [Unnamed(), Unnamed()])
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[plugin])
    assert info.value.code == "boot.registry.middleware_name_collision"
    assert "'Unnamed'" in str(info.value)


@pytest.mark.parametrize("reserved", RESERVED_MIDDLEWARE_NAMES)
async def test_a_plugin_middleware_named_like_a_framework_one_fails_boot(reserved: str) -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(
            plugins=[make("weather", middlewares=lambda: [Labelled(reserved)])]
        )
    assert info.value.code in ("boot.registry.middleware_name_collision", "boot.plugin.invalid")
    assert f"'{reserved}'" in str(info.value)
    assert "'weather'" in str(info.value)


def test_the_reserved_middleware_names_are_the_framework_ones() -> None:
    assert RESERVED_MIDDLEWARE_NAMES == (
        "tool-policy",
        "capability-gate",
        "tool-validation",
        "tool-repetition-guard",
        "tool-approval",
        "tool-retry",
        "page-context",
        "safety-guardrail",
        "current-time",
        "history-condenser",
    )


async def test_the_framework_middleware_run_in_the_reserved_order() -> None:
    async def title(room_id: str) -> str:
        return "Room"

    hooks = MainAgentHooks(get_room_title=title, safety_model=ScriptedChatModel(["SAFE"]))
    async with await create_test_runtime(plugins=[], hooks=hooks) as rt:
        names = tuple(m.name for m in rt.runtime.framework_middleware)
    assert names == RESERVED_MIDDLEWARE_NAMES


async def test_a_middleware_that_is_not_an_agent_middleware_fails_boot() -> None:
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("weather", middlewares=lambda: [object()])])
    assert info.value.code == "boot.plugin.invalid"
    assert "'weather'" in str(info.value)


async def test_a_failing_get_middlewares_registers_none_and_boot_continues() -> None:
    def broken() -> list[Any]:
        raise RuntimeError("bad middleware config")

    async with await create_test_runtime(plugins=[make("weather", middlewares=broken)]) as rt:
        frozen: Any = rt.runtime.registries.middlewares["weather"]
        assert frozen == ()
        assert rt.runtime.plugin_middleware == []
        assert rt.runtime.booted[0].boot_failures == ["get_middlewares: RuntimeError"]


# --- manifests and titles (CORE-40) -----------------------------------------------------------


def test_a_repeated_title_is_a_warning_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    registries = Registries()
    logger = logging.getLogger("oracle.test.registries")
    first = PluginManifest.model_validate(manifest_for("weather"))
    second = PluginManifest.model_validate({**manifest_for("forecast"), "title": "wEaThEr"})
    with caplog.at_level(logging.WARNING, logger=logger.name):
        registries.add_manifest("weather", first, logger)
        registries.add_manifest("forecast", second, logger)
    assert registries.manifests == {"weather": first, "forecast": second}
    assert [r.getMessage() for r in caplog.records] == [
        "boot.registry.title_collision: plugins 'weather' and 'forecast' share the title 'wEaThEr'"
    ]


# --- routes (CORE-5, CORE-96) -------------------------------------------------------------------


async def test_routes_and_auth_exclusions_are_collected_with_their_owner() -> None:
    route = object()
    plugins = [
        make(
            "webhooks",
            routes=lambda: [route],
            excluded_routes=lambda: [AuthExcludedRoute("hooks/inbound", "post")],
        ),
        make("weather", excluded_routes=lambda: [AuthExcludedRoute("/health")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        assert rt.runtime.routes == [("webhooks", route)]
        assert rt.runtime.auth_excluded_routes == [
            AuthExcludedRoute("/health", None),
            AuthExcludedRoute("/hooks/inbound", "POST"),
        ]


async def test_an_auth_exclusion_of_the_wrong_type_fails_boot() -> None:
    plugin = make("webhooks", excluded_routes=lambda: ["/hooks/inbound"])
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[plugin])
    assert info.value.code == "boot.plugin.invalid"
    assert "'webhooks'" in str(info.value)


@pytest.mark.parametrize("hook", ["routes", "excluded_routes", "shared"])
async def test_a_failing_required_boot_hook_fails_boot_naming_the_plugin(hook: str) -> None:
    def broken() -> Any:
        raise RuntimeError("not ready")

    kwargs: dict[str, Any] = {hook: broken}
    with pytest.raises(OracleBootError) as info:
        await create_test_runtime(plugins=[make("webhooks", **kwargs)])
    assert "'webhooks'" in str(info.value)
    assert "not ready" in str(info.value)


# --- frozen after boot (CORE-40) ------------------------------------------------------------


async def test_registries_are_frozen_after_boot() -> None:
    def accessor(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> int:
        return 1

    plugin = make(
        "weather",
        tools=lambda: [make_tool("forecast")],
        middlewares=lambda: [Labelled("audit")],
        shared=lambda: {"units": accessor},
    )
    async with await create_test_runtime(plugins=[plugin]) as rt:
        registries = rt.runtime.registries
        with pytest.raises(TypeError):
            registries.tools["extra"] = registries.tools["forecast"]
        with pytest.raises(TypeError):
            del registries.manifests["weather"]
        with pytest.raises(TypeError):
            registries.shared_state["other"] = registries.shared_state["units"]
        frozen_list: Any = registries.middlewares["weather"]
        with pytest.raises(AttributeError):
            frozen_list.append(Labelled("late"))
        with pytest.raises(RuntimeError, match="frozen"):
            registries.add_tool("weather", make_tool("late_tool"))
        with pytest.raises(RuntimeError, match="frozen"):
            registries.add_sub_agent("weather", make_sub_agent("late"))
        with pytest.raises(RuntimeError, match="frozen"):
            registries.add_shared_state("weather", {"late": accessor})
        with pytest.raises(RuntimeError, match="frozen"):
            registries.add_middlewares("weather", [Labelled("late")])
        assert list(registries.tools) == ["forecast"]


# --- request-time collisions (CORE-41) --------------------------------------------------------


async def test_a_request_time_tool_colliding_with_an_earlier_plugins_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [
        make("zeta", request_tools=lambda rt_ctx: [make_tool("lookup", "from zeta")]),
        make(
            "alpha",
            depends=("zeta",),
            request_tools=lambda rt_ctx: [make_tool("lookup", "from alpha"), make_tool("other")],
        ),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        with caplog.at_level(logging.ERROR):
            names = await bound_tool_names(rt)
        logged = collision_logs(caplog)
        assert await rt.invoke_tool("lookup") == "from zeta"
    assert names.count("lookup") == 1
    assert "other" in names
    assert len(logged) == 1
    assert "'lookup'" in logged[0]
    assert "'alpha'" in logged[0]
    assert "'zeta'" in logged[0]


async def test_a_request_time_tool_colliding_with_a_boot_tool_of_its_plugin_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = make(
        "weather",
        tools=lambda: [make_tool("forecast", "boot")],
        request_tools=lambda rt_ctx: [make_tool("forecast", "request")],
    )
    async with await create_test_runtime(plugins=[plugin]) as rt:
        with caplog.at_level(logging.ERROR):
            names = await bound_tool_names(rt)
        logged = collision_logs(caplog)
        assert await rt.invoke_tool("forecast") == "boot"
    assert names.count("forecast") == 1
    assert len(logged) == 1
    assert "'forecast'" in logged[0]


@pytest.mark.parametrize("meta", ["list_capabilities", "load_capability"])
async def test_a_request_time_tool_named_like_a_meta_tool_is_dropped(
    caplog: pytest.LogCaptureFixture, meta: str
) -> None:
    plugin = make("weather", request_tools=lambda rt_ctx: [make_tool(meta, "plugin")])
    async with await create_test_runtime(plugins=[plugin]) as rt:
        with caplog.at_level(logging.ERROR):
            names = await bound_tool_names(rt)
    assert names.count(meta) == 1
    logged = collision_logs(caplog)
    assert len(logged) == 1
    assert "'weather'" in logged[0]
    assert "meta-tool" in logged[0]


async def test_a_request_time_sub_agent_colliding_with_a_tool_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [
        make("alpha", tools=lambda: [make_tool("call_scout_agent", "tool")]),
        make("zeta", request_sub_agents=lambda: [make_sub_agent("scout")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        with caplog.at_level(logging.ERROR):
            names = await bound_tool_names(rt)
        logged = collision_logs(caplog)
        assert await rt.invoke_tool("call_scout_agent") == "tool"
    assert names.count("call_scout_agent") == 1
    assert len(logged) == 1
    assert "'zeta'" in logged[0]
    assert "'alpha'" in logged[0]


async def test_a_later_plugins_boot_tool_is_never_bound_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 'alpha' comes first; its request-time tool shares a name with 'beta''s boot tool.
    plugins = [
        make("alpha", request_tools=lambda rt_ctx: [make_tool("shared", "alpha request")]),
        make("beta", tools=lambda: [make_tool("shared", "beta boot")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        assert rt.status().loaded == ["alpha", "beta"]
        with caplog.at_level(logging.ERROR):
            names = await bound_tool_names(rt)
    assert names.count("shared") == 1
    logged = collision_logs(caplog)
    assert len(logged) == 1
    assert "'alpha'" in logged[0]
    assert "'beta'" in logged[0]


async def test_a_boot_tool_wins_over_an_earlier_plugins_request_time_tool() -> None:
    plugins = [
        make("alpha", request_tools=lambda rt_ctx: [make_tool("shared", "alpha request")]),
        make("beta", tools=lambda: [make_tool("shared", "beta boot")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        built = await rt.build("hi")
        assert built.tool_infos["shared"].owner == "beta"
        owners = [getattr(t, "owner", None) for t in built.tools if t.name == "shared"]
    assert owners == ["beta"]


async def test_request_time_collisions_are_checked_again_on_every_build(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugins = [
        make("alpha", request_tools=lambda rt_ctx: [make_tool("lookup", "alpha")]),
        make("beta", request_tools=lambda rt_ctx: [make_tool("lookup", "beta")]),
    ]
    async with await create_test_runtime(plugins=plugins) as rt:
        with caplog.at_level(logging.ERROR):
            first = await bound_tool_names(rt)
            second = await bound_tool_names(rt)
    assert first == second
    assert first.count("lookup") == 1
    assert len(collision_logs(caplog)) == 2


def test_a_fresh_registry_accepts_a_valid_accessor_mapping() -> None:
    def accessor(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> int:
        return 1

    registries = Registries()
    accessors: dict[str, Accessor] = {"units": accessor, "region_code": accessor}
    registries.add_shared_state("weather", accessors)
    assert registries.shared_state == {
        "units": ("weather", accessor),
        "region_code": ("weather", accessor),
    }
