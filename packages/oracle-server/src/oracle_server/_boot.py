"""``create_oracle_app``: the core runtime behind the oracle's HTTP server (CORE-98, SRV-5).

The settings are checked first: nothing is opened until every rule a setting can fail
has passed. Then the builders run in the order of ``BUILDERS``, on one
``AsyncExitStack``:

1. ``open_replicas``: what replicas share — the control bus, run log, turn locks and
   rate limits (in Redis with their URLs, else in this process);
2. ``open_storage``: the server database and the checkpointers (per-user files or
   PostgreSQL);
3. ``build_socket_layer``: the socket.io gateway and the event sink of turns;
4. ``build_matrix_layer``: the Matrix layer (built here, started by the ASGI lifespan);
5. ``boot_runtime``: the core runtime with the server's services, plugins entered;
6. ``build_turns``: the turn runner and what follows each turn;
7. ``build_asgi_app``: Starlette with the pipeline, socket.io in front.

Each builder opens its part and pushes what closes it. When a builder fails, the stack
closes what the builders before it opened, newest first, and the error propagates. A
booted ``OracleApp`` keeps the stack: its ``aclose`` unwinds it the same way, so the
turns drain first and the replicas' connections close last.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from oracle_core import (
    AmbientServices,
    AuthExcludedRoute,
    BlobStore,
    CoreEnv,
    EventSink,
    FeatureValue,
    FrontendService,
    KeyValueService,
    KvBackend,
    KvLimits,
    LocalMatrixService,
    LocalSecretsService,
    MainAgentHooks,
    MatrixService,
    OracleBootError,
    OracleConfig,
    OraclePlugin,
    OracleRuntime,
    PermissiveUcanService,
    ProviderLLM,
    SecretsService,
    SqliteKvBackend,
    SqliteSecretsService,
    TurnTransport,
    UcanService,
    UnavailableMatrixService,
    create_runtime,
)
from oracle_server._app import OracleApp
from oracle_server._auth.authenticator import Authenticator
from oracle_server._auth.keys import OracleKey, oracle_signer
from oracle_server._auth.mcp_invocations import McpInvocationGuard, ProtectedMcpToolsPlugin
from oracle_server._auth.ucan_service import IxoUcanService
from oracle_server._http.app import build_http_app
from oracle_server._http.pipeline import SubscriptionCheck
from oracle_server._http.ratelimit import RateLimiter, create_rate_limiter
from oracle_server._http.ratelimit.hub import HubRateLimiter
from oracle_server._http.routes.system import listed_models
from oracle_server._http.state import ServerState
from oracle_server._persistence import (
    ReauthPrompts,
    Sessions,
    Storage,
    UserDatabases,
    database_url,
    open_checkpointers,
)
from oracle_server._replicas import ReplicaBus, create_replica_bus
from oracle_server._replicas.hub import HubReplicaBus
from oracle_server._settings import ServerSettings, load_settings
from oracle_server._socket.gateway import SocketGateway
from oracle_server._socket.hubqueue import HubSocketManager
from oracle_server._turns.approvals import TurnApprovals
from oracle_server._turns.bookkeeping import TurnBookkeeping
from oracle_server._turns.events import ServerEventSink
from oracle_server._turns.locks import TurnLocks, create_turn_locks
from oracle_server._turns.locks.hub import HubTurnLocks
from oracle_server._turns.runlog import RunLog, create_run_log
from oracle_server._turns.runlog.hub import HubRunLog
from oracle_server._turns.runner import TurnRunner
from oracle_server._turns.session_events import SessionAnnouncer
from oracle_server._turns.titles import has_title_model
from oracle_server._turns.transport import ServerTransport
from oracle_server._workers.connection import HubConnection
from oracle_server._workers.supervisor import WORKER_VARIABLES
from oracle_ucan import ChainVerifier, default_resolver

if TYPE_CHECKING:
    # Imported when Matrix is on (build_matrix_layer): matrix-nio and its dependencies
    # are about 50 MiB of a local oracle's memory.
    # Imported when ORACLE_A2A is on (build_asgi_app), from the optional a2a extra.
    from oracle_server._a2a.endpoint import A2aEndpoint
    from oracle_server._matrix.layer import MatrixLayer

__all__ = ["BUILDERS", "create_oracle_app"]

logger = logging.getLogger("oracle.server")

BUILDERS = (
    "open_replicas",
    "open_storage",
    "build_socket_layer",
    "build_matrix_layer",
    "boot_runtime",
    "build_turns",
    "build_asgi_app",
)
"""The boot's builders, in the order they run."""


