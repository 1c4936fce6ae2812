"""Contexts handed to plugin code: ``PluginContext`` at boot, ``RuntimeContext`` per request.

Neither is ever sent to the model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic

from langchain_core.messages import AnyMessage
from pydantic import BaseModel
from typing_extensions import TypeVar

from oracle_core._frontend import FrontendAccessor
from oracle_core._kv import KeyValueAccessor
from oracle_core._matrix import MatrixAccessor
from oracle_core._policy import ToolPolicy
from oracle_core._secrets import SecretsAccessor
from oracle_core._services import (
    BlobStore,
    EventSink,
    LLMAccessor,
    OracleEvent,
    UcanAccessor,
)
from oracle_core._state import Client, ReadonlyState
from oracle_core._transports import TurnTransport

__all__ = [
    "AbortSignal",
    "Accessor",
    "Emitter",
    "History",
    "OracleIdentity",
    "OracleRunContext",
    "PluginContext",
    "RuntimeContext",
    "SessionInfo",
    "SharedState",
    "TurnBindings",
    "UserInfo",
]

ConfigT = TypeVar("ConfigT", default=Any)


@dataclass(frozen=True)
class OracleIdentity:
    """Who the oracle is: from ``OracleConfig`` plus ``ORACLE_ENTITY_DID``."""

    name: str
    org: str | None = None
    description: str | None = None
    entity_did: str | None = None
    prompt: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UserInfo:
    """The authenticated user of a request.

    ``mcp_invocations`` are the UCAN invocations the client sent with this request for
    protected MCP tools, by ``<server>__<tool>`` (base64 CAR; ``SendMessageDto``'s
    ``mcpInvocations``, UCAN-28): the host checks them before such a tool runs.
    """

    did: str
    matrix_user_id: str | None = None
    ucan_delegation: str | None = None
    timezone: str | None = None
    current_time: str | None = None
    mcp_invocations: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SessionInfo:
    """The session (thread) a request belongs to.

    ``request_id`` is the client's id for the request (any string it chose);
    ``run_id`` is the host's own id for the turn, which the host routes the turn's
    events by (``None`` outside a turn, or when the host issues none).
    """

    id: str
    client: Client = "portal"
    ws_id: str | None = None
    request_id: str | None = None
    room_id: str | None = None
    run_id: str | None = None


class AbortSignal:
    """Set when the client goes away; tools check it between slow steps (CORE-46)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        """Whether the request was aborted."""
        return self._event.is_set()

    def abort(self, reason: str = "aborted") -> None:
        """Mark the request aborted (server side)."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self) -> None:
        """Wait until the request is aborted."""
        await self._event.wait()

    def raise_if_aborted(self) -> None:
        """Raise ``asyncio.CancelledError`` if the request was aborted."""
        if self._event.is_set():
            raise asyncio.CancelledError(self.reason)


@dataclass(frozen=True)
class History:
    """The thread as of the moment of the call."""

    messages: tuple[AnyMessage, ...]
    state: ReadonlyState

    @property
    def user_context(self) -> Mapping[str, str | None]:
        """The memory slots of the state."""
        return self.state.user_context

    def recent(self, n: int) -> tuple[AnyMessage, ...]:
        """The last ``n`` messages."""
        return self.messages[-n:] if n > 0 else ()


class Emitter:
    """Sends client events for the current session; never blocks."""

    def __init__(self, sink: EventSink, session: SessionInfo, user_did: str | None) -> None:
        self._sink = sink
        self._session = session
        self._user_did = user_did

    def emit(self, name: str, payload: Mapping[str, Any]) -> None:
        """Send an event by name."""
        self._sink.emit(
            OracleEvent(
                name=name,
                payload=dict(payload),
                session_id=self._session.id,
                request_id=self._session.request_id,
                user_did=self._user_did,
                run_id=self._session.run_id,
            )
        )

    def tool_call(self, payload: Mapping[str, Any]) -> None:
        """A tool started or finished (UI progress)."""
        self.emit("tool_call", payload)

    def action_call(self, payload: Mapping[str, Any]) -> None:
        """Ask an AG-UI client to run an action."""
        self.emit("action_call", payload)

    def render_component(self, payload: Mapping[str, Any]) -> None:
        """Ask the client to render a component."""
        self.emit("render_component", payload)

    def reasoning(self, payload: Mapping[str, Any]) -> None:
        """A reasoning trace chunk."""
        self.emit("reasoning", payload)

    def browser_tool_call(self, payload: Mapping[str, Any]) -> None:
        """Ask the portal client to run a browser tool."""
        self.emit("browser_tool_call", payload)

    def router(self, payload: Mapping[str, Any]) -> None:
        """The capability router preloaded plugins for this turn."""
        self.emit("router", payload)

    def message_cache_invalidation(self, payload: Mapping[str, Any]) -> None:
        """Tell the client its cached messages are stale."""
        self.emit("message_cache_invalidation", payload)

    def warning(self, payload: Mapping[str, Any]) -> None:
        """Something of the client's request was not used: ``{code, message, …}``."""
        self.emit("warning", payload)


