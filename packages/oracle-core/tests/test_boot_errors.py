"""One test per boot error code of Appendix A, and lifespan cleanup when boot fails (CORE-94)."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from pydantic import BaseModel

from oracle_core import (
    EnvValidationError,
    ManifestValidationError,
    OracleBootError,
    OracleConfigError,
    OraclePlugin,
    OracleRuntime,
    PluginContext,
    PluginTool,
    ReadonlyState,
    RuntimeContext,
    create_runtime,
    hookimpl,
)

# --- shared helpers ---------------------------------------------------------------------

APPENDIX_A_ERRORS = frozenset(
    {
        "boot.plugin.invalid",
        "boot.plugin.unknown_hook",
        "boot.plugin.load_failed",
        "boot.plugin.duplicate_name",
        "boot.plugin.env_missing",
        "boot.plugin.dep_missing",
        "boot.plugin.dep_cycle",
        "boot.manifest.invalid",
        "boot.config.invalid",
        "boot.config.core_collision",
        "boot.llm.key_missing",
        "boot.identity.entity_did_missing",
        "boot.registry.tool_collision",
        "boot.registry.shared_key_collision",
        "boot.registry.middleware_name_collision",
    }
)

COVERED: set[str] = set()
F = TypeVar("F", bound=Callable[..., Any])


def covers(code: str) -> Callable[[F], F]:
    """Mark a test as the one for ``code``."""

    def mark(test: F) -> F:
        COVERED.add(code)
        return test

    return mark


def local_env(tmp_path: Path) -> dict[str, str]:
    """An offline ``local`` environment for ``create_runtime``."""
    return {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "m",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }


def manifest_for(plugin_name: str) -> dict[str, Any]:
    return {
        "title": plugin_name.title(),
        "summary": f"{plugin_name} things.",
        "when_to_use": [f"{plugin_name} questions"],
    }


class NoArgs(BaseModel):
    """Arguments of a tool that takes none."""


def make_tool(name: str) -> PluginTool:
    def handler(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        return "ok"

    return PluginTool(name=name, description=f"{name} tool.", args_schema=NoArgs, handler=handler)


def plugin(plugin_name: str, **members: Any) -> OraclePlugin:
    """An instance of a fresh plugin class with ``members`` as class attributes."""
    namespace: dict[str, Any] = {
        "name": plugin_name,
        "version": "1.0.0",
        "manifest": manifest_for(plugin_name),
    }
    namespace.update(members)
    instance: OraclePlugin = type("Plugin", (OraclePlugin,), namespace)()
    return instance


async def boot_fails(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    *plugins: OraclePlugin,
    env: Mapping[str, str] | None = None,
    config: Any = None,
    **kwargs: Any,
) -> OracleBootError:
    """Boot ``plugins``; return the boot error after checking it was logged."""
    options: dict[str, Any] = {"bundled_plugins": [], "discover_entry_points": False}
    options.update(kwargs)
    with caplog.at_level(logging.ERROR), pytest.raises(OracleBootError) as info:
        await create_runtime(
            {"name": "Test Oracle"} if config is None else config,
            plugins=plugins,
            env=local_env(tmp_path) if env is None else env,
            **options,
        )
    error = info.value
    assert error.code in APPENDIX_A_ERRORS
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[boot-error]")]
    assert f"[boot-error] {error.code}: {error}" in logged
    if error.hint:
        assert error.hint in str(error)
    return error


def test_every_appendix_a_error_code_has_a_test() -> None:
    assert COVERED == APPENDIX_A_ERRORS


# --- plugin errors ----------------------------------------------------------------------------


@covers("boot.plugin.invalid")
async def test_plugin_invalid(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    error = await boot_fails(tmp_path, caplog, plugin("weather", version=2))
    assert error.code == "boot.plugin.invalid"
    assert "'weather'" in str(error)
    assert "version" in str(error)


@covers("boot.plugin.unknown_hook")
async def test_plugin_unknown_hook(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    @hookimpl
    def get_forecasts(self: OraclePlugin, ctx: PluginContext[Any]) -> list[PluginTool]:
        return []

    error = await boot_fails(tmp_path, caplog, plugin("weather", get_forecasts=get_forecasts))
    assert error.code == "boot.plugin.unknown_hook"
    assert "'weather'" in str(error)
    assert "get_forecasts" in str(error)


@pytest.fixture
def broken_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real installed distribution whose ``oracle.plugins`` entry point fails to import.

    Yields:
        The distribution name.
    """
    site = tmp_path / "site-packages"
    site.mkdir()
    stem = f"oracle_boot_{uuid.uuid4().hex[:10]}"
    dist = stem.replace("_", "-")
    info = site / f"{stem}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[oracle.plugins]\nbroken = {stem}:plugin\n")
    (site / f"{stem}.py").write_text("raise ImportError('missing native library')\n")
    monkeypatch.syspath_prepend(str(site))
    yield dist
    sys.modules.pop(stem, None)


