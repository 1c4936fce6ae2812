"""Server settings, read from the same environment as the core's Tier-0 variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from oracle_core import EnvValidationError

__all__ = ["MATRIX_REQUIRED", "ServerSettings", "check_replica_bus", "load_settings"]


def _strict_bool(value: object) -> object:
    # Booleans are exactly `true` or `false` (spec §10): "1", "yes" or "True" are typos.
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise ValueError("must be exactly 'true' or 'false'")
        return value == "true"
    return value


EnvBool = Annotated[bool, BeforeValidator(_strict_bool)]

QUEUE_SCHEMES = ("redis", "rediss", "unix")

MATRIX_REQUIRED = (
    "MATRIX_BASE_URL",
    "MATRIX_ORACLE_ADMIN_USER_ID",
    "MATRIX_ACCOUNT_ROOM_ID",
    "MATRIX_VALUE_PIN",
)


class ServerSettings(BaseModel):
    """Variables the server owns (spec §10); field aliases are the variable names."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    host: str = Field("0.0.0.0", alias="HOST")
    port: int = Field(3000, alias="PORT", ge=0, le=65535)
    cors_origin: str = Field("*", alias="CORS_ORIGIN")
    oracle_name: str | None = Field(None, alias="ORACLE_NAME")
    oracle_did: str | None = Field(None, alias="ORACLE_DID")
    oracle_entity_did: str | None = Field(None, alias="ORACLE_ENTITY_DID")
    oracle_backend: Literal["ixo", "local"] = Field("ixo", alias="ORACLE_BACKEND")
    blocksync_graphql_url: str | None = Field(None, alias="BLOCKSYNC_GRAPHQL_URL")
    database_url: str | None = Field(None, alias="DATABASE_URL")
    sqlite_database_path: str = Field("./data/sqlite", alias="SQLITE_DATABASE_PATH")
    redis_url: str | None = Field(None, alias="REDIS_URL")
    socketio_message_queue: str | None = Field(None, alias="SOCKETIO_MESSAGE_QUEUE")
    allow_single_replica_postgres: EnvBool = Field(False, alias="ALLOW_SINGLE_REPLICA_POSTGRES")
    throttle_limit: int = Field(10, alias="THROTTLE_LIMIT", ge=1)
    throttle_ttl_seconds: int = Field(60, alias="THROTTLE_TTL_SECONDS", ge=1)
    frontend_tool_timeout_ms: int = Field(15000, alias="FRONTEND_TOOL_TIMEOUT_MS", ge=1)
    shutdown_drain_seconds: int = Field(25, alias="SHUTDOWN_DRAIN_SECONDS", ge=0)
    gc_freeze_at_start: EnvBool = Field(True, alias="GC_FREEZE_AT_START")
    session_concurrency: Literal["enqueue", "reject"] = Field(
        "enqueue", alias="SESSION_CONCURRENCY_POLICY"
    )
    max_body_bytes: int = Field(1024 * 1024, alias="MAX_BODY_BYTES", ge=1024)
    ucan_auth_max_ttl_seconds: int = Field(900, alias="UCAN_AUTH_MAX_TTL_SECONDS", gt=0)
    oracle_signing_mnemonic: str | None = Field(None, alias="ORACLE_SIGNING_MNEMONIC")
    did_cache_ttl_seconds: int = Field(300, alias="DID_CACHE_TTL_SECONDS", ge=0)
    max_open_user_dbs: int = Field(256, alias="MAX_OPEN_USER_DBS", ge=1)
    run_replica_timeout_seconds: float = Field(15.0, alias="RUN_REPLICA_TIMEOUT_SECONDS", gt=0)
    matrix_enabled: EnvBool = Field(True, alias="MATRIX_ENABLED")
    matrix_base_url: str | None = Field(None, alias="MATRIX_BASE_URL")
    matrix_oracle_admin_user_id: str | None = Field(None, alias="MATRIX_ORACLE_ADMIN_USER_ID")
    matrix_oracle_admin_password: str | None = Field(None, alias="MATRIX_ORACLE_ADMIN_PASSWORD")
    matrix_oracle_admin_access_token: str | None = Field(
        None, alias="MATRIX_ORACLE_ADMIN_ACCESS_TOKEN"
    )
    matrix_account_room_id: str | None = Field(None, alias="MATRIX_ACCOUNT_ROOM_ID")
    matrix_value_pin: str | None = Field(None, alias="MATRIX_VALUE_PIN")
    matrix_store_path: str = Field("./matrix-storage", alias="MATRIX_STORE_PATH")
    matrix_checkpoint_sync: EnvBool = Field(True, alias="MATRIX_CHECKPOINT_SYNC")
    matrix_backup_debounce_seconds: float = Field(
        30.0, alias="MATRIX_BACKUP_DEBOUNCE_SECONDS", ge=0
    )
    skip_logging_chat_history_to_matrix: EnvBool = Field(
        False, alias="SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX"
    )

    @field_validator("cors_origin")
    @classmethod
    def _origins(cls, value: str) -> str:
        return ",".join(o.strip() for o in value.split(",") if o.strip()) or "*"

    @field_validator("socketio_message_queue")
    @classmethod
    def _queue_url(cls, value: str | None) -> str | None:
        # The control bus speaks redis-py, so only the URLs redis-py opens are accepted.
        if value is not None and value.partition("://")[0] not in QUEUE_SCHEMES:
            raise ValueError("must be a Redis URL: redis://host:6379/0, rediss://… or unix://…")
        return value

    @property
    def shared_storage(self) -> bool:
        """Whether ``DATABASE_URL`` is PostgreSQL (shared mode, SRV-55)."""
        scheme = (self.database_url or "").partition("://")[0]
        return scheme.split("+", 1)[0] in ("postgresql", "postgres")

    @property
    def is_local(self) -> bool:
        """Whether ``ORACLE_BACKEND=local``."""
        return self.oracle_backend == "local"

    @property
    def matrix_active(self) -> bool:
        """Whether the Matrix layer runs: ``ORACLE_BACKEND=ixo`` and ``MATRIX_ENABLED``."""
        return not self.is_local and self.matrix_enabled

    def cors_origins(self) -> list[str]:
        """``CORS_ORIGIN`` as a list (``["*"]`` for any origin)."""
        return self.cors_origin.split(",")


