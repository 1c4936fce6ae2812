"""Server settings: core's Tier-0 variables plus the server's own, checked before boot.

``ServerSettings`` extends core's ``CoreEnv``, so a variable both read (``PORT``,
``SQLITE_DATABASE_PATH``, the Matrix account, ...) has one default and one rule.
``load_settings`` runs every check a setting can fail — types and bounds, URL shapes,
the variables the IXO backend requires, the shared-mode rule — so that a bad value is
refused before the boot opens anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator

from oracle_core import CoreEnv, EnvValidationError

__all__ = ["ServerSettings", "asset_base_url", "check_replica_bus", "load_settings"]


DEFAULT_GC_THRESHOLD = "python"
"""The collector's thresholds while an oracle serves: Python's own (``700,10,10``).

``GC_THRESHOLD`` trades memory for CPU. Under 200 sessions at once the youngest
generation fills every few hundred microseconds and each collection walks the state of
every turn in flight: the collector took 14-16% of a worker's CPU. With ``10000,10,10``
it took 6%, and a worker ran about 6% more turns a second, at 7% more peak memory.
"""


def parse_gc_threshold(value: str) -> tuple[int, int, int] | None:
    """``"young,middle,old"`` as three positive integers; ``None`` for ``"python"``.

    Raises:
        ValueError: Anything else (``0`` would turn the collector off).
    """
    text = value.strip()
    if text == "python":
        return None
    parts = text.split(",")
    if len(parts) == 3 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
        young, middle, old = (int(p) for p in parts)
        return young, middle, old
    raise ValueError(
        f"gc.bad_threshold: {value!r} is not three positive integers; set e.g. "
        "GC_THRESHOLD=10000,10,10, or GC_THRESHOLD=python for Python's own"
    )


def _strict_bool(value: object) -> object:
    # Booleans are exactly `true` or `false` (spec §10): "1", "yes" or "True" are typos.
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise ValueError("must be exactly 'true' or 'false'")
        return value == "true"
    return value


EnvBool = Annotated[bool, BeforeValidator(_strict_bool)]

REDIS_SCHEMES = ("redis", "rediss", "unix")
# Far above what a person at the published client sends: about ten requests, two or three
# of them turns, in its first minute.
DEFAULT_TURN_LIMIT = 20
DEFAULT_READ_LIMIT = 300
DATABASE_SCHEMES = ("postgresql", "postgres", "sqlite")
# A Matrix server name: a DNS name, IPv4 or bracketed IPv6 literal, and an optional port.
_SERVER_NAME = re.compile(r"(?:[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def asset_base_url(value: str | None) -> str | None:
    """``DOCS_ASSET_BASE_URL`` normalised: ``None`` when blank, no trailing slash.

    Raises:
        ValueError: neither an http(s) URL nor an absolute path (``docs.asset_base_url``).
    """
    if value is None or not value.strip():
        return None
    base = value.strip().rstrip("/")
    if not base.startswith(("http://", "https://", "/")):
        raise ValueError(
            f"docs.asset_base_url: {value!r} is neither an http(s) URL nor an absolute path; "
            "set DOCS_ASSET_BASE_URL to e.g. https://cdn.example/swagger-ui or unset it to "
            "serve the bundled assets"
        )
    return base


class ServerSettings(CoreEnv):
    """Core's variables and the server's (spec §10); field aliases are the variable names."""

    ENV_OWNER: ClassVar[str] = "server"

    host: str = Field("0.0.0.0", alias="HOST")
    database_url: str | None = Field(None, alias="DATABASE_URL")
    database_pool_size: int = Field(10, alias="DATABASE_POOL_SIZE", ge=1)
    database_pool_timeout_seconds: float = Field(
        30.0, alias="DATABASE_POOL_TIMEOUT_SECONDS", gt=0, allow_inf_nan=False
    )
    redis_url: str | None = Field(None, alias="REDIS_URL")
    socketio_message_queue: str | None = Field(None, alias="SOCKETIO_MESSAGE_QUEUE")
    allow_single_replica_postgres: EnvBool = Field(False, alias="ALLOW_SINGLE_REPLICA_POSTGRES")
    throttle_limit: int | None = Field(None, alias="THROTTLE_LIMIT", ge=1)
    throttle_turn_limit: int | None = Field(None, alias="THROTTLE_TURN_LIMIT", ge=1)
    throttle_read_limit: int | None = Field(None, alias="THROTTLE_READ_LIMIT", ge=1)
    throttle_ttl_seconds: int = Field(60, alias="THROTTLE_TTL_SECONDS", ge=1)
    frontend_tool_timeout_ms: int = Field(15000, alias="FRONTEND_TOOL_TIMEOUT_MS", ge=1)
    kv_max_keys_per_user: int = Field(1000, alias="KV_MAX_KEYS_PER_USER", ge=1)
    kv_max_bytes_per_user: int = Field(1024 * 1024, alias="KV_MAX_BYTES_PER_USER", ge=1024)
    attachment_max_bytes: int = Field(10 * 1024 * 1024, alias="ATTACHMENT_MAX_BYTES", ge=1024)
    attachment_upload_mb_per_day: int = Field(200, alias="ATTACHMENT_UPLOAD_MB_PER_DAY", ge=1)
    main_model_vision: EnvBool = Field(False, alias="MAIN_MODEL_VISION")
    socket_handshake_limit: int = Field(30, alias="SOCKET_HANDSHAKE_LIMIT", ge=1)
    socket_handshake_window_seconds: int = Field(60, alias="SOCKET_HANDSHAKE_WINDOW_SECONDS", ge=1)
    shutdown_drain_seconds: int = Field(25, alias="SHUTDOWN_DRAIN_SECONDS", ge=0)
    gc_freeze_at_start: EnvBool = Field(True, alias="GC_FREEZE_AT_START")
    gc_threshold: str = Field(DEFAULT_GC_THRESHOLD, alias="GC_THRESHOLD")
    # Read by ``oracle serve`` before any app exists (``event_loop_factory``); listed here
    # so that a bad value is refused by every boot and the variable is documented.
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop", alias="EVENT_LOOP")
    # Set by ``oracle serve --workers N`` for the processes it starts, never by hand: the
    # inherited sockets to the workers' hub and of the shared port, the workers' load
    # board, and this worker's index.
    worker_hub_fd: int | None = Field(None, alias="ORACLE_WORKER_HUB_FD", ge=0)
    worker_listen_fd: int | None = Field(None, alias="ORACLE_WORKER_LISTEN_FD", ge=0)
    worker_load_fd: int | None = Field(None, alias="ORACLE_WORKER_LOAD_FD", ge=0)
    worker_index: int = Field(0, alias="ORACLE_WORKER_INDEX", ge=0)
    session_concurrency: Literal["enqueue", "reject", "interrupt", "rollback"] = Field(
        "enqueue", alias="SESSION_CONCURRENCY_POLICY"
    )
    max_body_bytes: int = Field(1024 * 1024, alias="MAX_BODY_BYTES", ge=1024)
    http_keep_alive_seconds: float = Field(
        75.0, alias="HTTP_KEEP_ALIVE_SECONDS", gt=0, allow_inf_nan=False
    )
    oracle_signing_mnemonic: str | None = Field(None, alias="ORACLE_SIGNING_MNEMONIC")
    did_cache_ttl_seconds: int = Field(300, alias="DID_CACHE_TTL_SECONDS", ge=0)
    max_open_user_dbs: int = Field(256, alias="MAX_OPEN_USER_DBS", ge=1)
    run_replica_timeout_seconds: float = Field(15.0, alias="RUN_REPLICA_TIMEOUT_SECONDS", gt=0)
    turn_idle_timeout_seconds: float = Field(
        90.0, alias="TURN_IDLE_TIMEOUT_SECONDS", gt=0, allow_inf_nan=False
    )
    turn_deadline_seconds: float = Field(
        900.0, alias="TURN_DEADLINE_SECONDS", gt=0, allow_inf_nan=False
    )
    turn_concurrency: int = Field(64, alias="TURN_CONCURRENCY", ge=0)
    turn_admission: Literal["fixed", "adaptive"] = Field("fixed", alias="TURN_ADMISSION")
    docs_asset_base_url: str | None = Field(None, alias="DOCS_ASSET_BASE_URL")
    matrix_enabled: EnvBool = Field(True, alias="MATRIX_ENABLED")
    matrix_checkpoint_sync: EnvBool = Field(True, alias="MATRIX_CHECKPOINT_SYNC")
    matrix_backup_debounce_seconds: float = Field(
        30.0, alias="MATRIX_BACKUP_DEBOUNCE_SECONDS", ge=0
    )
    skip_logging_chat_history_to_matrix: EnvBool = Field(
        False, alias="SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX"
    )
    matrix_trusted_homeservers: str | None = Field(None, alias="MATRIX_TRUSTED_HOMESERVERS")
    mcp_expose: EnvBool = Field(False, alias="ORACLE_MCP_EXPOSE")
    a2a: EnvBool = Field(False, alias="ORACLE_A2A")
    ucan_protected_mcp_servers: str | None = Field(None, alias="UCAN_PROTECTED_MCP_SERVERS")
    ucan_root_issuers: str | None = Field(None, alias="UCAN_ROOT_ISSUERS")
    mcp_expose_sub_agents: EnvBool = Field(False, alias="ORACLE_MCP_EXPOSE_SUB_AGENTS")

    @field_validator("cors_origin")
    @classmethod
    def _origins(cls, value: str) -> str:
        return ",".join(o.strip() for o in value.split(",") if o.strip()) or "*"

    @field_validator("redis_url", "socketio_message_queue")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        # The locks, run logs and the replica bus speak redis-py: only its URLs are taken.
        if value is not None and value.partition("://")[0] not in REDIS_SCHEMES:
            raise ValueError("must be a Redis URL: redis://host:6379/0, rediss://… or unix://…")
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, separator, _ = value.partition("://")
        if not separator or scheme.partition("+")[0] not in DATABASE_SCHEMES:
            raise ValueError(
                "persistence.bad_database_url: use postgresql://user@host:5432/db (shared "
                "mode) or sqlite:///path/oracle.db, or leave DATABASE_URL unset"
            )
        return value

    @field_validator("matrix_trusted_homeservers")
    @classmethod
    def _trusted_homeservers(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [name.strip() for name in value.split(",") if name.strip()]
        for name in names:
            if not _SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"matrix.bad_server_name: {name!r} is not a Matrix server name; list "
                    "server names as in user ids, e.g. example.org,matrix.example.org:8448"
                )
        return ",".join(names) or None

    @field_validator("gc_threshold")
    @classmethod
    def _gc_threshold(cls, value: str) -> str:
        parse_gc_threshold(value)
        return value.strip()

    @property
    def gc_thresholds(self) -> tuple[int, int, int] | None:
        """``GC_THRESHOLD`` as ``gc.set_threshold`` arguments; ``None`` for Python's own."""
        return parse_gc_threshold(self.gc_threshold)

    @field_validator("docs_asset_base_url")
    @classmethod
    def _asset_base_url(cls, value: str | None) -> str | None:
        return asset_base_url(value)

    @property
    def protected_mcp_servers(self) -> list[str]:
        """``UCAN_PROTECTED_MCP_SERVERS`` as names (UCAN-28)."""
        return _names(self.ucan_protected_mcp_servers)

    @property
    def root_issuers(self) -> list[str]:
        """``UCAN_ROOT_ISSUERS`` as DIDs; unset, the entity DID (UCAN-28)."""
        given = _names(self.ucan_root_issuers)
        return given or ([self.oracle_entity_did] if self.oracle_entity_did else [])

    @property
    def turn_limit(self) -> int:
        """Turns (``POST /messages/{id}``) a user may start per ``THROTTLE_TTL_SECONDS``:
        ``THROTTLE_TURN_LIMIT``, else ``THROTTLE_LIMIT``, else 20."""
        return self.throttle_turn_limit or self.throttle_limit or DEFAULT_TURN_LIMIT

    @property
    def read_limit(self) -> int:
        """Other protected requests a user may make per ``THROTTLE_TTL_SECONDS``:
        ``THROTTLE_READ_LIMIT``, else ``THROTTLE_LIMIT``, else 300."""
        return self.throttle_read_limit or self.throttle_limit or DEFAULT_READ_LIMIT

    @property
    def shared_storage(self) -> bool:
        """Whether ``DATABASE_URL`` is PostgreSQL (shared mode, SRV-55)."""
        scheme = (self.database_url or "").partition("://")[0]
        return scheme.split("+", 1)[0] in ("postgresql", "postgres")

    @property
    def matrix_active(self) -> bool:
        """Whether the Matrix layer runs: ``ORACLE_BACKEND=ixo`` and ``MATRIX_ENABLED``."""
        return not self.is_local and self.matrix_enabled

    def trusted_homeservers(self, own: str) -> frozenset[str]:
        """``MATRIX_TRUSTED_HOMESERVERS`` as a set; unset, the oracle's own server only.

        Args:
            own: The server name of the oracle's account (``MATRIX_ORACLE_ADMIN_USER_ID``).
        """
        if self.matrix_trusted_homeservers is None:
            return frozenset({own})
        return frozenset(self.matrix_trusted_homeservers.split(","))

    def cors_origins(self) -> list[str]:
        """``CORS_ORIGIN`` as a list (``["*"]`` for any origin)."""
        return self.cors_origin.split(",")


