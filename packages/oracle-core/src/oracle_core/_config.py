"""Oracle identity config, the Tier-0 environment schema, and env composition (§5)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from oracle_core._errors import EnvValidationError, OracleBootError, OracleConfigError
from oracle_core._policy import ToolPolicy, parse_tool_policy
from oracle_core._tools import MODEL_ROLES

__all__ = [
    "CoreEnv",
    "OracleConfig",
    "OraclePromptConfig",
    "env_var_names",
]

IXO_REQUIRED: tuple[str, ...] = (
    "ORACLE_NAME",
    "NETWORK",
    "MATRIX_BASE_URL",
    "MATRIX_RECOVERY_PHRASE",
    "MATRIX_ORACLE_ADMIN_USER_ID",
    "MATRIX_ORACLE_ADMIN_PASSWORD",
    "MATRIX_ORACLE_ADMIN_ACCESS_TOKEN",
    "MATRIX_ACCOUNT_ROOM_ID",
    "MATRIX_VALUE_PIN",
    "SQLITE_DATABASE_PATH",
    "BLOCKSYNC_GRAPHQL_URL",
    "ORACLE_DID",
    "SECP_MNEMONIC",
    "RPC_URL",
)
# ORACLE_ENTITY_DID is also required with ORACLE_BACKEND=ixo, but is checked after
# validation so that its absence gets its own code, boot.identity.entity_did_missing.
LOCAL_SQLITE_PATH = "./data/sqlite"


class OraclePromptConfig(BaseModel):
    """Prompt text an operator sets; blank values count as absent."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    opening: str | None = None
    communication_style: str | None = None
    capabilities: str | None = None
    custom_instructions: str | None = None

    @field_validator("*", mode="after")
    @classmethod
    def _blank_is_absent(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None


class OracleConfig(BaseModel):
    """Who the oracle is (CORE-66). ``entity_did`` comes from ``ORACLE_ENTITY_DID``."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    name: str = Field(min_length=1)
    org: str | None = None
    description: str | None = None
    prompt: OraclePromptConfig = OraclePromptConfig()
    tool_policy: ToolPolicy = ToolPolicy()
    """Which tools may run, and which only with approval (``ORACLE_TOOL_POLICY`` replaces it)."""

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name must not be empty")
        return value

    @model_validator(mode="before")
    @classmethod
    def _drop_entity_did(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and ("entity_did" in data or "entityDid" in data):
            logging.getLogger("oracle").warning(
                "OracleConfig.entity_did is ignored; set ORACLE_ENTITY_DID instead"
            )
            return {k: v for k, v in data.items() if k not in ("entity_did", "entityDid")}
        return data


def load_oracle_config(config: OracleConfig | Mapping[str, Any] | None) -> OracleConfig:
    """Validate the ``config`` argument of ``create_runtime``."""
    if config is None:
        raise OracleConfigError(
            "create_runtime() needs a config", hint="pass OracleConfig(name='My Oracle')"
        )
    if isinstance(config, OracleConfig):
        return config
    try:
        return OracleConfig.model_validate(config)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "config" for e in exc.errors())
        raise OracleConfigError(
            f"invalid oracle config ({fields}): {exc.errors()[0]['msg']}",
            hint="config needs at least a non-empty 'name'",
        ) from exc


class CoreEnv(BaseModel):
    """Tier-0 environment variables (CORE-37); field aliases are the variable names.

    The server's settings extend this model rather than declaring these variables again,
    so each has one default and one rule. ``from_env`` is the way to read an environment.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    ENV_OWNER: ClassVar[str] = "core"
    """Who error lines name for the variables a subclass adds (core's own say ``core``)."""

    node_env: Literal["development", "production", "test"] = Field("development", alias="NODE_ENV")
    port: int = Field(3000, alias="PORT", ge=0, le=65535)
    cors_origin: str = Field("*", alias="CORS_ORIGIN")
    oracle_name: str | None = Field(None, alias="ORACLE_NAME")
    network: Literal["mainnet", "testnet", "devnet"] | None = Field(None, alias="NETWORK")
    oracle_backend: Literal["ixo", "local"] = Field("ixo", alias="ORACLE_BACKEND")
    matrix_base_url: str | None = Field(None, alias="MATRIX_BASE_URL")
    matrix_recovery_phrase: str | None = Field(None, alias="MATRIX_RECOVERY_PHRASE")
    matrix_oracle_admin_user_id: str | None = Field(None, alias="MATRIX_ORACLE_ADMIN_USER_ID")
    matrix_oracle_admin_password: str | None = Field(None, alias="MATRIX_ORACLE_ADMIN_PASSWORD")
    matrix_oracle_admin_access_token: str | None = Field(
        None, alias="MATRIX_ORACLE_ADMIN_ACCESS_TOKEN"
    )
    matrix_account_room_id: str | None = Field(None, alias="MATRIX_ACCOUNT_ROOM_ID")
    matrix_value_pin: str | None = Field(None, alias="MATRIX_VALUE_PIN")
    matrix_store_path: str = Field("./matrix-storage", alias="MATRIX_STORE_PATH")
    sqlite_database_path: str | None = Field(None, alias="SQLITE_DATABASE_PATH")
    blocksync_graphql_url: str | None = Field(None, alias="BLOCKSYNC_GRAPHQL_URL")
    oracle_did: str | None = Field(None, alias="ORACLE_DID")
    oracle_entity_did: str | None = Field(None, alias="ORACLE_ENTITY_DID")
    secp_mnemonic: str | None = Field(None, alias="SECP_MNEMONIC")
    rpc_url: str | None = Field(None, alias="RPC_URL")
    ucan_auth_max_ttl_seconds: int = Field(900, alias="UCAN_AUTH_MAX_TTL_SECONDS", gt=0)
    ucan_reauth_prompt_throttle_seconds: int = Field(
        21600, alias="UCAN_REAUTH_PROMPT_THROTTLE_SECONDS", ge=0
    )
    llm_provider: Literal["openrouter", "nebius", "openai-compatible"] = Field(
        "openrouter", alias="LLM_PROVIDER"
    )
    open_router_api_key: str | None = Field(None, alias="OPEN_ROUTER_API_KEY")
    nebius_api_key: str | None = Field(None, alias="NEBIUS_API_KEY")
    openai_compatible_base_url: str | None = Field(None, alias="OPENAI_COMPATIBLE_BASE_URL")
    openai_compatible_model: str | None = Field(None, alias="OPENAI_COMPATIBLE_MODEL")
    openai_compatible_api_key: str | None = Field(None, alias="OPENAI_COMPATIBLE_API_KEY")
    openai_compatible_role_models: str = Field("", alias="OPENAI_COMPATIBLE_ROLE_MODELS")
    llm_context_windows: str = Field("", alias="LLM_CONTEXT_WINDOWS")
    openai_api_key: str | None = Field(None, alias="OPENAI_API_KEY")
    oracle_secrets: str = Field("", alias="ORACLE_SECRETS")
    live_agent_auth_api_key: str = Field("", alias="LIVE_AGENT_AUTH_API_KEY")
    langsmith_tracing: str | None = Field(None, alias="LANGSMITH_TRACING")
    langsmith_api_key: str | None = Field(None, alias="LANGSMITH_API_KEY")
    langsmith_project: str | None = Field(None, alias="LANGSMITH_PROJECT")
    langsmith_endpoint: str | None = Field(None, alias="LANGSMITH_ENDPOINT")
    oracle_tool_policy: str = Field("", alias="ORACLE_TOOL_POLICY")

    @field_validator("openai_compatible_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("oracle_tool_policy")
    @classmethod
    def _tool_policy(cls, value: str) -> str:
        if value.strip():
            parse_tool_policy(value)
        return value

    def tool_policy(self, configured: ToolPolicy) -> ToolPolicy:
        """``ORACLE_TOOL_POLICY`` when set (it replaces the host's), else ``configured``."""
        return (
            parse_tool_policy(self.oracle_tool_policy)
            if self.oracle_tool_policy.strip()
            else configured
        )

    @field_validator("openai_compatible_role_models")
    @classmethod
    def _role_pairs(cls, value: str) -> str:
        for pair in filter(None, (p.strip() for p in value.split(","))):
            role, sep, model = pair.partition("=")
            if not sep or not role.strip() or not model.strip():
                raise ValueError(f"'{pair}' is not role=model")
        return value

    @field_validator("llm_context_windows")
    @classmethod
    def _role_windows(cls, value: str) -> str:
        for pair in filter(None, (p.strip() for p in value.split(","))):
            role, sep, tokens = pair.partition("=")
            tokens = tokens.strip()
            # ASCII digits only: int() would also take "²", "1_000" or "٣".
            if not sep or not role.strip() or not (tokens.isascii() and tokens.isdigit()):
                raise ValueError(f"'{pair}' is not role=tokens")
            if role.strip() not in MODEL_ROLES:
                raise ValueError(f"'{role.strip()}' is not a role; use {', '.join(MODEL_ROLES)}")
            if not 1024 <= int(tokens) <= 100_000_000:
                raise ValueError(f"'{pair}': a window is 1024 to 100000000 tokens")
        return value

    @model_validator(mode="before")
    @classmethod
    def _local_sqlite_path(cls, data: Any) -> Any:
        # Local mode needs no variable at all; with ixo the path is required instead.
        if not isinstance(data, Mapping):
            return data
        backend = data.get("ORACLE_BACKEND", data.get("oracle_backend"))
        path = data.get("SQLITE_DATABASE_PATH", data.get("sqlite_database_path"))
        if backend == "local" and path is None:
            return {**data, "SQLITE_DATABASE_PATH": LOCAL_SQLITE_PATH}
        return data

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Validate the variables of ``env`` that this model declares (CORE-33 … 37).

        Empty values count as unset, as ``.env`` files often carry ``VAR=`` placeholders.
        With ``ORACLE_BACKEND=ixo`` every variable the IXO backend needs is required (the
        Matrix ones not when ``MATRIX_ENABLED=false`` drops the server's Matrix layer).

        Args:
            env: The environment, e.g. ``os.environ``.

        Returns:
            The validated model.

        Raises:
            EnvValidationError: one line per failing variable, each naming its owner
                (``core`` for Tier-0 variables, ``ENV_OWNER`` for a subclass's own).
        """
        present = {k: v for k, v in env.items() if v != ""}
        names = env_var_names(cls)
        try:
            value = cls.model_validate({k: present[k] for k in names if k in present})
        except ValidationError as exc:
            raise EnvValidationError(_env_errors(cls._owner_of, exc)) from exc
        if not value.is_local:
            # The server's MATRIX_ENABLED=false drops the Matrix layer and its variables.
            matrix_off = present.get("MATRIX_ENABLED") == "false"
            missing = [
                var
                for var in IXO_REQUIRED
                if var not in present and not (matrix_off and var.startswith("MATRIX_"))
            ]
            if missing:
                raise EnvValidationError([_required_line(var) for var in missing])
        return value

    @classmethod
    def _owner_of(cls, variable: str) -> str:
        return "core" if variable in _CORE_VARIABLES else cls.ENV_OWNER

    @property
    def is_local(self) -> bool:
        """Whether ``ORACLE_BACKEND=local``."""
        return self.oracle_backend == "local"

    @property
    def sqlite_path(self) -> str:
        """``SQLITE_DATABASE_PATH``, or its local-mode default ``./data/sqlite``."""
        return self.sqlite_database_path or LOCAL_SQLITE_PATH

    def role_models(self) -> dict[str, str]:
        """``OPENAI_COMPATIBLE_ROLE_MODELS`` parsed into role → model."""
        pairs = (p.partition("=") for p in self.openai_compatible_role_models.split(","))
        return {r.strip(): m.strip() for r, _, m in pairs if r.strip()}

    def context_windows(self) -> dict[str, int]:
        """``LLM_CONTEXT_WINDOWS`` parsed into role → tokens."""
        pairs = (p.partition("=") for p in self.llm_context_windows.split(","))
        return {r.strip(): int(t) for r, _, t in pairs if r.strip()}

    def oracle_secrets_map(self) -> dict[str, str]:
        """``ORACLE_SECRETS`` parsed into name → value."""
        pairs = (p.partition("=") for p in self.oracle_secrets.split(","))
        return {k.strip(): v.strip() for k, _, v in pairs if k.strip()}


def env_var_names(schema: type[BaseModel]) -> dict[str, str]:
    """Env var name → field name for a config schema (alias when set, else the field)."""
    names: dict[str, str] = {}
    for field_name, info in schema.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        names[alias or field_name] = field_name
    return names


_CORE_VARIABLES = frozenset(env_var_names(CoreEnv))


def _required_line(variable: str) -> str:
    fix = (
        "with the Matrix layer on (set MATRIX_ENABLED=false to run without it, or "
        "ORACLE_BACKEND=local to run without Matrix and the chain)"
        if variable.startswith("MATRIX_")
        else "(set ORACLE_BACKEND=local to run without Matrix and the chain)"
    )
    return (
        f"[boot-error] Plugin 'core' env validation failed for '{variable}': "
        f"required when ORACLE_BACKEND=ixo {fix}"
    )


@dataclass(frozen=True)
class ComposedConfig:
    """The validated environment: core values, per-plugin instances and the merged map."""

    core: CoreEnv
    values: Mapping[str, Any]
    plugin_configs: Mapping[str, BaseModel | None]


def _env_errors(owner: str | Callable[[str], str], exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        var = str(err["loc"][0]) if err["loc"] else "?"
        who = owner(var) if callable(owner) else owner
        reason = "required but not set" if err["type"] == "missing" else err["msg"]
        lines.append(f"[boot-error] Plugin '{who}' env validation failed for '{var}': {reason}")
    return lines


def compose_config(
    env: Mapping[str, str],
    plugin_schemas: Sequence[tuple[str, type[BaseModel] | None]],
    logger: logging.Logger,
) -> ComposedConfig:
    """Validate Tier-0 and each included plugin's schema against ``env`` (CORE-33 … 36).

    ``plugin_schemas`` is in topological order, so a later plugin wins a shared variable.
    Empty values count as unset, as ``.env`` files often carry ``VAR=`` placeholders.

    Raises:
        EnvValidationError: every failing variable, one line each.
        OracleBootError: ``boot.config.core_collision``.
    """
    present = {k: v for k, v in env.items() if v != ""}
    core_names = env_var_names(CoreEnv)
    errors: list[str] = []
    core: CoreEnv | None = None
    try:
        core = CoreEnv.from_env(env)
    except EnvValidationError as exc:
        errors.extend(exc.errors)

    values: dict[str, Any] = {}
    if core is not None:
        values.update({var: getattr(core, field) for var, field in core_names.items()})

    owners: dict[str, str] = {}
    plugin_configs: dict[str, BaseModel | None] = {}
    for plugin, schema in plugin_schemas:
        if schema is None:
            plugin_configs[plugin] = None
            continue
        names = env_var_names(schema)
        for var in names:
            if var in core_names:
                raise OracleBootError(
                    f"plugin '{plugin}' declares core variable '{var}'",
                    code="boot.config.core_collision",
                    hint=f"rename it with the plugin prefix, e.g. '{plugin.upper()}_{var}'".replace(
                        "-", "_"
                    ),
                )
            if var in owners:
                logger.warning(
                    "boot.config.collision: variable '%s' declared by '%s' and '%s'; '%s' wins",
                    var,
                    owners[var],
                    plugin,
                    plugin,
                )
            owners[var] = plugin
        try:
            instance = schema.model_validate({k: present[k] for k in names if k in present})
        except ValidationError as exc:
            errors.extend(_env_errors(plugin, exc))
            continue
        plugin_configs[plugin] = instance
        values.update({var: getattr(instance, field) for var, field in names.items()})

    if errors or core is None:
        raise EnvValidationError(errors)
    return ComposedConfig(
        core=core, values=MappingProxyType(values), plugin_configs=MappingProxyType(plugin_configs)
    )