@dataclass(frozen=True)
class Replicas:
    """What the replicas of one oracle share (in this process when there is one)."""

    bus: ReplicaBus
    runs: RunLog
    locks: TurnLocks
    limiter: RateLimiter
    hub: HubConnection | None = None
    rooms: Any | None = None


@dataclass(frozen=True)
class Persistence:
    """The server database, the checkpointers and where sessions live."""

    storage: Storage
    checkpointers: Any
    sessions: Sessions
    user_dbs: UserDatabases | None


@dataclass(frozen=True)
class RuntimeOptions:
    """``create_oracle_app``'s arguments for ``create_runtime``, forwarded unchanged."""

    features: Mapping[str, FeatureValue] | None
    plugins: Sequence[OraclePlugin]
    manifest_overrides: Mapping[str, Mapping[str, Any]] | None
    hooks: MainAgentHooks | None
    bundled_plugins: Sequence[OraclePlugin] | None
    discover_entry_points: bool
    require_llm: bool
    logger: logging.Logger | None


async def create_oracle_app(
    config: OracleConfig | Mapping[str, Any],
    *,
    features: Mapping[str, FeatureValue] | None = None,
    plugins: Sequence[OraclePlugin] = (),
    manifest_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    routes: Sequence[BaseRoute] = (),
    auth_excluded_routes: Sequence[AuthExcludedRoute] = (),
    hooks: MainAgentHooks | None = None,
    env: Mapping[str, str] | None = None,
    logger: logging.Logger | None = None,
    bundled_plugins: Sequence[OraclePlugin] | None = None,
    discover_entry_points: bool = True,
    skip_matrix_init: bool = False,
    skip_graceful_shutdown: bool = False,
    require_llm: bool = True,
    subscription_check: SubscriptionCheck | None = None,
) -> OracleApp:
    """Boot the runtime and build the oracle's HTTP app (CORE-98, SRV-5).

    Every ``create_runtime`` option is forwarded unchanged (``require_llm=False`` serves
    without a configured model; turns then answer with an error naming the variables).
    ``routes`` are mounted next to the built-in ones and plugin routes;
    ``auth_excluded_routes`` join the built-in public routes. ``subscription_check``
    (``async (auth) -> None``, raising ``HTTPError(402, …)``) gates every protected route
    after authentication; the credits plugin supplies one.

    Raises:
        EnvValidationError: a setting is invalid; nothing was opened.
        OracleBootError: the runtime did not boot; everything opened before was closed.
    """
    environment = dict(os.environ if env is None else env)
    # Which worker this process is, and its sockets, belong to the process whatever
    # environment the factory chose (`oracle serve --workers` sets them).
    environment.update({k: v for k, v in os.environ.items() if k in WORKER_VARIABLES})
    settings = load_settings(environment)
    key = OracleKey(oracle_signer(settings))
    oracle_did = settings.oracle_did or (key.signer.did() if key.signer else "")
    options = RuntimeOptions(
        features=features,
        plugins=plugins,
        manifest_overrides=manifest_overrides,
        hooks=hooks,
        bundled_plugins=bundled_plugins,
        discover_entry_points=discover_entry_points,
        require_llm=require_llm,
        logger=logger,
    )
    stack = AsyncExitStack()
    try:
        replicas = await open_replicas(stack, settings)
        persistence = await open_storage(stack, settings, oracle_did=oracle_did)
        authenticator = build_authenticator(settings, persistence.storage, oracle_did)
        gateway, events = build_socket_layer(
            stack, settings, persistence.sessions, authenticator, replicas
        )
        matrix = (
            build_matrix_layer(stack, settings, persistence, key)
            if settings.matrix_active and not skip_matrix_init
            else None
        )
        transport = ServerTransport()
        runtime = await boot_runtime(
            stack,
            config,
            settings,
            environment,
            options,
            persistence=persistence,
            gateway=gateway,
            events=events,
            matrix=matrix,
            key=key,
            oracle_did=oracle_did,
            transport=transport,
        )
        runner, bookkeeping = build_turns(
            stack, settings, runtime, replicas, persistence, events, matrix
        )
        state = ServerState(
            runtime=runtime,
            settings=settings,
            storage=persistence.storage,
            runner=runner,
            bookkeeping=bookkeeping,
            authenticator=authenticator,
            oracle_did=oracle_did,
            oracle_name=runtime.identity.name,
            checkpointers=persistence.checkpointers,
            sessions=persistence.sessions,
            limiter=replicas.limiter,
            key=key,
            models=listed_models(settings),
            matrix=matrix,
            announce=SessionAnnouncer(runtime, events),
        )
        transport.bind(state, subscription_check)
        asgi = build_asgi_app(
            state,
            gateway,
            routes=routes,
            auth_excluded_routes=auth_excluded_routes,
            subscription_check=subscription_check,
        )
        return OracleApp(
            state,
            asgi,
            gateway=gateway,
            closer=stack,
            skip_graceful_shutdown=skip_graceful_shutdown,
            hub=replicas.hub,
        )
    except BaseException:
        await stack.aclose()
        raise


