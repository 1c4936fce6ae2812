"""The per-request agent build (CORE-83): tools, prompt, middleware, ``create_agent``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from oracle_core._agent_prompt import PromptParts, compose_turn_prompt
from oracle_core._boot import loadable_manifests
from oracle_core._capabilities import CapabilityCatalog, CatalogEntry, ToolView
from oracle_core._checkpoint import PrimedCheckpointer, read_thread_state
from oracle_core._context import (
    AbortSignal,
    Emitter,
    History,
    OracleRunContext,
    RuntimeContext,
    SessionInfo,
    SharedState,
    TurnBindings,
    UserInfo,
    _Scope,
)
from oracle_core._frontend import LoggedFrontend
from oracle_core._hookcall import MISSING
from oracle_core._hooks import RouterInput
from oracle_core._prompt import (
    SystemPrompt,
    date_line,
    time_line,
)
from oracle_core._providers import context_window
from oracle_core._state import TURN_STATE_KEYS, MainAgentState, ReadonlyState, apply_updates
from oracle_core._subagents import SubAgentToolAdapter, resolve_sub_agent
from oracle_core._tool_names import ToolNames
from oracle_core._tools import PluginSubAgent, PluginTool, ToolInfo
from oracle_core._toolset import UserToolset

if TYPE_CHECKING:
    from oracle_core._boot import BootedPlugin
    from oracle_core._runtime import OracleRuntime

__all__ = ["BuiltAgent", "TurnRequest"]


@dataclass(frozen=True)
class TurnRequest:
    """One user turn as the server hands it to the runtime.

    Attributes:
        user: The authenticated user.
        session: The session (thread) of the turn.
        message: The user's message (text or a message); ``None`` continues the thread.
        state: Server-supplied state for the turn (``browser_tools``, ``ag_actions``,
            ``editor_room_id``, …); it wins over plugin turn state.
        abort_signal: Set by the server when the client goes away.
        resume: Answers to the thread's pending interrupts, by interrupt id (an approval's
            ``ApprovalAnswer`` as plain data): the turn resumes the paused run instead of
            starting from a message, and ``message`` must be ``None``.
        model: A model id for this turn's main agent; ``None`` keeps the ``main`` role's
            model. It is passed as ``model=`` to ``hooks.resolve_model`` when set, else to
            the provider, which keeps the role's settings (endpoint, key, extras). Only the
            main agent changes: sub-agents and the other roles keep their models. The
            caller checks the id (the server against ``GET /models``); a hook or model
            accessor that ignores ``model=``, like the test runtime's injected models,
            keeps serving its own model.
    """

    user: UserInfo
    session: SessionInfo
    message: str | BaseMessage | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    abort_signal: AbortSignal | None = None
    model: str | None = None
    resume: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.resume is not None and self.message is not None:
            raise ValueError("a turn resumes a paused run or sends a message, not both")

    def message_text(self) -> str:
        """Text of the user's message ('' when none)."""
        if self.message is None:
            return ""
        if isinstance(self.message, str):
            return self.message
        return str(self.message.text)


@dataclass
class PluginBinding:
    """One plugin's bound tools for a build: adapters, which are static, infos, catalog."""

    adapters: list[Any] = field(default_factory=list)
    static_ids: set[int] = field(default_factory=set)
    infos: dict[str, ToolInfo] = field(default_factory=dict)
    entry: CatalogEntry = field(default=None)  # type: ignore[assignment]
    capability_entries: dict[str, CatalogEntry] = field(default_factory=dict)
    """The catalog entries of the plugin's declared capabilities."""


@dataclass
class BuiltAgent:
    """Everything needed to run one turn.

    Attributes:
        agent: The compiled LangGraph agent.
        input: The invocation input: the user message plus turn state, or the
            ``Command`` that resumes a paused run.
        context: The ``OracleRunContext`` to pass as ``context=``.
        config: ``RunnableConfig`` with ``thread_id = session.id``.
        prompt: The composed system prompt and its sections.
        tools: The LangChain tools bound to the agent.
        tool_infos: Every bound tool, by name.
        degraded: ``(plugin, what failed)`` for this build.
        preloaded_plugins: Plugins the capability router preloaded for this turn.
    """

    agent: Any
    input: Any  # dict[str, Any], or Command[Any] for a resume
    context: OracleRunContext
    config: RunnableConfig
    prompt: SystemPrompt
    tools: list[Any]
    tool_infos: dict[str, ToolInfo]
    degraded: list[tuple[str, str]]
    preloaded_plugins: frozenset[str]