@covers("boot.plugin.load_failed")
async def test_plugin_load_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken_distribution: str
) -> None:
    from importlib.metadata import entry_points

    others = {ep.name: False for ep in entry_points(group="oracle.plugins") if ep.name != "broken"}
    error = await boot_fails(
        tmp_path,
        caplog,
        bundled_plugins=None,
        discover_entry_points=True,
        strict_plugins=True,
        features=others,
    )
    assert error.code == "boot.plugin.load_failed"
    assert "entry point 'broken'" in str(error)
    assert f"distribution '{broken_distribution}'" in str(error)
    assert "missing native library" in str(error)


@covers("boot.plugin.duplicate_name")
async def test_plugin_duplicate_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    error = await boot_fails(tmp_path, caplog, plugin("weather"), plugin("weather"))
    assert error.code == "boot.plugin.duplicate_name"
    assert "'weather'" in str(error)


@covers("boot.plugin.env_missing")
async def test_plugin_env_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def auto_detect(self: OraclePlugin, env: Mapping[str, str]) -> bool:
        return "WEATHER_API_KEY" in env

    weather = plugin("weather", auto_detect=auto_detect, auto_detect_hint="WEATHER_API_KEY set")
    error = await boot_fails(tmp_path, caplog, weather, features={"weather": True})
    assert error.code == "boot.plugin.env_missing"
    assert "'weather'" in str(error)
    assert "WEATHER_API_KEY set" in str(error)
    assert "features['weather'] = False" in str(error)


@covers("boot.plugin.dep_missing")
async def test_plugin_dep_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    error = await boot_fails(tmp_path, caplog, plugin("skills", depends_on=("sandbox",)))
    assert error.code == "boot.plugin.dep_missing"
    assert "'skills'" in str(error)
    assert "'sandbox'" in str(error)
    assert "features={'skills': False}" in str(error)