# --- the builders -----------------------------------------------------------------------


async def open_replicas(stack: AsyncExitStack, settings: ServerSettings) -> Replicas:
    """The replica bus (``SOCKETIO_MESSAGE_QUEUE``), run log, turn locks and rate limits
    (``REDIS_URL``); without its URL each stays in this process, or, in a worker of
    ``oracle serve --workers``, on the workers' hub.

    The bus joins first, so that a replica that cannot reach it fails before anything
    else is opened.
    """
    if settings.worker_hub_fd is not None:
        return await open_worker_replicas(stack, settings, settings.worker_hub_fd)
    bus = create_replica_bus(settings.socketio_message_queue)
    stack.push_async_callback(_closing("the replica bus", bus.aclose))
    await bus.start()
    runs = create_run_log(settings.redis_url, replica_timeout=settings.run_replica_timeout_seconds)
    stack.push_async_callback(_closing("the run log", runs.aclose))
    locks = create_turn_locks(settings.redis_url)
    stack.push_async_callback(_closing("the turn locks", locks.aclose))
    limiter = create_rate_limiter(settings.redis_url)
    stack.push_async_callback(_closing("the rate limiter", limiter.aclose))
    return Replicas(bus=bus, runs=runs, locks=locks, limiter=limiter)


async def open_worker_replicas(
    stack: AsyncExitStack, settings: ServerSettings, fd: int
) -> Replicas:
    """A worker's share of its machine: what has no Redis URL goes through the hub.

    The hub's connection closes last, after every user of it. When it is lost (the
    supervisor died) the worker stops as if it had been sent ``SIGTERM``.
    """
    hub = await HubConnection.open(
        socket.socket(fileno=fd), worker=f"worker-{settings.worker_index}"
    )
    stack.push_async_callback(_closing("the workers' hub", hub.aclose))
    hub.on_lost(lambda: signal.raise_signal(signal.SIGTERM))
    queue = settings.socketio_message_queue
    bus: ReplicaBus = create_replica_bus(queue) if queue else HubReplicaBus(hub)
    stack.push_async_callback(_closing("the replica bus", bus.aclose))
    await bus.start()
    rooms = None
    if not queue:
        rooms = HubSocketManager(hub)
        await rooms.subscribe()
    redis_url = settings.redis_url
    runs: RunLog = (
        create_run_log(redis_url, replica_timeout=settings.run_replica_timeout_seconds)
        if redis_url
        else HubRunLog(hub)
    )
    stack.push_async_callback(_closing("the run log", runs.aclose))
    locks: TurnLocks = create_turn_locks(redis_url) if redis_url else HubTurnLocks(hub)
    stack.push_async_callback(_closing("the turn locks", locks.aclose))
    limiter: RateLimiter = create_rate_limiter(redis_url) if redis_url else HubRateLimiter(hub)
    stack.push_async_callback(_closing("the rate limiter", limiter.aclose))
    return Replicas(bus=bus, runs=runs, locks=locks, limiter=limiter, hub=hub, rooms=rooms)


