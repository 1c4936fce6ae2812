"""``create_oracle_app`` and ``OracleApp``: the core runtime behind an HTTP server (CORE-98)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute

from oracle_core import (
    ROUTE_RUNTIME_APP_STATE,
    AmbientServices,
    AuthExcludedRoute,
    CoreEnv,
    FeatureValue,
    LocalSecretsService,
    MainAgentHooks,
    OracleConfig,
    OracleEvent,
    OraclePlugin,
    PermissiveUcanService,
    ProviderLLM,
    UnavailableMatrixService,
    create_runtime,
)
from oracle_core._resolution import PluginStatusChangeEvent
from oracle_server._app import OracleApp
from oracle_server._auth.authenticator import Authenticator
from oracle_server._auth.ucan_service import IxoUcanService
from oracle_server._http.errors import (
    HTTPError,
    handle_http_error,
    handle_method_not_allowed,
    handle_not_found,
    handle_storage_unavailable,
)
from oracle_server._http.pipeline import (
    BUILTIN_EXCLUSIONS,
    BodyLimitMiddleware,
    ExclusionMatcher,
    Protection,
    ProtectionMiddleware,
    RequestIdMiddleware,
    SecurityHeadersMiddleware,
    SubscriptionCheck,
)
from oracle_server._http.ratelimit import create_rate_limiter
from oracle_server._http.routes import (
    delegation_routes,
    history_routes,
    message_routes,
    session_routes,
    system_routes,
)
from oracle_server._http.state import ServerState
from oracle_server._matrix.layer import MatrixLayer
from oracle_server._persistence import (
    SessionRecord,
    Storage,
    StorageUnavailableError,
    UserDatabases,
    database_url,
    open_checkpointers,
)
from oracle_server._replicas.redis import ControlBus
from oracle_server._settings import ServerSettings, check_replica_bus, load_settings
from oracle_server._socket.gateway import SocketGateway
from oracle_server._turns.locks import create_turn_locks
from oracle_server._turns.runlog import create_run_log
from oracle_server._turns.runner import ActiveTurn, ServerEventSink, TurnRunner
from oracle_server._turns.titles import UNTITLED, fallback_title, generate_title, has_title_model
from oracle_ucan import ChainVerifier, Ed25519Signer, default_resolver

__all__ = ["create_oracle_app", "oracle_signer"]

CORS_ALLOW_HEADERS = [
    "Content-Type",
    "Authorization",
    "x-ucan-delegation",
    "x-matrix-access-token",
    "x-matrix-homeserver",
    "x-did",
    "x-request-id",
    "x-auth-type",
    "x-timezone",
]
CORS_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
CORS_EXPOSE = ["X-Request-Id", "X-Run-Id"]
DEV_KEY_FILE = "oracle-dev-key.txt"


def oracle_signer(settings: ServerSettings) -> Ed25519Signer | None:
    """The oracle's UCAN key: ``ORACLE_SIGNING_MNEMONIC``, or in local mode a development
    key kept under ``SQLITE_DATABASE_PATH`` (created on first run)."""
    if settings.oracle_signing_mnemonic:
        return Ed25519Signer.from_mnemonic(settings.oracle_signing_mnemonic)
    if not settings.is_local:
        return None
    path = Path(settings.sqlite_database_path) / DEV_KEY_FILE
    if path.exists():
        return Ed25519Signer.parse(path.read_text().strip())
    path.parent.mkdir(parents=True, exist_ok=True)
    signer = Ed25519Signer.generate()
    path.write_text(signer.format() + "\n")
    path.chmod(0o600)
    return signer


def _model_list(core: CoreEnv) -> list[dict[str, Any]]:
    if core.llm_provider == "openai-compatible" and core.openai_compatible_model:
        roles = core.role_models()
        # The default is what the main agent runs: the ``main`` role's model when set.
        ids = [roles.get("main", core.openai_compatible_model), *roles.values()]
        ids.append(core.openai_compatible_model)
    else:
        ids = [core.llm_provider]
    unique = list(dict.fromkeys(ids))
    return [{"id": model, "isDefault": index == 0} for index, model in enumerate(unique)]


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
    """
    environment = dict(os.environ if env is None else env)
    settings = load_settings(environment)
    check_replica_bus(settings)
    log = logger or logging.getLogger("oracle")
    signer = oracle_signer(settings)
    oracle_did = settings.oracle_did or (signer.did() if signer else "")
    queue = settings.socketio_message_queue
    control_bus = ControlBus(queue) if queue else None
    if control_bus is not None:
        # First, so that a replica that cannot reach the bus fails before opening anything
        # else; until the handlers are attached below there is no turn to abort or settle.
        try:
            await control_bus.start()
        except BaseException:
            await control_bus.aclose()
            raise
    try:
        storage = await Storage.open(
            database_url(settings.database_url, settings.sqlite_database_path)
        )
    except BaseException:
        if control_bus is not None:
            await control_bus.aclose()
        raise
    checkpointers = await open_checkpointers(
        storage.kind,
        storage.url if storage.kind == "postgresql" else settings.sqlite_database_path,
        oracle_did=oracle_did,
        max_open=settings.max_open_user_dbs,
    )
    user_dbs = checkpointers if isinstance(checkpointers, UserDatabases) else None
    sessions = user_dbs.sessions if user_dbs is not None else storage.sessions
    events = ServerEventSink()
    # --- socket.io gateway (SRV-47 … 54): rooms get plugin events; frontend-tools plugin ---
    from oracle_server._socket.frontend_tools import FrontendToolsPlugin

    gateway = SocketGateway(settings, sessions, bus=control_bus)
    events.broadcast = gateway.broadcast
    plugins = [*plugins, FrontendToolsPlugin(gateway)]
    # --- end socket.io gateway ---
    core_env: list[CoreEnv] = []
    # --- Matrix layer (SRV-6, 64 … 69): created now, started by the ASGI lifespan ---
    booted: dict[str, Any] = {}  # the runtime and state, once they exist

    def status_changed(event: PluginStatusChangeEvent) -> None:
        booted["runtime"].emit_status_change(event)

    def failed(exc: BaseException, source: str) -> None:
        booted["runtime"].report_error(exc, source)

    def signer_loaded(key: Ed25519Signer) -> None:
        booted["state"].signer = key

    matrix: MatrixLayer | None = None
    if settings.matrix_active and not skip_matrix_init:
        matrix = MatrixLayer(
            settings,
            oracle_name=settings.oracle_name or "Oracle",
            sessions=sessions,
            user_dbs=user_dbs,
            files=storage.matrix_files,
            signer=signer,
            on_signer=signer_loaded,
            on_status=status_changed,
            on_error=failed,
        )
    # --- end Matrix layer ---

    async def reauth(user_did: str) -> None:
        throttle = core_env[0].ucan_reauth_prompt_throttle_seconds if core_env else 21600
        if matrix is None or not await storage.reauth.should_prompt(user_did, throttle):
            return
        await matrix.ask_to_reauthorise(user_did)

    def current_signer() -> Ed25519Signer | None:
        state = booted.get("state")
        return signer if state is None else state.signer

    def services(core: CoreEnv) -> AmbientServices:
        core_env.append(core)
        ucan: PermissiveUcanService | IxoUcanService = (
            PermissiveUcanService()
            if settings.is_local
            else IxoUcanService(oracle_did=oracle_did, signer=current_signer, reauth=reauth)
        )
        return AmbientServices(
            secrets=LocalSecretsService(),
            blob_store=storage.blobs,
            matrix=matrix.service() if matrix is not None else UnavailableMatrixService(),
            ucan=ucan,
            events=events,
            llm=ProviderLLM(core),
        )

    server_hooks = MainAgentHooks(checkpointer_for_user=checkpointers)
    try:
        runtime = await create_runtime(
            config,
            features=features,
            plugins=plugins,
            manifest_overrides=manifest_overrides,
            hooks=(hooks or MainAgentHooks()).merged_over(server_hooks),
            bundled_plugins=bundled_plugins,
            discover_entry_points=discover_entry_points,
            env=environment,
            logger=log,
            services=services,
            require_llm=require_llm,
        )
    except BaseException:
        await checkpointers.aclose()
        await storage.close()
        if control_bus is not None:
            await control_bus.aclose()
        raise
    booted["runtime"] = runtime
    resolver = (
        None
        if settings.is_local
        else default_resolver(
            blocksync_graphql_url=settings.blocksync_graphql_url,
            ttl_seconds=float(settings.did_cache_ttl_seconds),
        )
    )
    authenticator = Authenticator(
        oracle_did=oracle_did,
        max_ttl=settings.ucan_auth_max_ttl_seconds,
        verifier=ChainVerifier(resolver),
        is_revoked=storage.delegations.is_revoked,
    )
    locks = create_turn_locks(settings.redis_url)
    limiter = create_rate_limiter(settings.redis_url)

    background: set[asyncio.Task[None]] = set()

    async def title(turn: ActiveTurn, record: SessionRecord | None) -> None:
        if record is None or record.title not in (None, UNTITLED):
            return
        if not (core_env and has_title_model(core_env[0])):
            await sessions.set_title(turn.user_did, turn.session_id, fallback_title(turn.message))
            return

        async def ask_the_model() -> None:
            model = runtime.ambient.llm.get("session-title")
            made = await generate_title(model, turn.message)
            await sessions.set_title(turn.user_did, turn.session_id, made)
            events.emit(
                OracleEvent(
                    "message_cache_invalidation",
                    {"reason": "session_title"},
                    session_id=turn.session_id,
                    request_id=turn.request_id,
                    user_did=turn.user_did,
                )
            )

        task = asyncio.get_running_loop().create_task(ask_the_model())
        background.add(task)
        task.add_done_callback(background.discard)

    async def touch(turn: ActiveTurn) -> None:
        # The touch returns the row, so the title check costs no second query.
        record = await sessions.touch(turn.user_did, turn.session_id, datetime.now(UTC))
        if turn.status == "finished":
            await title(turn, record)
        if matrix is not None and turn.status == "finished":
            matrix.after_turn(
                user_did=turn.user_did,
                session_id=turn.session_id,
                message=turn.message,
                reply=turn.reply.text if turn.reply is not None else None,
                home_server=turn.home_server,
                client=turn.client,
            )

    async def stored_delegation(user_did: str) -> str | None:
        stored = await storage.delegations.get(user_did)
        if stored is None or await storage.delegations.is_revoked(stored.cid):
            return None
        return stored.raw

    runner = TurnRunner(
        runtime,
        locks,
        events,
        policy=settings.session_concurrency,
        on_finished=touch,
        user_scope=user_dbs.use if user_dbs is not None else None,
        stored_delegation=stored_delegation,
        runs=create_run_log(
            settings.redis_url, replica_timeout=settings.run_replica_timeout_seconds
        ),
    )
    if matrix is not None:
        matrix.start_turn = runner.start
    # --- replicas (SRV-54): aborts and client results reach the replica running the turn ---
    if control_bus is not None:
        runner.abort_elsewhere = control_bus.abort_elsewhere
        control_bus.handle_abort(runner.abort_here)
        gateway.start_queue()
    # --- end replicas ---
    state = ServerState(
        runtime=runtime,
        settings=settings,
        storage=storage,
        runner=runner,
        authenticator=authenticator,
        oracle_did=oracle_did,
        oracle_name=runtime.identity.name,
        checkpointers=checkpointers,
        sessions=sessions,
        models=_model_list(core_env[0]) if core_env else [],
        limiter=limiter,
        signer=signer,
        matrix=matrix,
        background=background,
    )
    booted["state"] = state
    exclusions = ExclusionMatcher(
        [*BUILTIN_EXCLUSIONS, *auth_excluded_routes, *runtime.auth_excluded_routes]
    )
    protection = Protection(
        authenticator=authenticator,
        exclusions=exclusions,
        rate_limiter=limiter,
        throttle_limit=settings.throttle_limit,
        throttle_window=settings.throttle_ttl_seconds,
        is_ready=lambda: state.ready,
        subscription_check=subscription_check,
    )
    origins = settings.cors_origins()
    any_origin = origins == ["*"]
    starlette = Starlette(
        routes=[
            *system_routes(),
            *session_routes(),
            *history_routes(),
            *message_routes(),
            *delegation_routes(),
            *routes,
            *(route for _, route in runtime.routes),
        ],
        middleware=[
            Middleware(RequestIdMiddleware),
            Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_credentials=not any_origin,
                allow_methods=CORS_METHODS,
                allow_headers=CORS_ALLOW_HEADERS,
                expose_headers=CORS_EXPOSE,
            ),
            Middleware(SecurityHeadersMiddleware),
            Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
            Middleware(
                ProtectionMiddleware, protection=protection, routes=_routes_of(lambda: starlette)
            ),
        ],
        lifespan=_lifespan(matrix),
        exception_handlers={
            HTTPError: handle_http_error,
            StorageUnavailableError: handle_storage_unavailable,
            404: handle_not_found,
            405: handle_method_not_allowed,
            HTTPException: _starlette_http_error,
        },
    )

    starlette.state.oracle = state
    # Plugin route handlers reach the runtime through core's route_context(request).
    setattr(starlette.state, ROUTE_RUNTIME_APP_STATE, runtime)
    # --- OpenAPI + offline Swagger UI (SRV-36): keep after every other route is added ---
    from oracle_server._http.docs_ui import mount_api_docs

    mount_api_docs(
        starlette,
        title=runtime.identity.name,
        description=runtime.identity.description,
        exclusions=exclusions,
        extra_routes=[*(("host", route) for route in routes), *runtime.routes],
        asset_base_url=environment.get("DOCS_ASSET_BASE_URL"),
    )
    # --- end OpenAPI ---
    # --- socket.io gateway (SRV-47): /socket.io/ in front of Starlette ---
    gateway.authenticator = authenticator
    oracle_app = OracleApp(
        state, gateway.asgi_app(starlette), skip_graceful_shutdown=skip_graceful_shutdown
    )
    oracle_app.gateway = gateway
    oracle_app.control_bus = control_bus
    # --- end socket.io gateway ---
    return oracle_app


def _lifespan(matrix: MatrixLayer | None) -> Callable[[Starlette], Any]:
    """Start the Matrix layer once the server loop runs; never wait for it (SRV-6)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if matrix is not None:
            matrix.start()
        yield

    return lifespan


def _routes_of(app: Callable[[], Starlette]) -> Callable[[], list[BaseRoute]]:
    """The app's route list, read when a request arrives (routes are added after wiring)."""
    return lambda: app().router.routes


async def _starlette_http_error(request: Any, exc: Exception) -> Any:
    from oracle_server._http.errors import error_response

    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return await handle_not_found(request, exc)
    if exc.status_code == 405:
        return await handle_method_not_allowed(request, exc)
    return error_response(exc.status_code, str(exc.detail))