@covers("boot.plugin.dep_cycle")
async def test_plugin_dep_cycle(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    error = await boot_fails(
        tmp_path,
        caplog,
        plugin("alpha", depends_on=("beta",)),
        plugin("beta", depends_on=("alpha",)),
    )
    assert error.code == "boot.plugin.dep_cycle"
    assert "alpha → beta → alpha" in str(error)


# --- manifest and config errors ------------------------------------------------------------


@covers("boot.manifest.invalid")
async def test_manifest_invalid(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = {**manifest_for("weather"), "tags": ["Rain"]}
    error = await boot_fails(tmp_path, caplog, plugin("weather", manifest=bad))
    assert isinstance(error, ManifestValidationError)
    assert error.code == "boot.manifest.invalid"
    assert "[boot-error] [weather] tags[0]" in str(error)


@covers("boot.config.invalid")
async def test_config_invalid_for_the_oracle_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    error = await boot_fails(tmp_path, caplog, config={"name": ""})
    assert isinstance(error, OracleConfigError)
    assert error.code == "boot.config.invalid"
    assert "name" in str(error)


@covers("boot.config.invalid")
async def test_config_invalid_for_the_environment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class WeatherConfig(BaseModel):
        WEATHER_API_KEY: str

    error = await boot_fails(tmp_path, caplog, plugin("weather", config_schema=WeatherConfig))
    assert isinstance(error, EnvValidationError)
    assert error.code == "boot.config.invalid"
    assert "Plugin 'weather' env validation failed for 'WEATHER_API_KEY'" in str(error)


@covers("boot.config.core_collision")
async def test_config_core_collision(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Shadowing(BaseModel):
        ORACLE_BACKEND: str = "local"

    error = await boot_fails(tmp_path, caplog, plugin("weather", config_schema=Shadowing))
    assert error.code == "boot.config.core_collision"
    assert "'weather'" in str(error)
    assert "'ORACLE_BACKEND'" in str(error)


@covers("boot.llm.key_missing")
async def test_llm_key_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {**local_env(tmp_path), "LLM_PROVIDER": "nebius"}
    error = await boot_fails(tmp_path, caplog, env=env)
    assert error.code == "boot.llm.key_missing"
    assert "NEBIUS_API_KEY" in str(error)


@covers("boot.identity.entity_did_missing")
async def test_identity_entity_did_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from oracle_core._config import IXO_REQUIRED

    env = dict.fromkeys(IXO_REQUIRED, "placeholder")
    env.update(
        {
            "NETWORK": "testnet",
            "ORACLE_ENTITY_DID": " ",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            "LLM_PROVIDER": "openai-compatible",
            "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
            "OPENAI_COMPATIBLE_MODEL": "m",
        }
    )
    error = await boot_fails(tmp_path, caplog, env=env)
    assert error.code == "boot.identity.entity_did_missing"
    assert "ORACLE_ENTITY_DID" in str(error)


# --- registry errors -------------------------------------------------------------------------


@covers("boot.registry.tool_collision")
async def test_registry_tool_collision(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def get_tools(self: OraclePlugin, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [make_tool("lookup")]

    error = await boot_fails(
        tmp_path,
        caplog,
        plugin("weather", get_tools=get_tools),
        plugin("notes", get_tools=get_tools),
    )
    assert error.code == "boot.registry.tool_collision"
    assert "'lookup'" in str(error)
    assert "'notes'" in str(error)
    assert "'weather'" in str(error)


@covers("boot.registry.shared_key_collision")
async def test_registry_shared_key_collision(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def get_shared_state(self: OraclePlugin) -> Mapping[str, Any]:
        return {"region": lambda state, rt_ctx: "eu"}

    error = await boot_fails(
        tmp_path,
        caplog,
        plugin("weather", get_shared_state=get_shared_state),
        plugin("notes", get_shared_state=get_shared_state),
    )
    assert error.code == "boot.registry.shared_key_collision"
    assert "'region'" in str(error)
    assert "'notes'" in str(error)
    assert "'weather'" in str(error)


class Audit(AgentMiddleware[AgentState[Any], Any, Any]):
    """A middleware that does nothing, named after its class."""


@covers("boot.registry.middleware_name_collision")
async def test_registry_middleware_name_collision(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def get_middlewares(self: OraclePlugin, ctx: PluginContext[Any]) -> list[Any]:
        return [Audit()]

    error = await boot_fails(
        tmp_path,
        caplog,
        plugin("weather", get_middlewares=get_middlewares),
        plugin("notes", get_middlewares=get_middlewares),
    )
    assert error.code == "boot.registry.middleware_name_collision"
    assert "'Audit'" in str(error)
    assert "'notes'" in str(error)
    assert "'weather'" in str(error)


# --- lifespans are exited when boot fails (CORE-5, CORE-94) -----------------------------------


def recording_lifespan(log: list[str], label: str) -> Callable[..., Any]:
    """A ``lifespan`` method recording enter and exit into ``log``."""

    @asynccontextmanager
    async def lifespan(self: OraclePlugin, ctx: PluginContext[Any]) -> AsyncIterator[None]:
        log.append(f"enter {label} as {ctx.plugin_name}")
        try:
            yield
        finally:
            log.append(f"exit {label}")

    return lifespan


def failing_stage(stage: str, log: list[str]) -> dict[str, Any]:
    """Members of plugin 'gamma' that make boot fail at ``stage``, after the lifespans."""

    def raising(*args: Any) -> Any:
        raise RuntimeError(f"{stage} broke")

    if stage == "lifespan":

        @asynccontextmanager
        async def lifespan(self: OraclePlugin, ctx: PluginContext[Any]) -> AsyncIterator[None]:
            log.append("enter gamma")
            if stage == "lifespan":  # always; keeps the generator shape visible to mypy
                raise RuntimeError("lifespan broke")
            yield

        return {"lifespan": lifespan}
    if stage == "get_shared_state":
        return {"get_shared_state": lambda self: raising()}
    if stage == "get_routes":
        return {"get_routes": lambda self, ctx: raising()}
    if stage == "get_auth_excluded_routes":
        return {"get_auth_excluded_routes": lambda self: raising()}
    if stage == "tool_collision":
        return {"get_tools": lambda self, ctx: [make_tool("alpha_tool")]}
    assert stage == "example_check"
    manifest = {**manifest_for("gamma"), "examples": [{"user": "hi", "tool": "nope"}]}
    return {"manifest": manifest, "get_tools": lambda self, ctx: [make_tool("gamma_tool")]}


STAGES = [
    "lifespan",
    "get_shared_state",
    "get_routes",
    "get_auth_excluded_routes",
    "tool_collision",
    "example_check",
]


@pytest.mark.parametrize("stage", STAGES)
async def test_lifespans_entered_before_a_boot_failure_are_exited_in_reverse(
    tmp_path: Path, stage: str
) -> None:
    log: list[str] = []
    plugins = [
        plugin(
            "alpha",
            lifespan=recording_lifespan(log, "alpha"),
            get_tools=lambda self, ctx: [make_tool("alpha_tool")],
        ),
        plugin("beta", lifespan=recording_lifespan(log, "beta")),
        plugin("gamma", **failing_stage(stage, log)),
    ]
    with pytest.raises(OracleBootError) as info:
        await create_runtime(
            {"name": "Test Oracle"},
            plugins=plugins,
            bundled_plugins=[],
            discover_entry_points=False,
            env=local_env(tmp_path),
        )
    assert "gamma" in str(info.value)
    entered = ["enter alpha as alpha", "enter beta as beta"]
    if stage == "lifespan":
        entered.append("enter gamma")
    assert log == [*entered, "exit beta", "exit alpha"]


async def test_a_lifespan_that_fails_to_enter_fails_boot_with_a_stable_code(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    with pytest.raises(OracleBootError) as info:
        await create_runtime(
            {"name": "Test Oracle"},
            plugins=[plugin("gamma", **failing_stage("lifespan", log))],
            bundled_plugins=[],
            discover_entry_points=False,
            env=local_env(tmp_path),
        )
    assert "'gamma'" in str(info.value)
    assert "lifespan broke" in str(info.value)
    assert info.value.code in APPENDIX_A_ERRORS


async def test_lifespans_are_entered_in_topological_order_before_boot_hooks(
    tmp_path: Path,
) -> None:
    log: list[str] = []

    def recording_get_tools(label: str) -> Callable[..., list[PluginTool]]:
        def get_tools(self: OraclePlugin, ctx: PluginContext[Any]) -> list[PluginTool]:
            log.append(f"get_tools {label}")
            return []

        return get_tools

    plugins = [
        plugin(
            "alpha",
            depends_on=("zeta",),
            lifespan=recording_lifespan(log, "alpha"),
            get_tools=recording_get_tools("alpha"),
        ),
        plugin(
            "zeta",
            lifespan=recording_lifespan(log, "zeta"),
            get_tools=recording_get_tools("zeta"),
        ),
    ]
    runtime: OracleRuntime = await create_runtime(
        {"name": "Test Oracle"},
        plugins=plugins,
        bundled_plugins=[],
        discover_entry_points=False,
        env=local_env(tmp_path),
    )
    assert log == [
        "enter zeta as zeta",
        "enter alpha as alpha",
        "get_tools zeta",
        "get_tools alpha",
    ]
    await runtime.aclose()
    assert log[-2:] == ["exit alpha", "exit zeta"]
    await runtime.aclose()
    assert log.count("exit zeta") == 1


async def test_a_lifespan_exit_error_is_logged_and_the_others_still_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []

    @asynccontextmanager
    async def failing_exit(self: OraclePlugin, ctx: PluginContext[Any]) -> AsyncIterator[None]:
        log.append("enter beta")
        yield
        log.append("exit beta")
        raise RuntimeError("flush failed")

    plugins = [
        plugin("alpha", lifespan=recording_lifespan(log, "alpha")),
        plugin("beta", lifespan=failing_exit),
    ]
    runtime = await create_runtime(
        {"name": "Test Oracle"},
        plugins=plugins,
        bundled_plugins=[],
        discover_entry_points=False,
        env=local_env(tmp_path),
    )
    with caplog.at_level(logging.ERROR):
        await runtime.aclose()
    assert log == ["enter alpha as alpha", "enter beta", "exit beta", "exit alpha"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert "flush failed" in str(errors[0].exc_info[1])


async def test_no_lifespan_is_entered_when_boot_fails_earlier(tmp_path: Path) -> None:
    log: list[str] = []

    class WeatherConfig(BaseModel):
        WEATHER_API_KEY: str

    plugins = [
        plugin("alpha", lifespan=recording_lifespan(log, "alpha")),
        plugin("weather", config_schema=WeatherConfig),
    ]
    with pytest.raises(EnvValidationError):
        await create_runtime(
            {"name": "Test Oracle"},
            plugins=plugins,
            bundled_plugins=[],
            discover_entry_points=False,
            env=local_env(tmp_path),
        )
    assert log == []


async def test_a_shared_state_accessor_can_read_state_after_a_clean_boot(tmp_path: Path) -> None:
    # The happy path of the hooks above, so their failures above are the only difference.
    def get_shared_state(self: OraclePlugin) -> Mapping[str, Any]:
        def loaded(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> frozenset[str]:
            return state.loaded_plugins

        return {"loaded": loaded}

    runtime = await create_runtime(
        {"name": "Test Oracle"},
        plugins=[plugin("weather", get_shared_state=get_shared_state)],
        bundled_plugins=[],
        discover_entry_points=False,
        env=local_env(tmp_path),
    )
    try:
        assert list(runtime.registries.shared_state) == ["loaded"]
        assert runtime.registries.shared_state["loaded"][0] == "weather"
    finally:
        await runtime.aclose()
