"""Tests of the oracle config, Tier-0 env and plugin config composition (§5, CORE-66)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from oracle_core import (
    CoreEnv,
    EnvValidationError,
    OracleBootError,
    OracleConfig,
    OracleConfigError,
    OraclePlugin,
    OracleRuntime,
    PluginContext,
    PluginTool,
    RuntimeContext,
    create_runtime,
)
from oracle_core._config import IXO_REQUIRED, compose_config, env_var_names
from oracle_core.testing import create_test_runtime

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


def ixo_env(tmp_path: Path) -> dict[str, str]:
    """A complete ``ixo`` environment (values are placeholders; boot makes no call)."""
    env = {var: f"value-of-{var.lower()}" for var in IXO_REQUIRED}
    env.update(
        {
            "NETWORK": "devnet",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            "ORACLE_ENTITY_DID": "did:ixo:entity:oracle",
            "LLM_PROVIDER": "openai-compatible",
            "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
            "OPENAI_COMPATIBLE_MODEL": "m",
        }
    )
    return env


async def boot(
    env: Mapping[str, str], *plugins: OraclePlugin, config: Any = None, **kwargs: Any
) -> OracleRuntime:
    return await create_runtime(
        {"name": "Test Oracle"} if config is None else config,
        plugins=plugins,
        bundled_plugins=[],
        discover_entry_points=False,
        env=env,
        **kwargs,
    )


def manifest_for(plugin_name: str) -> dict[str, Any]:
    return {
        "title": plugin_name.title(),
        "summary": f"{plugin_name} things.",
        "when_to_use": [f"{plugin_name} questions"],
    }


class Captured:
    """Contexts a plugin received."""

    def __init__(self) -> None:
        self.ctx: dict[str, PluginContext[Any]] = {}
        self.rt_ctx: dict[str, RuntimeContext[Any]] = {}


def make(
    plugin_name: str,
    schema: type[BaseModel] | None = None,
    *,
    depends: tuple[str, ...] = (),
    captured: Captured | None = None,
) -> OraclePlugin:
    """A plugin declaring ``schema`` that records the contexts it receives."""
    seen = captured or Captured()

    class Plugin(OraclePlugin):
        name = plugin_name
        version = "1.0.0"
        manifest = manifest_for(plugin_name)
        config_schema = schema
        depends_on = depends

        def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
            seen.ctx[plugin_name] = ctx
            return []

        def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
            seen.rt_ctx[plugin_name] = rt_ctx
            return []

    return Plugin()


class WeatherConfig(BaseModel):
    WEATHER_API_KEY: str
    WEATHER_UNITS: str = "metric"
    WEATHER_DAYS: int = 3


class AliasedConfig(BaseModel):
    api_key: str = Field(alias="NOTES_API_KEY")
    limit: int = Field(10, alias="NOTES_LIMIT")


LOGGER = logging.getLogger("oracle.test.config")


# --- OracleConfig (CORE-66) ---------------------------------------------------------------


@pytest.mark.parametrize("config", [{}, {"name": ""}, {"name": "   "}, {"org": "Acme"}])
def test_oracle_config_requires_a_non_empty_name(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        OracleConfig.model_validate(config)


@pytest.mark.parametrize("config", [None, {}, {"name": ""}, {"name": "  "}])
async def test_create_runtime_rejects_a_missing_or_nameless_config(
    tmp_path: Path, config: Any
) -> None:
    with pytest.raises(OracleConfigError) as info:
        await create_runtime(
            config, bundled_plugins=[], discover_entry_points=False, env=local_env(tmp_path)
        )
    assert info.value.code == "boot.config.invalid"
    assert isinstance(info.value, OracleBootError)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"name": "Oracle", "colour": "blue"}, "colour"),
        ({"name": "Oracle", "prompt": {"tone": "dry"}}, "tone"),
    ],
)
async def test_unknown_config_keys_are_rejected(
    tmp_path: Path, config: dict[str, Any], field: str
) -> None:
    with pytest.raises(OracleConfigError) as info:
        await boot(local_env(tmp_path), config=config)
    assert info.value.code == "boot.config.invalid"
    assert field in str(info.value)


def test_prompt_keys_accept_camel_case_and_snake_case() -> None:
    camel = OracleConfig.model_validate(
        {
            "name": "Oracle",
            "prompt": {"communicationStyle": "Brief.", "customInstructions": "Cite sources."},
        }
    )
    snake = OracleConfig.model_validate(
        {
            "name": "Oracle",
            "prompt": {"communication_style": "Brief.", "custom_instructions": "Cite sources."},
        }
    )
    assert camel == snake
    assert camel.prompt.communication_style == "Brief."
    assert camel.prompt.custom_instructions == "Cite sources."


async def test_blank_prompt_values_are_absent(tmp_path: Path) -> None:
    config = {
        "name": "Oracle",
        "org": "Acme",
        "prompt": {"opening": "   ", "capabilities": "", "communicationStyle": "Brief."},
    }
    parsed = OracleConfig.model_validate(config)
    assert parsed.prompt.opening is None
    assert parsed.prompt.capabilities is None
    runtime = await boot(local_env(tmp_path), config=config)
    try:
        assert dict(runtime.identity.prompt) == {"communication_style": "Brief."}
        assert runtime.identity.name == "Oracle"
        assert runtime.identity.org == "Acme"
    finally:
        await runtime.aclose()


@pytest.mark.parametrize("key", ["entity_did", "entityDid"])
async def test_entity_did_in_the_config_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str
) -> None:
    config = {"name": "Oracle", key: "did:ixo:entity:from-config"}
    env = {**local_env(tmp_path), "ORACLE_ENTITY_DID": "did:ixo:entity:from-env"}
    with caplog.at_level(logging.WARNING):
        runtime = await boot(env, config=config)
    try:
        assert runtime.identity.entity_did == "did:ixo:entity:from-env"
    finally:
        await runtime.aclose()
    warnings = [r.getMessage() for r in caplog.records if "entity_did" in r.getMessage()]
    assert len(warnings) == 1
    assert "ORACLE_ENTITY_DID" in warnings[0]


# --- Tier-0 (CORE-36, CORE-37) ------------------------------------------------------------


def test_tier0_defaults() -> None:
    env = CoreEnv.model_validate({})
    assert env.node_env == "development"
    assert env.port == 3000
    assert env.cors_origin == "*"
    assert env.oracle_backend == "ixo"
    assert env.matrix_store_path == "./matrix-storage"
    assert env.ucan_auth_max_ttl_seconds == 900
    assert env.ucan_reauth_prompt_throttle_seconds == 21600
    assert env.llm_provider == "openrouter"
    assert env.openai_compatible_role_models == ""
    assert env.oracle_secrets == ""
    assert env.live_agent_auth_api_key == ""
    assert env.sqlite_database_path is None
    assert env.oracle_entity_did is None


def test_tier0_variable_names_are_the_stable_names() -> None:
    names = set(env_var_names(CoreEnv))
    expected = {
        "NODE_ENV", "PORT", "CORS_ORIGIN", "ORACLE_NAME", "NETWORK", "ORACLE_BACKEND",
        "MATRIX_BASE_URL", "MATRIX_RECOVERY_PHRASE", "MATRIX_ORACLE_ADMIN_USER_ID",
        "MATRIX_ORACLE_ADMIN_PASSWORD", "MATRIX_ORACLE_ADMIN_ACCESS_TOKEN",
        "MATRIX_ACCOUNT_ROOM_ID", "MATRIX_VALUE_PIN", "MATRIX_STORE_PATH",
        "SQLITE_DATABASE_PATH", "BLOCKSYNC_GRAPHQL_URL", "ORACLE_DID", "ORACLE_ENTITY_DID",
        "SECP_MNEMONIC", "RPC_URL", "UCAN_AUTH_MAX_TTL_SECONDS",
        "UCAN_REAUTH_PROMPT_THROTTLE_SECONDS", "LLM_PROVIDER", "OPEN_ROUTER_API_KEY",
        "NEBIUS_API_KEY", "OPENAI_COMPATIBLE_BASE_URL", "OPENAI_COMPATIBLE_MODEL",
        "OPENAI_COMPATIBLE_API_KEY", "OPENAI_COMPATIBLE_ROLE_MODELS", "LLM_CONTEXT_WINDOWS",
        "OPENAI_API_KEY", "ORACLE_SECRETS", "LIVE_AGENT_AUTH_API_KEY", "LANGSMITH_TRACING",
        "LANGSMITH_API_KEY", "LANGSMITH_PROJECT", "LANGSMITH_ENDPOINT", "ORACLE_TOOL_POLICY",
    }  # fmt: skip
    assert names == expected


def test_tier0_values_are_coerced_from_strings() -> None:
    composed = compose_config(
        {"ORACLE_BACKEND": "local", "PORT": "8080", "UCAN_AUTH_MAX_TTL_SECONDS": "60"},
        [],
        LOGGER,
    )
    assert composed.values["PORT"] == 8080
    assert composed.values["UCAN_AUTH_MAX_TTL_SECONDS"] == 60
    assert composed.core.port == 8080


def test_the_ixo_backend_requires_every_ixo_variable() -> None:
    with pytest.raises(EnvValidationError) as info:
        compose_config({}, [], LOGGER)
    assert info.value.code == "boot.config.invalid"
    assert len(info.value.errors) == len(IXO_REQUIRED)
    for var, line in zip(IXO_REQUIRED, info.value.errors, strict=True):
        assert line.startswith(f"[boot-error] Plugin 'core' env validation failed for '{var}': ")


@pytest.mark.parametrize("missing", IXO_REQUIRED)
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_each_missing_ixo_variable_is_named(tmp_path: Path, missing: str, how: str) -> None:
    env = ixo_env(tmp_path)
    if how == "unset":
        del env[missing]
    else:
        env[missing] = ""
    with pytest.raises(EnvValidationError) as info:
        compose_config(env, [], LOGGER)
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith(
        f"[boot-error] Plugin 'core' env validation failed for '{missing}': "
    )
    assert info.value.errors[0] in str(info.value)


def test_the_local_backend_makes_ixo_variables_optional_and_defaults_the_sqlite_path() -> None:
    composed = compose_config({"ORACLE_BACKEND": "local"}, [], LOGGER)
    assert composed.core.is_local
    assert composed.values["SQLITE_DATABASE_PATH"] == "./data/sqlite"
    assert composed.core.sqlite_database_path == "./data/sqlite"
    assert composed.values["ORACLE_DID"] is None
    assert composed.values["NODE_ENV"] == "development"


def test_the_local_backend_keeps_an_explicit_sqlite_path(tmp_path: Path) -> None:
    composed = compose_config(
        {"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path)}, [], LOGGER
    )
    assert composed.values["SQLITE_DATABASE_PATH"] == str(tmp_path)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("PORT", "eighty"),
        ("NODE_ENV", "staging"),
        ("ORACLE_BACKEND", "cloud"),
        ("LLM_PROVIDER", "acme"),
        ("OPENAI_COMPATIBLE_BASE_URL", "127.0.0.1:9"),
        ("OPENAI_COMPATIBLE_ROLE_MODELS", "subagent"),
        ("UCAN_AUTH_MAX_TTL_SECONDS", "0"),
    ],
)
def test_an_invalid_tier0_value_is_reported_with_owner_core(
    tmp_path: Path, var: str, value: str
) -> None:
    env = {**local_env(tmp_path), var: value}
    with pytest.raises(EnvValidationError) as info:
        compose_config(env, [], LOGGER)
    assert any(
        line.startswith(f"[boot-error] Plugin 'core' env validation failed for '{var}': ")
        for line in info.value.errors
    ), info.value.errors


# --- plugin config schemas (CORE-33 … CORE-35, CORE-39) ---------------------------------------


async def test_plugin_schemas_are_validated_and_merged_into_the_config(tmp_path: Path) -> None:
    captured = Captured()
    env = {
        **local_env(tmp_path),
        "WEATHER_API_KEY": "w-key",
        "WEATHER_DAYS": "5",
        "NOTES_API_KEY": "n-key",
        "UNRELATED_VARIABLE": "not declared",
    }
    plugins = [
        make("weather", WeatherConfig, captured=captured),
        make("notes", AliasedConfig, captured=captured),
        make("plain", captured=captured),
    ]
    runtime = await boot(env, *plugins)
    await runtime.aclose()
    ctx = captured.ctx["weather"]
    assert ctx.config["WEATHER_API_KEY"] == "w-key"
    assert ctx.config["WEATHER_UNITS"] == "metric"
    assert ctx.config["WEATHER_DAYS"] == 5
    assert ctx.config["NOTES_API_KEY"] == "n-key"
    assert ctx.config["NOTES_LIMIT"] == 10
    assert ctx.config["ORACLE_BACKEND"] == "local"
    assert "UNRELATED_VARIABLE" not in ctx.config
    assert set(ctx.config) == set(env_var_names(CoreEnv)) | {
        "WEATHER_API_KEY", "WEATHER_UNITS", "WEATHER_DAYS", "NOTES_API_KEY", "NOTES_LIMIT",
    }  # fmt: skip
    assert ctx.plugin_config == WeatherConfig(WEATHER_API_KEY="w-key", WEATHER_DAYS=5)
    notes = captured.ctx["notes"].plugin_config
    assert isinstance(notes, AliasedConfig)
    assert (notes.api_key, notes.limit) == ("n-key", 10)
    assert captured.ctx["plain"].plugin_config is None
    assert captured.ctx["plain"].config == ctx.config


async def test_ctx_config_is_read_only(tmp_path: Path) -> None:
    captured = Captured()
    env = {**local_env(tmp_path), "WEATHER_API_KEY": "w-key"}
    runtime = await boot(env, make("weather", WeatherConfig, captured=captured))
    try:
        config = captured.ctx["weather"].config
        with pytest.raises(TypeError):
            config["WEATHER_API_KEY"] = "changed"  # type: ignore[index]
        with pytest.raises(TypeError):
            del config["PORT"]  # type: ignore[attr-defined]
        assert runtime.config["WEATHER_API_KEY"] == "w-key"
    finally:
        await runtime.aclose()


async def test_rt_ctx_config_is_the_merged_config_and_plugin_config_is_scoped() -> None:
    captured = Captured()
    plugins = [
        make("weather", WeatherConfig, captured=captured),
        make("notes", AliasedConfig, captured=captured),
    ]
    config = {"WEATHER_API_KEY": "w-key", "NOTES_API_KEY": "n-key", "NOTES_LIMIT": "2"}
    async with await create_test_runtime(plugins=plugins, config=config) as rt:
        await rt.build("hi")
    weather, notes = captured.rt_ctx["weather"], captured.rt_ctx["notes"]
    assert weather.config == notes.config
    assert weather.config["NOTES_LIMIT"] == 2
    assert isinstance(weather.plugin_config, WeatherConfig)
    assert isinstance(notes.plugin_config, AliasedConfig)
    assert notes.plugin_config.limit == 2


async def test_a_plugin_env_failure_reads_owner_variable_and_reason(tmp_path: Path) -> None:
    env = {**local_env(tmp_path), "WEATHER_DAYS": "many"}
    with pytest.raises(EnvValidationError) as info:
        await boot(env, make("weather", WeatherConfig))
    assert info.value.code == "boot.config.invalid"
    assert info.value.errors[0] == (
        "[boot-error] Plugin 'weather' env validation failed for 'WEATHER_API_KEY': "
        "required but not set"
    )
    assert info.value.errors[1].startswith(
        "[boot-error] Plugin 'weather' env validation failed for 'WEATHER_DAYS': "
    )
    assert len(info.value.errors) == 2


async def test_an_aliased_field_is_reported_under_its_variable_name(tmp_path: Path) -> None:
    with pytest.raises(EnvValidationError) as info:
        await boot(local_env(tmp_path), make("notes", AliasedConfig))
    assert info.value.errors == (
        "[boot-error] Plugin 'notes' env validation failed for 'NOTES_API_KEY': "
        "required but not set",
    )


async def test_every_env_failure_is_raised_together(tmp_path: Path) -> None:
    env = {**local_env(tmp_path), "PORT": "eighty"}
    with pytest.raises(EnvValidationError) as info:
        await boot(env, make("weather", WeatherConfig), make("notes", AliasedConfig))
    line = re.compile(r"^\[boot-error\] Plugin '([^']+)' env validation failed for '([^']+)': ")
    matches = [line.match(error) for error in info.value.errors]
    assert sorted(m.groups() for m in matches if m is not None) == [
        ("core", "PORT"),
        ("notes", "NOTES_API_KEY"),
        ("weather", "WEATHER_API_KEY"),
    ]
    assert len(matches) == 3
    assert str(info.value).startswith("Environment validation failed:")


async def test_an_excluded_plugin_drops_its_requirements(tmp_path: Path) -> None:
    runtime = await boot(
        local_env(tmp_path), make("weather", WeatherConfig), features={"weather": False}
    )
    try:
        assert "WEATHER_API_KEY" not in runtime.config
        assert runtime.plugins.status().loaded == []
    finally:
        await runtime.aclose()


class RegionAsText(BaseModel):
    SHARED_REGION: str


class RegionAsNumber(BaseModel):
    SHARED_REGION: int


async def test_a_variable_declared_twice_goes_to_the_later_plugin_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    captured = Captured()
    # 'alpha' depends on 'zeta', so 'alpha' is later in topological order.
    plugins = [
        make("alpha", RegionAsNumber, depends=("zeta",), captured=captured),
        make("zeta", RegionAsText, captured=captured),
    ]
    env = {**local_env(tmp_path), "SHARED_REGION": "7"}
    with caplog.at_level(logging.WARNING):
        runtime = await boot(env, *plugins)
    try:
        assert runtime.plugins.status().loaded == ["zeta", "alpha"]
        assert runtime.config["SHARED_REGION"] == 7
        assert captured.ctx["zeta"].plugin_config == RegionAsText(SHARED_REGION="7")
        assert captured.ctx["alpha"].plugin_config == RegionAsNumber(SHARED_REGION=7)
    finally:
        await runtime.aclose()
    warnings = [r.getMessage() for r in caplog.records if "boot.config.collision" in r.message]
    assert len(warnings) == 1
    assert "'SHARED_REGION'" in warnings[0]
    assert "'zeta'" in warnings[0]
    assert "'alpha' wins" in warnings[0]


class PortConfig(BaseModel):
    PORT: int = 8000


async def test_a_plugin_redeclaring_a_tier0_variable_fails_boot(tmp_path: Path) -> None:
    with pytest.raises(OracleBootError) as info:
        await boot(local_env(tmp_path), make("web", PortConfig))
    assert info.value.code == "boot.config.core_collision"
    assert "'web'" in str(info.value)
    assert "'PORT'" in str(info.value)


# --- provider and identity checks (CORE-38, CORE-87) ------------------------------------------


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"LLM_PROVIDER": ""}, ["OPEN_ROUTER_API_KEY"]),
        ({"LLM_PROVIDER": "openrouter"}, ["OPEN_ROUTER_API_KEY"]),
        ({"LLM_PROVIDER": "nebius"}, ["NEBIUS_API_KEY"]),
        ({"OPENAI_COMPATIBLE_MODEL": ""}, ["OPENAI_COMPATIBLE_MODEL"]),
        (
            {"OPENAI_COMPATIBLE_MODEL": "", "OPENAI_COMPATIBLE_BASE_URL": ""},
            ["OPENAI_COMPATIBLE_BASE_URL", "OPENAI_COMPATIBLE_MODEL"],
        ),
    ],
)
async def test_a_missing_provider_variable_fails_boot_with_key_missing(
    tmp_path: Path, changes: dict[str, str], named: list[str]
) -> None:
    env = {**local_env(tmp_path), **changes}
    with pytest.raises(OracleBootError) as info:
        await boot(env)
    assert info.value.code == "boot.llm.key_missing"
    for var in named:
        assert var in str(info.value)


@pytest.mark.parametrize(
    ("provider", "key"), [("openrouter", "OPEN_ROUTER_API_KEY"), ("nebius", "NEBIUS_API_KEY")]
)
async def test_a_provider_with_its_key_boots(tmp_path: Path, provider: str, key: str) -> None:
    env = {**local_env(tmp_path), "LLM_PROVIDER": provider, key: "sk-test"}
    runtime = await boot(env)
    await runtime.aclose()
    assert runtime.composed.core.llm_provider == provider


async def test_a_complete_ixo_environment_boots_with_the_entity_did(tmp_path: Path) -> None:
    runtime = await boot(ixo_env(tmp_path))
    try:
        assert not runtime.composed.core.is_local
        assert runtime.identity.entity_did == "did:ixo:entity:oracle"
    finally:
        await runtime.aclose()


async def test_a_blank_entity_did_in_ixo_fails_boot_with_entity_did_missing(
    tmp_path: Path,
) -> None:
    env = {**ixo_env(tmp_path), "ORACLE_ENTITY_DID": "   "}
    with pytest.raises(OracleBootError) as info:
        await boot(env)
    assert info.value.code == "boot.identity.entity_did_missing"
    assert "ORACLE_ENTITY_DID" in str(info.value)


async def test_the_local_backend_needs_no_entity_did(tmp_path: Path) -> None:
    runtime = await boot(local_env(tmp_path))
    await runtime.aclose()
    assert runtime.identity.entity_did is None


async def test_the_provider_check_runs_after_env_validation(tmp_path: Path) -> None:
    env = {**local_env(tmp_path), "LLM_PROVIDER": "nebius", "PORT": "eighty"}
    with pytest.raises(EnvValidationError):
        await boot(env)