def _names(value: str | None) -> list[str]:
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def load_settings(env: Mapping[str, str]) -> ServerSettings:
    """Validate the server's environment; empty values count as unset.

    Args:
        env: The environment, e.g. ``os.environ``.

    Returns:
        The settings, every rule checked (``check_replica_bus`` included).

    Raises:
        EnvValidationError: one line per invalid variable, naming its owner (``core`` or
            ``server``).
    """
    settings = ServerSettings.from_env(env)
    check_replica_bus(settings)
    check_protected_mcp(settings)
    return settings


def check_protected_mcp(settings: ServerSettings) -> None:
    """Refuse protected MCP servers without the DIDs their invocations are checked against.

    Raises:
        EnvValidationError: ``UCAN_PROTECTED_MCP_SERVERS`` set, ``ORACLE_ENTITY_DID`` not.
    """
    if settings.protected_mcp_servers and not settings.oracle_entity_did:
        raise EnvValidationError(
            [
                "[boot-error] Plugin 'server' env validation failed for "
                "'UCAN_PROTECTED_MCP_SERVERS': ucan.protected_mcp_needs_entity_did: "
                "invocations of protected MCP tools name the resource "
                "ixo:oracle:<ORACLE_ENTITY_DID>:mcp/<server>/<tool>; set ORACLE_ENTITY_DID"
            ]
        )


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