async def open_storage(
    stack: AsyncExitStack, settings: ServerSettings, *, oracle_did: str
) -> Persistence:
    """The server database (``DATABASE_URL``, else SQLite under ``SQLITE_DATABASE_PATH``)
    and the checkpointers: one file per user, or PostgreSQL in shared mode."""
    storage = await Storage.open(
        database_url(settings.database_url, settings.sqlite_path),
        pool_size=settings.database_pool_size,
        pool_timeout=settings.database_pool_timeout_seconds,
    )
    stack.push_async_callback(_closing("the server database", storage.close))
    checkpointers = await open_checkpointers(
        storage.kind,
        storage.url if storage.kind == "postgresql" else settings.sqlite_path,
        oracle_did=oracle_did,
        max_open=settings.max_open_user_dbs,
    )
    stack.push_async_callback(_closing("the checkpointers", checkpointers.aclose))
    user_dbs = checkpointers if isinstance(checkpointers, UserDatabases) else None
    return Persistence(
        storage=storage,
        checkpointers=checkpointers,
        sessions=user_dbs.sessions if user_dbs is not None else storage.sessions,
        user_dbs=user_dbs,
    )


def build_authenticator(
    settings: ServerSettings, storage: Storage, oracle_did: str
) -> Authenticator:
    """Validates the UCANs of requests and socket handshakes (``did:key`` only locally)."""
    resolver = (
        None
        if settings.is_local
        else default_resolver(
            blocksync_graphql_url=settings.blocksync_graphql_url,
            ttl_seconds=float(settings.did_cache_ttl_seconds),
        )
    )
    return Authenticator(
        oracle_did=oracle_did,
        max_ttl=settings.ucan_auth_max_ttl_seconds,
        verifier=ChainVerifier(resolver),
        is_revoked=storage.delegations.is_revoked,
    )


def build_socket_layer(
    stack: AsyncExitStack,
    settings: ServerSettings,
    sessions: Sessions,
    authenticator: Authenticator,
    replicas: Replicas,
) -> tuple[SocketGateway, ServerEventSink]:
    """The socket.io gateway (SRV-47 … 54) and the sink that sends plugin events to the
    turn's stream and the session's sockets; handshakes count on the rate limiter."""
    gateway = SocketGateway(
        settings,
        sessions,
        authenticator=authenticator,
        bus=replicas.bus,
        limiter=replicas.limiter,
        rooms=replicas.rooms,
    )
    stack.push_async_callback(_closing("the socket.io gateway", gateway.aclose))
    # Closed after the turns drained, so their last events still reach other replicas.
    stack.push_async_callback(_closing("the socket.io queue", gateway.close_queue))
    gateway.start_queue()
    return gateway, ServerEventSink(broadcast=gateway.broadcast)