async def _load_snapshot(saver: Any, thread_id: str, logger: logging.Logger) -> dict[str, Any]:
    try:
        return await read_thread_state(saver, thread_id)
    except Exception:
        logger.exception("checkpoint read failed; the turn runs on empty state")
        return {}


_DEGRADED_LABELS = {
    "get_request_tools": "request tools",
    "get_request_sub_agents": "request sub-agents",
}


def _contribution(
    got: Mapping[str, Any],
    hook: str,
    plugin: str,
    degraded: list[tuple[str, str]],
    logger: logging.Logger,
) -> list[Any]:
    """A request-time hook's result for one plugin; a failure is logged and degrades it."""
    result = got.get(hook, MISSING)
    if isinstance(result, BaseException):
        logger.error("%s of plugin '%s' failed: %s", hook, plugin, result, exc_info=result)
        degraded.append((plugin, _DEGRADED_LABELS[hook]))
        return []
    return [] if result is MISSING or not result else list(result)


_REQUEST_HOOKS = ("get_request_tools", "get_request_sub_agents", "get_prompt_blocks")


class AgentBuilder:
    """Builds the main agent for one request from a booted runtime."""

    def __init__(self, runtime: OracleRuntime) -> None:
        self.rt = runtime

    def _base_context(
        self,
        turn: TurnRequest,
        state: Mapping[str, Any],
        always: frozenset[str],
        shared: SharedState,
    ) -> RuntimeContext[Any]:
        rt = self.rt
        services = rt.ambient
        view = ReadonlyState(state)
        matrix = services.matrix.for_user(turn.user)
        ctx: RuntimeContext[Any] = RuntimeContext(
            config=rt.config,
            plugin_config=None,
            identity=rt.identity,
            available_plugins=rt.available_plugins,
            logger=rt.logger,
            user=turn.user,
            session=turn.session,
            history=History(view.messages, view),
            loaded_plugins=view.loaded_plugins | always,
            secrets=services.secrets.for_user(turn.user),
            blob_store=services.blob_store,
            matrix=matrix,
            frontend=LoggedFrontend(
                services.frontend.for_session(turn.user, turn.session), matrix, turn.session
            ),
            kv=None if services.kv is None else services.kv.for_user(turn.user),
            transport=services.transport,
            ucan=services.ucan.for_user(turn.user),
            llm=services.llm,
            emit=Emitter(services.events, turn.session, turn.user.did),
            shared=shared,
            abort_signal=turn.abort_signal or AbortSignal(),
            tool_policy=rt.tool_policy,
            _scope=_Scope(rt.plugin_configs, rt.logger),
        )
        return ctx.with_state(state)

    async def _route(
        self, turn: TurnRequest, loaded: frozenset[str], ctx: RuntimeContext[Any]
    ) -> frozenset[str]:
        router = self.rt.hooks.capability_router
        if router is None:
            return frozenset()
        on_demand = {
            name: manifest
            for name, manifest in loadable_manifests(self.rt.booted)
            if manifest.visibility == "on-demand" and name not in loaded
        }
        text = turn.message_text()
        if not on_demand or not text:
            return frozenset()
        try:
            names = list(await router(RouterInput(text, loaded, on_demand)))
        except Exception:
            self.rt.logger.exception("capability router failed; no plugins preloaded")
            return frozenset()
        chosen = [n for n in dict.fromkeys(names) if n in on_demand]
        ignored = [n for n in names if n not in on_demand]
        if ignored:
            self.rt.logger.warning(
                "capability router returned names that are not loadable on-demand capabilities: %s",
                ", ".join(ignored),
            )
        if chosen and ctx.emit is not None:
            ctx.emit.router({"preloaded": chosen})
        return frozenset(chosen)

    async def _turn_state(self, ctx: RuntimeContext[Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for entry in self.rt.booted:
            if not self.rt.caller.implements(entry.name, "get_turn_state"):
                continue
            try:
                values = await self.rt.caller.call(
                    entry.name, "get_turn_state", rt_ctx=ctx.for_plugin(entry.name)
                )
            except Exception:
                ctx.logger.exception("get_turn_state of plugin '%s' failed", entry.name)
                continue
            for key, value in dict(values or {}).items():
                if key in TURN_STATE_KEYS:
                    merged[key] = value
                else:
                    ctx.logger.warning(
                        "plugin '%s' get_turn_state returned key '%s', which plugins may not "
                        "set; dropped",
                        entry.name,
                        key,
                    )
        return merged

    async def _request_contributions(
        self,
        ctx: RuntimeContext[Any],
        hooks: tuple[str, ...] = _REQUEST_HOOKS,
    ) -> dict[str, dict[str, Any]]:
        calls: list[tuple[str, str]] = [
            (b.name, hook)
            for b in self.rt.booted
            for hook in hooks
            if self.rt.caller.implements(b.name, hook)
        ]

        async def run(plugin: str, hook: str) -> Any:
            return await self.rt.caller.call(plugin, hook, rt_ctx=ctx.for_plugin(plugin))

        results = await asyncio.gather(*(run(p, h) for p, h in calls), return_exceptions=True)
        out: dict[str, dict[str, Any]] = {}
        for (plugin, hook), result in zip(calls, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            out.setdefault(plugin, {})[hook] = result
        return out

    async def build(self, turn: TurnRequest) -> BuiltAgent:
        """Build the agent for ``turn`` (CORE-83 steps 1-9)."""
        from langchain.agents import create_agent

        rt = self.rt
        logger = rt.logger
        saver = await rt.hooks.checkpointer_for_user(turn.user.did)  # type: ignore[misc]
        # The agent's own load of the thread is served from this read (one decode).
        turn_saver = PrimedCheckpointer(saver)
        snapshot = await _load_snapshot(turn_saver, turn.session.id, logger)
        always = rt.always_plugins
        shared = SharedState(rt.registries.shared_state, None, logger)
        server_state = {k: v for k, v in turn.state.items() if k != "messages"}
        base_state = apply_updates(snapshot, server_state) if server_state else snapshot
        ctx = self._base_context(turn, base_state, always, shared)
        thread_loaded = ctx.history.state.loaded_plugins
        preloaded = await self._route(turn, thread_loaded, ctx)

        # Server-supplied keys win over plugin turn state (CORE-53).
        turn_state = {**await self._turn_state(ctx), **server_state}
        if turn_state:
            ctx = ctx.with_state(apply_updates(snapshot, turn_state))

        # What request-time hooks report with `rt_ctx.report_degraded` lands here.
        degraded: list[tuple[str, str]] = []
        contributions = await self._request_contributions(
            dataclasses.replace(ctx, _degraded=degraded)
        )
        # One reading of the clock per build: the prompt's date and the time note agree.
        now = rt.hooks.clock() if rt.hooks.clock is not None else datetime.now(UTC)
        tools, static_ids, infos, catalog = self._assemble(
            ctx, contributions, degraded, saver, preloaded, now
        )
        prompt = await compose_turn_prompt(
            rt, ctx, PromptParts(thread_loaded, contributions, degraded, now)
        )
        # A selected model replaces the role's model id only, so the provider's settings
        # for ``main`` stay; without one the call is exactly ``resolve_model("main")``.
        selected: dict[str, Any] = {} if turn.model is None else {"model": turn.model}
        model = (
            rt.hooks.resolve_model("main", **selected)
            if rt.hooks.resolve_model is not None
            else rt.ambient.llm.get("main", **selected)
        )
        static = [(i, t) for i, t in enumerate(tools) if id(t) in static_ids]
        per_turn = [(i, t) for i, t in enumerate(tools) if id(t) not in static_ids]

        def compile_agent(model: Any, bound: list[Any]) -> Any:
            return create_agent(
                model,
                bound,
                middleware=[*rt.framework_chain, *rt.plugin_middleware],
                state_schema=MainAgentState,
                context_schema=OracleRunContext,
                name="oracle-main",
            )

        shared_agent = rt.agent_cache.get_or_compile(model, static, per_turn, compile_agent)
        agent = shared_agent.copy(update={"checkpointer": turn_saver})
        bindings = TurnBindings(
            system_prompt=prompt.text,
            tool_infos=infos,
            tools={t.name: t for _, t in per_turn},
            catalog=catalog,
            current_time=time_line(turn.user.timezone, turn.user.current_time, now),
            context_window=context_window("main", model, rt.composed.core.context_windows()),
        )
        context = OracleRunContext.of(ctx, bindings, preloaded)
        agent_input: dict[str, Any] = {
            "config": {"did": turn.user.did, "ws_id": turn.session.ws_id},
            "client": turn.session.client,
            **turn_state,
        }
        if turn.message is not None:
            message = turn.message
            agent_input["messages"] = [
                HumanMessage(content=message) if isinstance(message, str) else message
            ]
        if turn.resume is not None:
            agent_input = Command(resume=dict(turn.resume))  # type: ignore[assignment]
        config: RunnableConfig = {
            "configurable": {"thread_id": turn.session.id},
            "recursion_limit": rt.recursion_limit,
        }
        return BuiltAgent(
            agent=agent,
            input=agent_input,
            context=context,
            config=config,
            prompt=prompt,
            tools=tools,
            tool_infos=infos,
            degraded=degraded,
            preloaded_plugins=preloaded,
        )

    async def toolset(self, turn: TurnRequest, wrapper: Any) -> UserToolset:
        """The tools ``turn`` would bind, to call one at a time (``_toolset``).

        The build of a turn without its thread, prompt and model: every capability counts
        as loaded, plugins' turn state and request-time tools and sub-agents are asked
        for as on a turn, and the tool policy applies alike.
        """
        rt = self.rt
        saver = await rt.hooks.checkpointer_for_user(turn.user.did)  # type: ignore[misc]
        every = {name for name, _ in loadable_manifests(rt.booted)}
        state = {**turn.state, "loaded_plugins": sorted(every)}
        shared = SharedState(rt.registries.shared_state, None, rt.logger)
        ctx = self._base_context(turn, state, rt.always_plugins, shared)
        turn_state = {**await self._turn_state(ctx), **state}
        ctx = ctx.with_state(turn_state)
        degraded: list[tuple[str, str]] = []
        contributions = await self._request_contributions(
            dataclasses.replace(ctx, _degraded=degraded),
            _REQUEST_HOOKS[:2],
        )
        now = rt.hooks.clock() if rt.hooks.clock is not None else datetime.now(UTC)
        tools, _, infos, _ = self._assemble(ctx, contributions, degraded, saver, frozenset(), now)
        meta = {id(adapter) for adapter in rt.meta_adapters}
        return UserToolset(
            ctx,
            [tool for tool in tools if id(tool) not in meta],
            infos,
            rt.tool_policy,
            wrapper,
            degraded,
        )

    def _assemble(
        self,
        ctx: RuntimeContext[Any],
        contributions: Mapping[str, Mapping[str, Any]],
        degraded: list[tuple[str, str]],
        saver: Any,
        preloaded: frozenset[str],
        now: datetime,
    ) -> tuple[list[Any], set[int], dict[str, ToolInfo], CapabilityCatalog]:
        """Meta-tools, then per plugin: boot, request and sub-agent tools (CORE-83 step 6).

        A plugin with no sub-agents and no request-time hooks binds the same tools every
        turn; its binding is computed once and reused.
        """
        rt = self.rt
        # Boot-time names are claimed first: a request-time tool never displaces one,
        # whatever the plugin order (CORE-41: boot-time before request-time).
        names = ToolNames(
            (
                (name, entry.name)
                for entry in rt.booted
                for name in (
                    *(t.name for t in entry.tools),
                    *(s.tool_name for s in entry.sub_agents),
                )
            ),
            contributions,
            rt.logger,
            ctx.emit,
        )
        bound: list[Any] = list(rt.meta_adapters)
        static_ids = {id(a) for a in rt.meta_adapters}
        infos = {a.name: ToolInfo(name=a.name, owner=None, visibility="always") for a in bound}
        entries: dict[str, CatalogEntry] = {}
        for entry in rt.booted:
            degraded.extend((entry.name, failure) for failure in entry.boot_failures)
            binding = rt.static_bindings.get(entry.name)
            if binding is None:
                binding = self._bind_dynamic(
                    entry, ctx, contributions, degraded, (saver, names, now)
                )
                if self._is_static(entry):
                    rt.static_bindings[entry.name] = binding
            bound.extend(binding.adapters)
            static_ids |= binding.static_ids
            infos.update(binding.infos)
            entries[entry.name] = binding.entry
            entries.update(binding.capability_entries)
        return bound, static_ids, infos, CapabilityCatalog(entries=entries, preloaded=preloaded)

    def _is_static(self, entry: BootedPlugin) -> bool:
        caller = self.rt.caller
        return not entry.sub_agents and not any(
            caller.implements(entry.name, hook)
            for hook in ("get_request_tools", "get_request_sub_agents")
        )

    def _bind_dynamic(
        self,
        entry: BootedPlugin,
        ctx: RuntimeContext[Any],
        contributions: Mapping[str, Mapping[str, Any]],
        degraded: list[tuple[str, str]],
        build: tuple[Any, ToolNames, datetime],
    ) -> PluginBinding:
        """``build`` is the build's checkpointer, tool names and clock reading."""
        rt = self.rt
        saver, names, now = build
        logger = rt.logger
        got = contributions.get(entry.name, {})
        plugin_tools: list[PluginTool] = list(entry.tools)
        subs: list[PluginSubAgent] = list(entry.sub_agents)
        for tool in _contribution(got, "get_request_tools", entry.name, degraded, logger):
            if names.claim_tool(tool, entry.name):
                plugin_tools.append(tool)
        for sub in _contribution(got, "get_request_sub_agents", entry.name, degraded, logger):
            if names.claim(sub.tool_name, entry.name):
                subs.append(sub)
        adapters: list[SubAgentToolAdapter] = []
        if subs:
            scoped = ctx.for_plugin(entry.name)
            user = ctx.user
            stamp = time_line(user.timezone, user.current_time, now)
            day = date_line(user.timezone, user.current_time, now)
            for spec in subs:
                if rt.tool_policy.denies(spec.tool_name):
                    continue  # never bound, like a denied tool (§20.1)
                try:
                    resolved = resolve_sub_agent(spec, entry.name, scoped)
                except Exception:
                    logger.exception(
                        "sub-agent '%s' of plugin '%s' failed to initialise", spec.name, entry.name
                    )
                    degraded.append((entry.name, f"sub-agent {spec.name}"))
                    continue
                adapters.append(
                    SubAgentToolAdapter.build(
                        resolved,
                        title=entry.manifest.title,
                        checkpointer=saver,
                        time_line=stamp,
                        date_line=day,
                        windows=rt.composed.core.context_windows(),
                        logger=logger,
                        shared_middleware=rt.sub_agent_middleware,
                    )
                )
        return self._binding(entry, plugin_tools, adapters)

    def _binding(
        self,
        entry: BootedPlugin,
        plugin_tools: list[PluginTool],
        sub_adapters: list[SubAgentToolAdapter],
    ) -> PluginBinding:
        binding = PluginBinding()
        declared = {c.name: c for c in entry.capabilities}
        # The plugin's own tools under "", then each declared capability's.
        views: dict[str, list[ToolView]] = {"": [], **{name: [] for name in declared}}
        on_demand: dict[str, bool] = dict.fromkeys(views, False)
        policy = self.rt.tool_policy
        for tool in plugin_tools:
            if policy.denies(tool.name):
                continue  # never bound: the model never sees it (§20.1)
            capability = tool.capability if tool.capability in declared else None
            if tool.capability is not None and capability is None:
                self.rt.logger.warning(
                    "tool '%s' of plugin '%s' names the capability '%s', which the plugin "
                    "does not declare; it is bound as the plugin's own",
                    tool.name,
                    entry.name,
                    tool.capability,
                )
            key = capability or ""
            adapter, is_static = self.rt.tool_adapter(entry.name, entry.manifest.title, tool)
            binding.adapters.append(adapter)
            if is_static:
                binding.static_ids.add(id(adapter))
            home = declared[capability].manifest if capability else entry.manifest
            vis = tool.visibility or home.visibility
            on_demand[key] |= vis == "on-demand"
            binding.infos[tool.name] = ToolInfo(
                name=tool.name,
                owner=entry.name,
                visibility=vis,
                effect=tool.effect,
                capability=capability,
            )
            views[key].append(ToolView(tool.name, adapter.description, tool.effect))
        for sub in sub_adapters:
            spec = sub.resolved.spec
            binding.adapters.append(sub)
            vis = spec.visibility or entry.manifest.visibility
            on_demand[""] |= vis == "on-demand"
            binding.infos[sub.name] = ToolInfo(name=sub.name, owner=entry.name, visibility=vis)
            views[""].append(ToolView(sub.name, sub.description))
        binding.entry = CatalogEntry(
            name=entry.name,
            manifest=entry.manifest,
            operating_guide=entry.plugin.operating_guide,
            tools=tuple(views[""]),
            has_on_demand_tools=on_demand[""],
        )
        binding.capability_entries = {
            name: CatalogEntry(
                name=name,
                manifest=capability.manifest,
                operating_guide=capability.operating_guide,
                tools=tuple(views[name]),
                has_on_demand_tools=on_demand[name],
            )
            for name, capability in declared.items()
        }
        return binding