Accessor = Callable[[ReadonlyState, "RuntimeContext[Any]"], Any]
"""A shared-state producer: ``(state, rt_ctx) -> value``, evaluated on every read."""


class SharedState:
    """Read-only access to other plugins' shared-state keys (CORE-48)."""

    __slots__ = ("_accessors", "_ctx", "_logger")

    def __init__(
        self,
        accessors: Mapping[str, tuple[str, Accessor]],
        ctx: RuntimeContext[Any] | None,
        logger: logging.Logger,
    ) -> None:
        object.__setattr__(self, "_accessors", accessors)
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "_logger", logger)

    def _bind(self, ctx: RuntimeContext[Any]) -> SharedState:
        return SharedState(self._accessors, ctx, self._logger)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``; ``default`` when no producer or its accessor raised."""
        entry = self._accessors.get(key)
        if entry is None or self._ctx is None:
            return default
        owner, accessor = entry
        ctx = self._ctx.for_plugin(owner)
        try:
            value = accessor(ctx.history.state, ctx)
        except Exception:
            ctx.logger.exception("shared-state accessor '%s' of plugin '%s' raised", key, owner)
            return default
        return default if value is None else value

    def keys(self) -> frozenset[str]:
        """Keys with a producer in this runtime."""
        return frozenset(self._accessors)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return self.get(key)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("shared state is read-only; producers publish through accessors")


@dataclass(frozen=True)
class PluginContext(Generic[ConfigT]):
    """What a plugin's boot-time hooks receive (CORE-42). No user or request data.

    Attributes:
        config: The merged, validated environment (declared variables only).
        plugin_config: This plugin's ``config_schema`` instance, or ``None``.
        identity: The oracle's identity.
        available_plugins: Names of every included plugin.
        logger: ``{base}.plugin.{name}``.
        plugin_name: The plugin this context is scoped to.
        transport: Starts turns for users (Slack messages, scheduled tasks, group
            rooms): ``await ctx.transport.run_turn(TransportTurn(...))``.
    """

    config: Mapping[str, Any]
    plugin_config: ConfigT
    identity: OracleIdentity
    available_plugins: frozenset[str]
    logger: logging.Logger
    plugin_name: str = ""
    transport: TurnTransport | None = None


@dataclass(frozen=True)
class _Scope:
    """Per-runtime facts needed to re-scope a context to another plugin."""

    plugin_configs: Mapping[str, BaseModel | None]
    base_logger: logging.Logger


@dataclass(frozen=True)
class RuntimeContext(PluginContext[ConfigT]):
    """What request-time hooks, tool handlers, accessors and middleware receive (CORE-43).

    Built once per graph invocation and never kept across turns. Plugin code gets a
    view scoped to itself (``for_plugin``), which differs only in ``logger`` and
    ``plugin_config``.
    """

    user: UserInfo = field(default_factory=lambda: UserInfo(did=""))
    session: SessionInfo = field(default_factory=lambda: SessionInfo(id=""))
    history: History = field(default_factory=lambda: History((), ReadonlyState()))
    loaded_plugins: frozenset[str] = frozenset()
    secrets: SecretsAccessor | None = None
    blob_store: BlobStore | None = None
    matrix: MatrixAccessor | None = None
    frontend: FrontendAccessor | None = None
    kv: KeyValueAccessor | None = None
    ucan: UcanAccessor | None = None
    llm: LLMAccessor | None = None
    emit: Emitter | None = None
    shared: SharedState | None = None
    abort_signal: AbortSignal = field(default_factory=AbortSignal)
    tool_call_id: str | None = None
    tool_policy: ToolPolicy = field(default_factory=ToolPolicy)
    _scope: _Scope | None = field(default=None, repr=False, compare=False)
    _turn: TurnBindings | None = field(default=None, repr=False, compare=False)
    _degraded: list[tuple[str, str]] | None = field(default=None, repr=False, compare=False)

    def report_degraded(self, what: str) -> None:
        """Name a part of this plugin that failed for this build, while the rest works.

        From a request-time hook (``get_request_tools``, ``get_prompt_blocks``…): the turn's
        "Degraded Services" section lists ``- **<plugin>**: <what>``, as it does for a hook
        that raised, and ``BuiltAgent.degraded`` carries it. Elsewhere (a tool call, after
        the prompt is composed) it is only logged. ``what`` reaches the model: name the
        part ("MCP server github unreachable"), never user data or secrets.
        """
        if self._degraded is None:
            self.logger.warning("degraded: %s", what)
            return
        self._degraded.append((self.plugin_name or "runtime", what))

    @property
    def data_scope(self) -> Mapping[str, Any]:
        """The read scope the tool policy sets for this context's plugin (plugins spec
        §20.1 ``data_scopes``); empty when it sets none or the context is not scoped."""
        return self.tool_policy.data_scope(self.plugin_name) if self.plugin_name else {}

    def for_plugin(self, name: str) -> RuntimeContext[Any]:
        """The same context scoped to plugin ``name`` (its logger and config)."""
        if self.plugin_name == name or self._scope is None:
            return self
        scoped: RuntimeContext[Any] = self
        return dataclasses.replace(
            scoped,
            plugin_name=name,
            kv=None if self.kv is None else self.kv.scoped(name),
            plugin_config=self._scope.plugin_configs.get(name),
            logger=self._scope.base_logger.getChild(f"plugin.{name}"),
        )

    def with_state(
        self, state: Mapping[str, Any], *, tool_call_id: str | None = None
    ) -> RuntimeContext[ConfigT]:
        """A copy over a newer state snapshot (what tool wrappers build per call)."""
        view = ReadonlyState(state)
        ctx = dataclasses.replace(
            self,
            history=History(view.messages, view),
            loaded_plugins=self.loaded_plugins | view.loaded_plugins,
            tool_call_id=tool_call_id,
        )
        if ctx.shared is not None:
            object.__setattr__(ctx, "shared", ctx.shared._bind(ctx))
        return ctx


@dataclass
class TurnBindings:
    """Per-turn data the framework reads from the run context.

    Compiled agents are shared between turns with the same tool set, so what differs per
    turn (the system prompt, the meta-tools' catalog, request-time tools, what each tool
    is) travels here instead of inside the graph.

    Attributes:
        system_prompt: The composed system prompt of the turn.
        tool_infos: Owner, visibility and effect of every bound tool, by name.
        tools: This turn's implementation of every per-turn tool, by name.
        call_counts: Executions per call signature in this run (repetition guard).
        catalog: The meta-tools' ``CapabilityCatalog`` of the turn.
        current_time: The turn's ``time_line``, which ``current-time`` shows the model.
        context_window: The main model's context window, which ``history-condenser``
            keeps each request inside.
    """

    system_prompt: str | None = None
    tool_infos: Mapping[str, Any] = field(default_factory=dict)
    tools: Mapping[str, Any] = field(default_factory=dict)
    call_counts: dict[str, int] = field(default_factory=dict)
    catalog: Any = None
    current_time: str | None = None
    context_window: int | None = None


@dataclass(frozen=True)
class OracleRunContext:
    """The LangGraph ``context_schema`` of the main agent (CORE-47).

    ``turn`` is a Python addition: the per-turn bindings the framework middleware and
    per-turn tools read.
    """

    user_did: str
    session_id: str
    request_id: str | None = None
    client: Client = "portal"
    ws_id: str | None = None
    room_id: str | None = None
    timezone: str | None = None
    current_time: str | None = None
    preloaded_plugins: frozenset[str] = frozenset()
    runtime_context: RuntimeContext[Any] | None = None
    turn: TurnBindings | None = None

    @classmethod
    def of(
        cls,
        ctx: RuntimeContext[Any],
        turn: TurnBindings,
        preloaded_plugins: frozenset[str] = frozenset(),
    ) -> OracleRunContext:
        """The run context of ``ctx``'s user and session, ``ctx`` bound to ``turn``."""
        bound = dataclasses.replace(ctx, _turn=turn)
        user, session = bound.user, bound.session
        return cls(
            user_did=user.did,
            session_id=session.id,
            request_id=session.request_id,
            client=session.client,
            ws_id=session.ws_id,
            room_id=session.room_id,
            timezone=user.timezone,
            current_time=user.current_time,
            preloaded_plugins=preloaded_plugins,
            runtime_context=bound,
            turn=turn,
        )