def build_matrix_layer(
    stack: AsyncExitStack, settings: ServerSettings, persistence: Persistence, key: OracleKey
) -> MatrixLayer:
    """The Matrix layer (SRV-6, 64 … 69); the ASGI lifespan starts it, never waiting."""
    from oracle_server._matrix.layer import MatrixLayer

    matrix = MatrixLayer(
        settings,
        sessions=persistence.sessions,
        user_dbs=persistence.user_dbs,
        files=persistence.storage.matrix_files,
        key=key,
    )
    stack.push_async_callback(_closing("the Matrix layer", matrix.aclose))
    # Before the client closes: changed user files are uploaded, chat-log posts finish.
    stack.push_async_callback(_closing("the Matrix backups", matrix.flush))
    return matrix


async def boot_runtime(
    stack: AsyncExitStack,
    config: OracleConfig | Mapping[str, Any],
    settings: ServerSettings,
    environment: Mapping[str, str],
    options: RuntimeOptions,
    *,
    persistence: Persistence,
    gateway: SocketGateway,
    events: ServerEventSink,
    matrix: MatrixLayer | None,
    key: OracleKey,
    oracle_did: str,
    transport: TurnTransport | None = None,
) -> OracleRuntime:
    """The core runtime, with the server's services (the gateway runs frontend calls,
    ``transport`` starts plugins' turns) and checkpointers."""
    reauth = (
        None
        if matrix is None
        else functools.partial(
            prompt_reauthorisation,
            persistence.storage.reauth,
            matrix,
            settings.ucan_reauth_prompt_throttle_seconds,
        )
    )
    ucan: PermissiveUcanService | IxoUcanService = (
        PermissiveUcanService()
        if settings.is_local
        else IxoUcanService(oracle_did=oracle_did, signer=key, reauth=reauth)
    )

    kv = plugin_kv(settings)
    stack.push_async_callback(_closing("the plugins' key-value store", kv.aclose))
    services = functools.partial(
        server_services,
        kv=kv,
        transport=transport,
        blob_store=persistence.storage.blobs,
        matrix=plugin_matrix(stack, settings, matrix),
        secrets=user_secrets(stack, settings, matrix),
        ucan=ucan,
        events=events,
        frontend=gateway,
    )
    server_hooks = MainAgentHooks(checkpointer_for_user=persistence.checkpointers)
    server_plugins: list[OraclePlugin] = []
    if settings.protected_mcp_servers:
        guard = McpInvocationGuard(
            settings.protected_mcp_servers,
            entity_did=settings.oracle_entity_did or "",
            oracle_did=oracle_did,
            root_issuers=settings.root_issuers,
            store=persistence.storage.replay,
        )
        server_plugins.append(ProtectedMcpToolsPlugin(guard))
    runtime = await create_runtime(
        config,
        features=options.features,
        plugins=[*options.plugins, *server_plugins],
        manifest_overrides=options.manifest_overrides,
        hooks=(options.hooks or MainAgentHooks()).merged_over(server_hooks),
        bundled_plugins=options.bundled_plugins,
        discover_entry_points=options.discover_entry_points,
        env=environment,
        logger=options.logger or logging.getLogger("oracle"),
        services=services,
        require_llm=options.require_llm,
    )
    stack.push_async_callback(_closing("the runtime", runtime.aclose))
    return runtime