def load_settings(env: Mapping[str, str]) -> ServerSettings:
    """Validate the server's variables; empty values count as unset.

    Raises:
        EnvValidationError: one line per invalid variable, owner ``server``.
    """
    present = {k: v for k, v in env.items() if v != ""}
    try:
        settings = ServerSettings.model_validate(present)
    except ValidationError as exc:
        raise EnvValidationError(
            [
                f"[boot-error] Plugin 'server' env validation failed for "
                f"'{err['loc'][0] if err['loc'] else '?'}': {err['msg']}"
                for err in exc.errors()
            ]
        ) from exc
    if settings.matrix_active:
        missing = [var for var in MATRIX_REQUIRED if var not in present]
        if not {"MATRIX_ORACLE_ADMIN_ACCESS_TOKEN", "MATRIX_ORACLE_ADMIN_PASSWORD"} & set(present):
            missing.append("MATRIX_ORACLE_ADMIN_ACCESS_TOKEN")
        if missing:
            raise EnvValidationError(
                [
                    f"[boot-error] Plugin 'server' env validation failed for '{var}': "
                    "required with the Matrix layer on (set MATRIX_ENABLED=false to run "
                    "without it)"
                    for var in missing
                ]
            )
    return settings


def check_replica_bus(settings: ServerSettings) -> None:
    """Refuse shared mode without a message queue (SRV-54).

    PostgreSQL storage is what several replicas use; without ``SOCKETIO_MESSAGE_QUEUE``
    their socket.io rooms, browser-tool results and aborts would each stay on one replica.
    ``ALLOW_SINGLE_REPLICA_POSTGRES=true`` declares that only one replica runs.

    Raises:
        EnvValidationError: shared mode, no queue, and no single-replica declaration.
    """
    if (
        settings.shared_storage
        and not settings.socketio_message_queue
        and not settings.allow_single_replica_postgres
    ):
        raise EnvValidationError(
            [
                "[boot-error] Plugin 'server' env validation failed for "
                "'SOCKETIO_MESSAGE_QUEUE': boot.replicas.queue_missing: DATABASE_URL is "
                "PostgreSQL (shared mode, for several replicas) but no message queue is set, "
                "so socket.io rooms, browser-tool results and aborts would not reach the "
                "replica running a turn; set SOCKETIO_MESSAGE_QUEUE=redis://<host>:6379/0, "
                "or ALLOW_SINGLE_REPLICA_POSTGRES=true if only one replica runs"
            ]
        )
