"""``create_runtime`` and ``OracleRuntime``: a booted set of plugins, ready to build agents."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from oracle_core._agent import AgentBuilder, BuiltAgent, TurnRequest
from oracle_core._agent_cache import AgentCache
from oracle_core._approval import ApprovalRequest
from oracle_core._boot import (
    BootedPlugin,
    apply_manifests,
    build_identity,
    check_capability_budget,
    declared_backends,
    enter_lifespans,
    warm_plugins,
)
from oracle_core._capabilities import meta_tools
from oracle_core._checkpoint import (
    SqliteCheckpointers,
    read_pending_approvals,
    read_thread_state,
)
from oracle_core._config import (
    ComposedConfig,
    CoreEnv,
    OracleConfig,
    compose_config,
    load_oracle_config,
)
from oracle_core._context import (
    OracleIdentity,
    PluginContext,
    RuntimeContext,
    SessionInfo,
    SharedState,
    UserInfo,
)
from oracle_core._discovery import discover_plugins
from oracle_core._errors import OracleBootError
from oracle_core._hookcall import MISSING, HookCaller
from oracle_core._hooks import MainAgentHooks
from oracle_core._kv import KeyValueService, SqliteKvBackend
from oracle_core._matrix import LocalMatrixService
from oracle_core._middleware.chain import fold_wrap_only
from oracle_core._plugin import OraclePlugin, check_plugin_object
from oracle_core._policy import ToolPolicy
from oracle_core._providers import ProviderLLM, check_provider
from oracle_core._registries import AuthExcludedRoute, Registries
from oracle_core._resolution import (
    BackendSelection,
    FailedPlugin,
    FeatureValue,
    PluginStatusChangeEvent,
    PluginStatusReport,
    check_features,
    dedupe_candidates,
    resolve,
)
from oracle_core._secrets import SqliteSecretsService
from oracle_core._services import (
    AmbientServices,
    InMemoryBlobStore,
    LoggingEventSink,
    PermissiveUcanService,
)
from oracle_core._session_events import SessionEvent
from oracle_core._state import MainAgentState
from oracle_core._tool_adapter import PluginToolAdapter
from oracle_core._tools import PluginTool
from oracle_core._toolset import UserToolset, tool_call_wrapper
from oracle_core._tracing import install_untraced_fast_path
from oracle_core._transports import LocalTurnTransport

__all__ = ["BootInputs", "OracleRuntime", "PluginsView", "boot_runtime", "create_runtime"]

DEFAULT_RECURSION_LIMIT = 50

ErrorHandler = Callable[[BaseException, str], Any]
StatusHandler = Callable[[PluginStatusChangeEvent], Any]


class PluginsView:
    """``runtime.plugins``: the status report and its events (CORE-31, 32)."""

    def __init__(self, runtime: OracleRuntime) -> None:
        self._runtime = runtime

    def status(self) -> PluginStatusReport:
        """A copy of the current status report."""
        rt = self._runtime
        return PluginStatusReport(
            loaded=[b.name for b in rt.booted],
            excluded=list(rt.excluded),
            soft_dep_gaps=list(rt.soft_dep_gaps),
            versions={b.name: b.plugin.version for b in rt.booted},
            failed=list(rt.failed),
            backends=dict(rt.backends),
        )

    def names(self) -> list[str]:
        """Included plugins in topological order."""
        return [b.name for b in self._runtime.booted]


@dataclass
class BootInputs:
    """Everything the boot pipeline reads (built by ``create_runtime``)."""

    config: OracleConfig
    features: Mapping[str, FeatureValue]
    plugins: Sequence[OraclePlugin]
    manifest_overrides: Mapping[str, Mapping[str, Any]]
    hooks: MainAgentHooks
    bundled_plugins: Sequence[OraclePlugin] | None
    discover_entry_points: bool
    strict_plugins: bool
    env: Mapping[str, str]
    services: AmbientServices | Callable[[CoreEnv], AmbientServices] | None
    check_llm: bool = True
    require_llm: bool = True


class OracleRuntime:
    """A booted runtime (CORE-96). Create it with ``create_runtime``; close it after use."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.plugins = PluginsView(self)
        self.booted: list[BootedPlugin] = []
        self.excluded: list[Any] = []
        self.soft_dep_gaps: list[Any] = []
        self.failed: list[FailedPlugin] = []
        self.backends: dict[str, str] = {}
        self.registries = Registries()
        self.routes: list[tuple[str, Any]] = []
        self.auth_excluded_routes: list[AuthExcludedRoute] = []
        self.recursion_limit = DEFAULT_RECURSION_LIMIT
        self.tier1_tokens_estimate = 0
        self._error_handlers: list[ErrorHandler] = []
        self._status_handlers: list[StatusHandler] = []
        self._stack = AsyncExitStack()
        self._closed = False
        self._adapters: dict[int, PluginToolAdapter] = {}
        self._builder = AgentBuilder(self)
        # The composed tool-call middleware of toolsets, made on first use.
        self._toolset_wrapper: Any = MISSING
        self.agent_cache = AgentCache()
        self.static_bindings: dict[str, Any] = {}
        self.meta_adapters = [
            PluginToolAdapter.from_plugin_tool(tool, owner=None, title=None)
            for tool in meta_tools()
        ]

    # -- attributes filled at boot (declared for type checkers) --
    oracle_config: OracleConfig
    composed: ComposedConfig
    identity: OracleIdentity
    hooks: MainAgentHooks
    ambient: AmbientServices
    caller: HookCaller
    always_plugins: frozenset[str]
    available_plugins: frozenset[str]
    plugin_middleware: list[Any]
    sub_agent_middleware: list[Any]
    """Plugin middleware that also run in every sub-agent (``reaches_sub_agents``)."""
    framework_middleware: list[Any]
    framework_chain: list[Any]
    tool_policy: ToolPolicy
    """The effective tool policy (``ORACLE_TOOL_POLICY``, else ``OracleConfig.tool_policy``)."""

    @property
    def config(self) -> Mapping[str, Any]:
        """The merged, validated environment (read-only)."""
        return self.composed.values

    @property
    def plugin_configs(self) -> Mapping[str, BaseModel | None]:
        """Each included plugin's ``config_schema`` instance."""
        return self.composed.plugin_configs

    # -- events ---------------------------------------------------------------------

    def on_error(self, handler: ErrorHandler) -> None:
        """Receive ``(exc, source)`` for background failures."""
        self._error_handlers.append(handler)

    def on_plugin_status_change(self, handler: StatusHandler) -> None:
        """Receive every ``PluginStatusChangeEvent``."""
        self._status_handlers.append(handler)

    def report_error(self, exc: BaseException, source: str) -> None:
        """Deliver a background failure to the handlers (logged when there are none)."""
        if not self._error_handlers:
            self.logger.error("background failure in %s", source, exc_info=exc)
            return
        for handler in self._error_handlers:
            try:
                handler(exc, source)
            except Exception:
                self.logger.exception("on_error handler failed")

    def emit_status_change(self, event: PluginStatusChangeEvent) -> None:
        """Deliver a status change to every handler; handler errors are logged."""
        for handler in self._status_handlers:
            try:
                handler(event)
            except Exception:
                self.logger.exception("on_plugin_status_change handler failed")

    # -- agents ---------------------------------------------------------------------

    def tool_adapter(
        self, owner: str, title: str, tool: PluginTool
    ) -> tuple[PluginToolAdapter, bool]:
        """The LangChain tool for a plugin tool, and whether it is the boot-time one.

        Boot-time tools are adapted once, at boot; request-time tools per build.
        """
        cached = self._adapters.get(id(tool))
        if cached is not None and cached.plugin_tool is tool:
            return cached, True
        return PluginToolAdapter.from_plugin_tool(tool, owner=owner, title=title), False

    def tool_policy_report(self) -> dict[str, Any]:
        """The effective tool policy: its rules, and what they decide for boot-time tools.

        ``denied`` and ``approval_required`` map each boot-time tool (and sub-agent
        wrapper) the policy touches to the rule that decided; request-time tools are
        decided the same way when a turn binds them. The meta-tools are outside it.
        """
        denied: dict[str, str] = {}
        approval: dict[str, str] = {}
        for entry in self.booted:
            named = [(t.name, t.effect) for t in entry.tools]
            named += [(s.tool_name, None) for s in entry.sub_agents]
            for name, effect in named:
                verdict = self.tool_policy.verdict(name, effect)
                if verdict.action == "deny":
                    denied[name] = verdict.rule or ""
                elif verdict.action == "approve":
                    approval[name] = verdict.rule or ""
        return {
            "rules": self.tool_policy.rules(),
            "denied": denied,
            "approval_required": approval,
        }

    def _framework_middleware(self) -> list[Any]:
        """The framework middleware, in order (CORE-76); shared by every compiled agent.

        They read per-turn data (tool index, system prompt, call counts) from the run
        context's ``TurnBindings``, so one instance serves concurrent turns.
        """
        from oracle_core._middleware import (
            CapabilityGateMiddleware,
            CurrentTimeMiddleware,
            EffectAwareToolRetryMiddleware,
            HistoryCondenserMiddleware,
            PageContextMiddleware,
            SafetyGuardrailMiddleware,
            ToolApprovalMiddleware,
            ToolPolicyMiddleware,
            ToolRepetitionGuardMiddleware,
            ToolValidationMiddleware,
        )

        meta = {a.name for a in self.meta_adapters}
        middleware: list[Any] = [
            ToolPolicyMiddleware(self.tool_policy, exempt=meta),
            CapabilityGateMiddleware(),
            ToolValidationMiddleware(self.hooks.validation_skip_tool_names),
            ToolRepetitionGuardMiddleware(),
            ToolApprovalMiddleware(self.tool_policy, exempt=meta),
            EffectAwareToolRetryMiddleware(),
        ]
        if self.hooks.get_room_title is not None:
            middleware.append(PageContextMiddleware(self.hooks.get_room_title))
        if self.hooks.safety_model is not None:
            middleware.append(SafetyGuardrailMiddleware(self.hooks.safety_model))
        # The condenser last: it measures the request as the framework shaped it.
        middleware.append(CurrentTimeMiddleware())
        windows = self.composed.core.context_windows()
        middleware.append(HistoryCondenserMiddleware(windows=windows))
        return middleware

    async def build_agent(self, turn: TurnRequest) -> BuiltAgent:
        """Build the main agent for one turn (CORE-83)."""
        if self._closed:
            raise RuntimeError("runtime is closed")
        return await self._builder.build(turn)

    async def user_toolset(self, turn: TurnRequest) -> UserToolset:
        """The tools a turn of ``turn.user`` would bind, to call one at a time outside a
        turn (plugins spec §20.4: the oracle's tools for other agents).

        Each ``UserToolset.call`` runs through the turn's tool-call middleware (policy,
        validation, repetition guard, retry, the plugins'); calls that need the user's
        approval are refused. ``turn.message`` is ignored; ``turn.state`` is the calls'
        state (no thread is read or written).
        """
        if self._closed:
            raise RuntimeError("runtime is closed")
        if self._toolset_wrapper is MISSING:
            self._toolset_wrapper = tool_call_wrapper(
                self.framework_middleware, self.plugin_middleware
            )
        return await self._builder.toolset(turn, self._toolset_wrapper)

    def request_context(
        self,
        user: UserInfo,
        *,
        plugin: str | None = None,
        session: SessionInfo | None = None,
    ) -> RuntimeContext[Any]:
        """A ``RuntimeContext`` for ``user`` outside a turn (plugin routes, jobs).

        The same services a turn gets (secrets, blob store, Matrix, UCAN scoped to
        ``user``; models; shared state; events), over an empty thread: ``history`` is
        empty and ``loaded_plugins`` holds the ``always`` plugins. Plugin route handlers
        get one through ``route_context(request)``. Like a turn's, it must not be kept.

        Args:
            user: The authenticated user.
            plugin: Scope it to this plugin (its logger and ``plugin_config``).
            session: The session, when there is one; default ``SessionInfo(id="")``.
        """
        if self._closed:
            raise RuntimeError("runtime is closed")
        turn = TurnRequest(user=user, session=session or SessionInfo(id=""))
        shared = SharedState(self.registries.shared_state, None, self.logger)
        ctx = self._builder._base_context(turn, {}, self.always_plugins, shared)
        return ctx.for_plugin(plugin) if plugin else ctx

    async def session_event(self, event: SessionEvent, *, hook_seconds: float = 10.0) -> None:
        """Tell every plugin implementing ``on_session_event`` about ``event``.

        The hooks run concurrently, each with a context of the event's user and session
        scoped to it; one that raises or outlasts ``hook_seconds`` is logged (the code
        only, never the session's content) and the others go on.
        """
        if self._closed:
            return
        names = [b.name for b in self.booted if self.caller.implements(b.name, "on_session_event")]
        if not names:
            return
        ctx = self.request_context(
            UserInfo(did=event.user_did), session=SessionInfo(id=event.session_id)
        )

        async def run(name: str) -> None:
            try:
                await asyncio.wait_for(
                    self.caller.call(
                        name, "on_session_event", event=event, rt_ctx=ctx.for_plugin(name)
                    ),
                    hook_seconds,
                )
            except Exception as exc:
                self.logger.warning(
                    "session.event_hook_failed: %s of %s: %s", event.kind, name, type(exc).__name__
                )

        await asyncio.gather(*(run(name) for name in names))

    async def run_turn(self, turn: TurnRequest) -> dict[str, Any]:
        """Build and invoke the agent for ``turn``; returns the final state."""
        built = await self.build_agent(turn)
        result: dict[str, Any] = await built.agent.ainvoke(
            built.input, config=built.config, context=built.context
        )
        return result

    async def thread_messages(self, user_did: str, thread_id: str) -> list[BaseMessage]:
        """Messages of a thread from the user's checkpointer (empty when none)."""
        assert self.hooks.checkpointer_for_user is not None
        saver = await self.hooks.checkpointer_for_user(user_did)
        state = await read_thread_state(saver, thread_id)
        return list(state.get("messages", []))

    async def rollback_last_turn(self, user_did: str, thread_id: str) -> bool:
        """Put the thread back as it was before its latest turn started (the double-
        texting policy ``rollback``): whatever that turn checkpointed is discarded.

        The turn's start is the newest checkpoint written for an input; the state before
        it is copied forward as the thread's newest checkpoint (LangGraph's ``__copy__``
        update), so earlier history stays readable. A thread whose first turn it was is
        deleted. ``False`` when the thread has no turn to roll back. Only the main
        thread is rewound: sub-agents' threads keep what they wrote.
        """
        from langgraph.graph import START, StateGraph

        assert self.hooks.checkpointer_for_user is not None
        saver = await self.hooks.checkpointer_for_user(user_did)
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        started = None
        async for item in saver.alist(config):
            if (item.metadata or {}).get("source") == "input":
                started = item
                break
        if started is None:
            return False
        if started.parent_config is None:
            await saver.adelete_thread(thread_id)
            return True
        graph: Any = StateGraph(MainAgentState)
        graph.add_node("rewind", lambda state: {})
        graph.add_edge(START, "rewind")
        await graph.compile(checkpointer=saver).aupdate_state(
            started.parent_config, None, as_node="__copy__"
        )
        return True

    async def pending_approvals(self, user_did: str, thread_id: str) -> list[ApprovalRequest]:
        """The tool calls a thread is paused on for the user's approval (plugins spec
        §20.2), from the user's checkpointer: resume with ``TurnRequest(resume=...)``."""
        assert self.hooks.checkpointer_for_user is not None
        saver = await self.hooks.checkpointer_for_user(user_did)
        return await read_pending_approvals(saver, thread_id)

    # -- lifecycle ------------------------------------------------------------------

    async def aclose(self) -> None:
        """Exit plugin lifespans in reverse order, close local checkpointers and the models'
        HTTP connections."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._stack.aclose()
        except Exception:
            self.logger.exception("error while shutting down plugin lifespans")

    async def __aenter__(self) -> OracleRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- boot -----------------------------------------------------------------------

    async def _boot(self, inputs: BootInputs) -> None:
        logger = self.logger
        install_untraced_fast_path()
        self.oracle_config = inputs.config
        ordered, backend_env = await self._resolve_plugins(inputs)
        self.booted = apply_manifests(ordered, inputs.manifest_overrides, logger)
        # The embedded backends chosen for plugins reach them through their own variables.
        self.composed = compose_config(
            {**inputs.env, **backend_env},
            [(b.name, b.plugin.config_schema) for b in self.booted],
            logger,
        )
        if inputs.check_llm:
            self._check_llm_provider(require=inputs.require_llm)
        self.identity = build_identity(inputs.config, self.composed)
        self.tool_policy = self.composed.core.tool_policy(inputs.config.tool_policy)
        services = inputs.services
        if services is not None and not callable(services):
            self.ambient = services  # built by the caller, who closes it
        else:
            self.ambient = services(self.composed.core) if services else self._local_services()
            # Plugin lifespans, entered after, exit before the models lose their connections.
            close_llm = getattr(self.ambient.llm, "aclose", None)
            if close_llm is not None:
                self._stack.push_async_callback(close_llm)
        if self.ambient.transport is None:
            self.ambient.transport = LocalTurnTransport(self)
        self.hooks = inputs.hooks.merged_over(self._default_hooks())
        self.available_plugins = frozenset(b.name for b in self.booted)
        self.always_plugins = frozenset(
            b.name for b in self.booted if b.manifest.visibility == "always"
        )
        self._attach_plugin_contexts()
        if self.composed.core.is_local:
            logger.info("ORACLE_BACKEND=local: UCAN capability checks are permissive")

        await enter_lifespans(self._stack, self.booted, self.caller)
        self.routes, self.auth_excluded_routes = await warm_plugins(
            self.booted, self.caller, self.registries, logger
        )
        self.registries.freeze()
        self._adapt_boot_tools()
        self.plugin_middleware = [m for b in self.booted for m in b.middlewares]
        self.sub_agent_middleware = [m for b in self.booted for m in b.sub_agent_middlewares]
        self.framework_middleware = self._framework_middleware()
        self.framework_chain = fold_wrap_only(self.framework_middleware)
        self.tier1_tokens_estimate = check_capability_budget(self.booted, logger)
        logger.info(
            "oracle '%s' booted: loaded %s; excluded %s",
            self.identity.name,
            ", ".join(b.name for b in self.booted) or "(none)",
            ", ".join(f"{e.plugin} ({e.code})" for e in self.excluded) or "(none)",
        )

    async def _resolve_plugins(
        self, inputs: BootInputs
    ) -> tuple[list[OraclePlugin], dict[str, str]]:
        """The included plugins in topological order (the others leave the hook caller),
        and the backend variables the runtime sets for them."""
        candidates = self._collect(inputs)
        check_features(inputs.features, [p.name for p in candidates], self.logger)
        active = [p for p in candidates if inputs.features.get(p.name) is not False]
        self.caller = HookCaller(active)
        detected = await self._auto_detect(active, inputs.env)
        selection = BackendSelection(
            declared=declared_backends(candidates, inputs.manifest_overrides),
            env=inputs.env,
            local=(inputs.env.get("ORACLE_BACKEND") or "").strip() == "local",
        )
        resolution = resolve(
            candidates, inputs.features, lambda p: detected.get(p.name), self.logger, selection
        )
        self.excluded, self.soft_dep_gaps = resolution.excluded, resolution.soft_dep_gaps
        self.backends = resolution.backends
        for plugin in active:
            if plugin not in resolution.ordered:
                self.caller.unregister(plugin.name)
        return resolution.ordered, resolution.backend_env

    async def _auto_detect(
        self, active: Sequence[OraclePlugin], env: Mapping[str, str]
    ) -> dict[str, bool]:
        """Each ``auto_detect`` answer by plugin name; plugins without the hook are absent."""
        detected: dict[str, bool] = {}
        for plugin in active:
            try:
                result = await self.caller.call(plugin.name, "auto_detect", env=env)
            except Exception as exc:
                raise OracleBootError(
                    f"auto_detect of plugin '{plugin.name}' raised {type(exc).__name__}: {exc}",
                    code="boot.plugin.invalid",
                    hint="auto_detect must return True or False without raising",
                ) from exc
            if result is not MISSING:
                detected[plugin.name] = bool(result)
        return detected

    def _check_llm_provider(self, *, require: bool) -> None:
        try:
            check_provider(self.composed.core)
        except OracleBootError as exc:
            if require:
                raise
            # Serving without a model: every turn fails with this same message.
            self.logger.warning("%s: %s; turns will fail until it is set", exc.code, exc)

    def _attach_plugin_contexts(self) -> None:
        for entry in self.booted:
            entry.ctx = PluginContext(
                config=self.config,
                plugin_config=self.plugin_configs.get(entry.name),
                identity=self.identity,
                available_plugins=self.available_plugins,
                logger=self.logger.getChild(f"plugin.{entry.name}"),
                plugin_name=entry.name,
                transport=self.ambient.transport,
            )

    def _adapt_boot_tools(self) -> None:
        # Boot-time tools are adapted once here; tool_adapter finds them by identity.
        for entry in self.booted:
            for tool in entry.tools:
                self._adapters[id(tool)] = PluginToolAdapter.from_plugin_tool(
                    tool, owner=entry.name, title=entry.manifest.title
                )

    def _collect(self, inputs: BootInputs) -> list[OraclePlugin]:
        user = [check_plugin_object(p, source="plugins=") for p in inputs.plugins]
        if inputs.bundled_plugins is not None:
            discovered = [check_plugin_object(p) for p in inputs.bundled_plugins]
        elif inputs.discover_entry_points:
            discovery = discover_plugins(
                inputs.features, strict=inputs.strict_plugins, logger=self.logger
            )
            discovered, self.failed = discovery.plugins, discovery.failed
        else:
            discovered = []
        return dedupe_candidates(discovered, user)

    def _local_services(self) -> AmbientServices:
        core = self.composed.core
        kv = KeyValueService(SqliteKvBackend(os.path.join(core.sqlite_path, "plugin_kv.db")))
        self._stack.push_async_callback(kv.aclose)
        matrix = LocalMatrixService(Path(core.sqlite_path) / "matrix.db")
        self._stack.push_async_callback(matrix.aclose)
        secrets = SqliteSecretsService(Path(core.sqlite_path) / "user_secrets.db")
        self._stack.push_async_callback(secrets.aclose)
        return AmbientServices(
            secrets=secrets,
            blob_store=InMemoryBlobStore(),
            matrix=matrix,
            ucan=PermissiveUcanService(),
            events=LoggingEventSink(self.logger.getChild("events")),
            llm=ProviderLLM(core),
            kv=kv,
        )

    def _default_hooks(self) -> MainAgentHooks:
        path = self.composed.core.sqlite_path
        savers = SqliteCheckpointers(os.path.join(path, "checkpoints"))
        self._stack.push_async_callback(savers.aclose)
        return MainAgentHooks(checkpointer_for_user=savers)


async def create_runtime(
    config: OracleConfig | Mapping[str, Any] | None,
    *,
    features: Mapping[str, FeatureValue] | None = None,
    plugins: Sequence[OraclePlugin] = (),
    manifest_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    hooks: MainAgentHooks | None = None,
    bundled_plugins: Sequence[OraclePlugin] | None = None,
    discover_entry_points: bool = True,
    strict_plugins: bool = False,
    env: Mapping[str, str] | None = None,
    logger: logging.Logger | None = None,
    services: AmbientServices | Callable[[CoreEnv], AmbientServices] | None = None,
    require_llm: bool = True,
) -> OracleRuntime:
    """Boot a runtime (CORE-94, 95). It must be closed: ``await runtime.aclose()``.

    Args:
        config: The oracle's identity (``OracleConfig`` or a mapping).
        features: Plugin toggles: ``True``, ``False`` or ``"auto"`` (default).
        plugins: Your plugins; an instance replaces a discovered plugin of the same name.
        manifest_overrides: Partial manifests by plugin name.
        hooks: Host hooks (``MainAgentHooks``).
        bundled_plugins: Use these instead of entry-point discovery (tests).
        discover_entry_points: Load ``oracle.plugins`` entry points.
        strict_plugins: Fail boot on a broken entry point instead of skipping it.
        env: Environment to validate instead of ``os.environ``.
        logger: Base logger (default ``oracle``).
        services: Ambient services to use instead of the local ones, or a factory given
            the validated Tier-0 environment (the server passes its own). Services the
            runtime builds (the local ones, or the factory's) close with it: an ``llm``
            with an ``aclose`` method is awaited by ``aclose``; services passed built
            are left to the caller.
        require_llm: With ``False``, missing provider variables are logged instead of
            failing boot, and each turn fails with the message naming them.

    Raises:
        OracleBootError: with a ``boot.*`` code; lifespans already entered are exited.
    """
    log = logger or logging.getLogger("oracle")
    return await boot_runtime(
        log,
        lambda: BootInputs(
            config=load_oracle_config(config),
            features=dict(features or {}),
            plugins=list(plugins),
            manifest_overrides=dict(manifest_overrides or {}),
            hooks=hooks or MainAgentHooks(),
            bundled_plugins=bundled_plugins,
            discover_entry_points=discover_entry_points,
            strict_plugins=strict_plugins,
            env=dict(os.environ if env is None else env),
            services=services,
            require_llm=require_llm,
        ),
    )


async def boot_runtime(logger: logging.Logger, inputs: Callable[[], BootInputs]) -> OracleRuntime:
    """Run the boot pipeline; on failure close what was opened, log and re-raise."""
    runtime = OracleRuntime(logger)
    try:
        await runtime._boot(inputs())
    except BaseException as exc:
        await runtime.aclose()
        if isinstance(exc, OracleBootError):
            logger.error("[boot-error] %s: %s", exc.code, exc)
        raise
    return runtime