def build_turns(
    stack: AsyncExitStack,
    settings: ServerSettings,
    runtime: OracleRuntime,
    replicas: Replicas,
    persistence: Persistence,
    events: ServerEventSink,
    matrix: MatrixLayer | None,
) -> tuple[TurnRunner, TurnBookkeeping]:
    """The turn runner (one turn per session, each a run in the run log), what follows
    each turn, and the wiring of aborts and Matrix messages to it."""
    announce = SessionAnnouncer(runtime, events)
    bookkeeping = TurnBookkeeping(
        persistence.sessions,
        events,
        runtime.ambient.llm,
        title_model=has_title_model(settings),
        matrix=matrix,
        announce=announce,
    )
    runner = TurnRunner(
        runtime,
        replicas.locks,
        events,
        policy=settings.session_concurrency,
        on_finished=bookkeeping,
        user_scope=persistence.user_dbs.use if persistence.user_dbs is not None else None,
        stored_delegation=persistence.storage.delegations.usable,
        runs=replicas.runs,
        idle_timeout=settings.turn_idle_timeout_seconds,
        deadline=settings.turn_deadline_seconds,
        concurrency=settings.turn_concurrency or None,
        adaptive=settings.turn_admission == "adaptive",
        approvals=TurnApprovals(runtime, persistence.storage.approvals, events),
        session_strategy=functools.partial(_session_strategy, persistence.sessions),
    )
    # SRV-54: aborts reach the replica running the turn, wherever they arrive.
    runner.abort_elsewhere = replicas.bus.abort_elsewhere
    replicas.bus.handle_abort(runner.abort_for_replica)
    if matrix is not None:
        matrix.bind(
            on_status=runtime.emit_status_change,
            on_error=runtime.report_error,
            start_turn=runner.start,
            announce=announce,
        )
    stack.push_async_callback(_closing("post-turn work", bookkeeping.finish))
    drain = functools.partial(runner.drain, float(settings.shutdown_drain_seconds))
    stack.push_async_callback(_closing("the running turns", drain))
    return runner, bookkeeping


def build_asgi_app(
    state: ServerState,
    gateway: SocketGateway,
    *,
    routes: Sequence[BaseRoute],
    auth_excluded_routes: Sequence[AuthExcludedRoute],
    subscription_check: SubscriptionCheck | None,
) -> ASGIApp:
    """Starlette with the pipeline and every route, ``/socket.io/`` in front of it."""
    server_routes: list[BaseRoute] = []
    public: list[AuthExcludedRoute] = list(auth_excluded_routes)
    running: list[Callable[[], contextlib.AbstractAsyncContextManager[None]]] = []
    if state.settings.mcp_expose:
        from oracle_server._mcp.expose import McpExposure

        exposure = McpExposure(state, sub_agents=state.settings.mcp_expose_sub_agents)
        server_routes.append(exposure.route())
        running.append(exposure.running)
    if state.settings.a2a:
        endpoint = _a2a_endpoint(state)
        server_routes.extend(endpoint.routes())
        public.extend(endpoint.public_routes())
        running.append(endpoint.running)
    starlette = build_http_app(
        state,
        host_routes=routes,
        server_routes=server_routes,
        auth_excluded_routes=public,
        subscription_check=subscription_check,
        lifespan=_lifespan(state.matrix, running),
    )
    return gateway.asgi_app(starlette)


# --- helpers ----------------------------------------------------------------------------


def server_services(
    core: CoreEnv,
    *,
    blob_store: BlobStore,
    matrix: MatrixService,
    secrets: SecretsService,
    ucan: UcanService,
    events: EventSink,
    frontend: FrontendService,
    kv: KeyValueService | None = None,
    transport: TurnTransport | None = None,
) -> AmbientServices:
    """The services every request reaches (CORE-43): the models come from the core
    environment the runtime validated."""
    return AmbientServices(
        secrets=secrets,
        blob_store=blob_store,
        matrix=matrix,
        ucan=ucan,
        events=events,
        llm=ProviderLLM(core),
        frontend=frontend,
        kv=kv,
        transport=transport,
    )


async def _session_strategy(sessions: Sessions, user_did: str, session_id: str) -> str | None:
    """The session's own double-texting policy, for turns that did not bring one."""
    record = await sessions.get(user_did, session_id)
    return None if record is None else record.multitask_strategy


def plugin_matrix(
    stack: AsyncExitStack, settings: ServerSettings, matrix: MatrixLayer | None
) -> MatrixService:
    """``rt_ctx.matrix``: the Matrix layer's client; with ``ORACLE_BACKEND=local`` the local
    store (a SQLite file under ``SQLITE_DATABASE_PATH``); otherwise none (Matrix is off)."""
    if matrix is not None:
        return matrix.service()
    if not settings.is_local:
        return UnavailableMatrixService()
    local = LocalMatrixService(Path(settings.sqlite_path) / "matrix.db")
    stack.push_async_callback(_closing("the local Matrix store", local.aclose))
    return local


def user_secrets(
    stack: AsyncExitStack, settings: ServerSettings, matrix: MatrixLayer | None
) -> SecretsService:
    """``rt_ctx.secrets``: in the user's Matrix room with Matrix on; with
    ``ORACLE_BACKEND=local`` a per-user store under ``SQLITE_DATABASE_PATH``, encrypted at
    rest; otherwise none."""
    if matrix is not None:
        return matrix.secrets()
    if not settings.is_local:
        return LocalSecretsService()
    local = SqliteSecretsService(Path(settings.sqlite_path) / "user_secrets.db")
    stack.push_async_callback(_closing("the local secrets store", local.aclose))
    return local


def plugin_kv(settings: ServerSettings) -> KeyValueService:
    """``rt_ctx.kv``: on Redis with ``REDIS_URL`` (shared by the replicas), else in a
    SQLite file under ``SQLITE_DATABASE_PATH``; capped by ``KV_MAX_KEYS_PER_USER`` and
    ``KV_MAX_BYTES_PER_USER``."""
    limits = KvLimits(
        max_keys=settings.kv_max_keys_per_user,
        max_bytes=settings.kv_max_bytes_per_user,
        max_value_bytes=min(KvLimits().max_value_bytes, settings.kv_max_bytes_per_user),
    )
    backend: KvBackend
    if settings.redis_url:
        from oracle_server._persistence.kv_redis import RedisKvBackend
        from oracle_server._redis import redis_client

        backend = RedisKvBackend(redis_client(settings.redis_url))
    else:
        backend = SqliteKvBackend(Path(settings.sqlite_path) / "plugin_kv.db")
    return KeyValueService(backend, limits=limits)


async def prompt_reauthorisation(
    prompts: ReauthPrompts, matrix: MatrixLayer, throttle_seconds: int, user_did: str
) -> None:
    """Ask ``user_did`` in their room to re-authorise the oracle, at most once per
    ``UCAN_REAUTH_PROMPT_THROTTLE_SECONDS`` across replicas (UCAN-32)."""
    if await prompts.should_prompt(user_did, throttle_seconds):
        await matrix.ask_to_reauthorise(user_did)


def _a2a_endpoint(state: ServerState) -> A2aEndpoint:
    """The A2A endpoint; without the ``a2a`` extra, a boot error naming it."""
    try:
        from oracle_server._a2a.endpoint import A2aEndpoint
    except ImportError as exc:
        raise OracleBootError(
            "boot.a2a.sdk_missing: ORACLE_A2A=true needs the A2A SDK: install "
            f"oracle-server[a2a] ({exc.name} is missing)"
        ) from exc
    return A2aEndpoint(state)


def _lifespan(
    matrix: MatrixLayer | None,
    running: Sequence[Callable[[], contextlib.AbstractAsyncContextManager[None]]] = (),
) -> Callable[[Starlette], Any]:
    """Start the Matrix layer once the server loop runs, never waiting for it (SRV-6), and
    keep the optional endpoints' parts running while the app serves (``/mcp``, ``/a2a``)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if matrix is not None:
            matrix.start()
        async with contextlib.AsyncExitStack() as stack:
            for part in running:
                await stack.enter_async_context(part())
            yield

    return lifespan


def _closing(what: str, close: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    """``close`` for the exit stack: a failure is logged and the unwinding goes on."""

    async def close_logging_failure() -> None:
        try:
            await close()
        except Exception:
            logger.exception("shutdown.step_failed: closing %s failed", what)

    return close_logging_failure
