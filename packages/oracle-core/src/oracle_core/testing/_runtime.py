"""``create_test_runtime``: the real boot pipeline, offline, with recording fakes (CORE-92)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.runtime import Runtime

from oracle_core._agent import BuiltAgent, TurnRequest
from oracle_core._approval import ApprovalAnswer, ApprovalRequest, approval_requests
from oracle_core._checkpoint import InMemoryCheckpointers
from oracle_core._config import OracleConfig, load_oracle_config
from oracle_core._context import RuntimeContext, SessionInfo, UserInfo
from oracle_core._frontend import LocalFrontendService
from oracle_core._hooks import MainAgentHooks
from oracle_core._kv import KeyValueService, KvLimits, SqliteKvBackend
from oracle_core._manifest import PluginManifest, validate_manifest
from oracle_core._matrix import (
    LocalMatrixService,
    MatrixAccessor,
    _LocalMatrixAccessor,
    local_matrix_user_id,
)
from oracle_core._plugin import OraclePlugin
from oracle_core._resolution import FeatureValue, PluginStatusReport
from oracle_core._runtime import BootInputs, OracleRuntime, boot_runtime
from oracle_core._secrets import LocalSecretsService
from oracle_core._services import (
    AmbientServices,
    CapabilityGrant,
    InMemoryBlobStore,
    OracleEvent,
    PermissiveUcanService,
    RecordingEventSink,
    UcanAccessor,
)
from oracle_core._subagents import SubAgentToolAdapter
from oracle_core._tool_adapter import PluginToolAdapter
from oracle_core._tools import MODEL_ROLES, PluginTool
from oracle_core._toolset import UserToolset
from oracle_core.testing._scripted import ScriptedChatModel

__all__ = [
    "RecordingMatrixService",
    "TestRuntime",
    "TurnResult",
    "create_test_runtime",
]

TEST_USER = UserInfo(did="did:key:z6MkTestUserOfTheOracleRuntime", timezone="UTC")
TEST_SESSION = SessionInfo(id="test-thread")
_LOCAL_ENV = {"ORACLE_BACKEND": "local", "NODE_ENV": "test"}


@dataclass(eq=False)
class RecordingMatrixService(LocalMatrixService):
    """Matrix for tests: an in-memory :class:`LocalMatrixService` that also records calls.

    Rooms made with ``create_room`` (or :meth:`create_room_as`) behave as on a
    homeserver: timelines, state, members, power levels and media, scoped to their
    members. Rooms the store does not know (a fixture's ``"!room:test"``) are unscoped
    stand-ins: every user sees them, posts and state writes return ``$event_<n>``,
    ``state_events`` holds their state by ``(room_id, event_type, state_key)`` and
    ``room_state`` seeds what ``get_room_state`` reads. Every post and sent event, in
    either kind of room, is recorded in ``posts`` / ``sent_events``; ``user_rooms`` maps a
    user DID to their room with the oracle.
    """

    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sent_events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    room_state: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    user_rooms: dict[str, str] = field(default_factory=dict)
    state_events: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A dataclass (tests subclass it as one); the store itself is in memory.
        LocalMatrixService.__init__(self, ":memory:")
        self._events = 0

    def for_user(self, user: UserInfo) -> MatrixAccessor:
        return _RecordingMatrixView(self, user)

    async def knows(self, room_id: str) -> bool:
        """Whether ``room_id`` is a room of the store (not a stand-in)."""
        return await self.state_event(room_id, "m.room.create", "") is not None

    def _next_event(self) -> str:
        self._events += 1
        return f"$event_{self._events}"

    # The stand-in rooms' operations (tests subclass these to make Matrix fail or wait).

    async def post_to_room(self, room_id: str, content: Mapping[str, Any]) -> str:
        return self._next_event()

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        return self._next_event()

    async def get_room_state(self, room_id: str) -> list[dict[str, Any]]:
        written = [
            {"type": kind, "state_key": key, "content": dict(content)}
            for (room, kind, key), content in self.state_events.items()
            if room == room_id
        ]
        return [*self.room_state.get(room_id, []), *written]

    async def get_event_by_id(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        for index, (room, content) in enumerate(self.posts, start=1):
            if room == room_id and event_id == f"$event_{index}":
                return {"event_id": event_id, "room_id": room, "content": content}
        return None

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        content = self.state_events.get((room_id, event_type, state_key))
        return None if content is None else dict(content)

    async def set_state_event(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        self.state_events[(room_id, event_type, state_key)] = dict(content)
        return self._next_event()


class _RecordingMatrixView(_LocalMatrixAccessor):
    """One user's view: the local store's accessor, with stand-in rooms and recording."""

    def __init__(self, service: RecordingMatrixService, user: UserInfo) -> None:
        super().__init__(service, user.matrix_user_id or local_matrix_user_id(user.did))
        self.service = service
        self.user = user

    async def _check(self, room_id: str) -> None:
        if await self.service.knows(room_id):
            await super()._check(room_id)

    async def post_to_room(self, room_id: str, content: Mapping[str, Any]) -> str:
        self.service.posts.append((room_id, dict(content)))
        if await self.service.knows(room_id):
            return await super().send_event(room_id, "m.room.message", content)
        return await self.service.post_to_room(room_id, content)

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
        self.service.sent_events.append((room_id, event_type, dict(content)))
        if await self.service.knows(room_id):
            return await super().send_event(room_id, event_type, content)
        return await self.service.send_event(room_id, event_type, content)

    async def get_room_state(self, room_id: str) -> list[dict[str, Any]]:
        if await self.service.knows(room_id):
            return await super().get_room_state(room_id)
        return await self.service.get_room_state(room_id)

    async def get_event_by_id(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        if await self.service.knows(room_id):
            return await super().get_event_by_id(room_id, event_id)
        return await self.service.get_event_by_id(room_id, event_id)

    async def user_room_id(self) -> str | None:
        return self.service.user_rooms.get(self.user.did)

    async def get_state_event(
        self, room_id: str, event_type: str, state_key: str = ""
    ) -> dict[str, Any] | None:
        if await self.service.knows(room_id):
            return await super().get_state_event(room_id, event_type, state_key)
        return await self.service.get_state_event(room_id, event_type, state_key)

    async def set_state_event(
        self, room_id: str, event_type: str, content: Mapping[str, Any], state_key: str = ""
    ) -> str:
        if await self.service.knows(room_id):
            return await super().set_state_event(room_id, event_type, content, state_key)
        return await self.service.set_state_event(room_id, event_type, content, state_key)


class _RoleModels:
    def __init__(self, default: BaseChatModel, models: Mapping[str, BaseChatModel]) -> None:
        self._default = default
        self._models = dict(models)

    def get(self, role: str, **params: Any) -> BaseChatModel:
        if role not in MODEL_ROLES:
            from oracle_core._errors import UnknownModelRoleError

            raise UnknownModelRoleError(f"unknown model role '{role}'")
        return self._models.get(role, self._default)


def _grants(capabilities: Sequence[Any] | None) -> list[CapabilityGrant] | None:
    if capabilities is None:
        return None
    grants = []
    for item in capabilities:
        if isinstance(item, CapabilityGrant):
            grants.append(item)
        elif isinstance(item, tuple):
            grants.append(CapabilityGrant(with_=item[0], can=item[1]))
        else:
            grants.append(CapabilityGrant(with_="ucan:*", can=str(item)))
    return grants


@dataclass(frozen=True)
class TurnResult:
    """What one ``run_turn`` produced.

    Attributes:
        messages: The messages added by this turn (the user message first).
        tool_calls: Tool calls the model made this turn, in order.
        state: The thread's state after the turn.
        events: Events emitted during the turn.
        approvals: The calls the turn paused on, waiting for the user's approval
            (answer them with ``TestRuntime.resume_turn``).
    """

    messages: list[BaseMessage]
    tool_calls: list[dict[str, Any]]
    state: dict[str, Any]
    events: list[OracleEvent]
    approvals: list[ApprovalRequest] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Text of the last AI message."""
        final = next((m for m in reversed(self.messages) if isinstance(m, AIMessage)), None)
        return str(final.text) if final is not None else ""

    def tool_messages(self, name: str | None = None) -> list[ToolMessage]:
        """ToolMessages of the turn, optionally for one tool."""
        return [
            m
            for m in self.messages
            if isinstance(m, ToolMessage) and (name is None or m.name == name)
        ]


class TestRuntime:
    """A booted runtime with offline fakes and helpers to drive it (CORE-93)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        runtime: OracleRuntime,
        *,
        model: BaseChatModel,
        events: RecordingEventSink,
        matrix: RecordingMatrixService,
        user: UserInfo,
        session: SessionInfo,
        state: Mapping[str, Any] | None,
        frontend: LocalFrontendService | None = None,
        data_dir: tempfile.TemporaryDirectory[str] | None = None,
    ) -> None:
        self.runtime = runtime
        self._data_dir = data_dir
        self.frontend = frontend or LocalFrontendService()
        self.model = model
        self.events = events
        self.matrix = matrix
        self.user = user
        self.session = session
        self.state = dict(state or {})

    async def __aenter__(self) -> TestRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the runtime (exits plugin lifespans) and the in-memory stores."""
        await self.runtime.aclose()
        if self.runtime.ambient.kv is not None:
            await self.runtime.ambient.kv.aclose()
        await self.matrix.aclose()
        if self._data_dir is not None:
            self._data_dir.cleanup()

    def status(self) -> PluginStatusReport:
        """``runtime.plugins.status()``."""
        return self.runtime.plugins.status()

    def get_manifest(self, name: str) -> PluginManifest:
        """The merged manifest of an included plugin."""
        return self.runtime.registries.manifests[name]

    async def build(
        self,
        text: str | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        client: str | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> BuiltAgent:
        """Build the agent for a turn without running it (``resume``: see
        ``TurnRequest.resume``)."""
        session = self.session
        if thread_id is not None or client is not None:
            session = SessionInfo(
                id=thread_id or session.id,
                client=client or session.client,  # type: ignore[arg-type]
                ws_id=session.ws_id,
                request_id=session.request_id,
                room_id=session.room_id,
            )
        merged_state = {**self.state, **(state or {})}
        return await self.runtime.build_agent(
            TurnRequest(
                user=self.user, session=session, message=text, state=merged_state, resume=resume
            )
        )

    async def toolset(self, *, state: Mapping[str, Any] | None = None) -> UserToolset:
        """The test user's tools outside a turn (``OracleRuntime.user_toolset``)."""
        merged_state = {**self.state, **(state or {})}
        return await self.runtime.user_toolset(
            TurnRequest(user=self.user, session=self.session, state=merged_state)
        )

    async def list_tools(self) -> list[str]:
        """Names of every tool bound for a turn (meta-tools first)."""
        built = await self.build()
        return list(built.tool_infos)

    async def _find_tool(
        self, name: str, state: Mapping[str, Any] | None, sub_agent: str | None
    ) -> tuple[PluginTool, str | None, RuntimeContext[Any]]:
        """The tool named ``name`` and the context a call of it would get.

        Main-agent tools run over the thread's state; a tool only a sub-agent sees runs,
        as in the sub-agent, over ``state`` alone (the sub-agent has no parent history).
        """
        built = await self.build(state=state)
        base = built.context.runtime_context
        assert base is not None
        call_id = "call_test"
        tools = _bound_tools(built)
        subs = [t for t in tools if isinstance(t, SubAgentToolAdapter)]
        if sub_agent is None:
            for tool in tools:
                if tool.name != name:
                    continue
                if not isinstance(tool, PluginToolAdapter):
                    raise TypeError(f"'{name}' is a sub-agent; use invoke_sub_agent")
                ctx = base.with_state({**base.history.state, **(state or {})}, tool_call_id=call_id)
                return tool.plugin_tool, tool.owner, ctx
        else:
            subs = [s for s in subs if sub_agent in (s.name, s.resolved.spec.name)]
            if not subs:
                raise KeyError(f"no sub-agent named '{sub_agent}'")
        for sub in subs:
            for inner in sub.resolved.tools:
                if inner.name == name:
                    ctx = base.with_state(dict(state or {}), tool_call_id=call_id)
                    return inner, sub.resolved.owner, ctx
        inner_names = sorted({t.name for s in subs for t in s.resolved.tools})
        raise KeyError(
            f"no tool named '{name}'; bound: {', '.join(built.tool_infos)}; "
            f"in sub-agents: {', '.join(inner_names) or 'none'}"
        )

    async def invoke_tool(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        tool_call_id: str | None = None,
        sub_agent: str | None = None,
    ) -> Any:
        """Validate ``args`` and run one tool's handler, bypassing middleware.

        The handler gets the ``RuntimeContext`` the agent would give it: scoped to the
        owning plugin, with ``tool_call_id`` set, over this runtime's user, session and
        the thread's state merged with ``state``. A name not bound to the main agent is
        looked up among the tools of this build's sub-agents (tools only a sub-agent
        sees); such a tool runs over ``state`` alone, as a sub-agent has no parent
        history. ``sub_agent`` (its ``call_…`` or plain name) picks the sub-agent when
        several hold a tool of that name, and restricts the lookup to its tools.

        Args:
            name: The tool's name.
            args: Its arguments, validated against its ``args_schema``.
            state: State for this call.
            tool_call_id: ``rt_ctx.tool_call_id`` (default ``call_test``).
            sub_agent: Only look among this sub-agent's tools.

        Returns:
            The handler's result as the model would get it: a ``str``, a
            ``ToolMessage`` or a ``Command``.

        Raises:
            KeyError: no tool (or sub-agent) of that name in this build.
            TypeError: ``name`` is a sub-agent's ``call_…`` tool (use
                ``invoke_sub_agent``).
            pydantic.ValidationError: the arguments are invalid.
        """
        tool, owner, ctx = await self._find_tool(name, state, sub_agent)
        if tool_call_id is not None:
            ctx = dataclasses.replace(ctx, tool_call_id=tool_call_id)
        ctx = ctx.for_plugin(owner) if owner else ctx
        schema = tool.args_schema
        parsed = schema.model_validate(dict(args or {})) if isinstance(schema, type) else args
        result = tool.handler(parsed, ctx)
        if inspect.isawaitable(result):
            result = await result
        from oracle_core._tool_adapter import encode_tool_result

        return encode_tool_result(result)

    async def invoke_sub_agent(self, name: str, task: str) -> str:
        """Run a sub-agent (by ``call_…`` or plain name) on ``task``; returns its answer."""
        built = await self.build()
        for tool in _bound_tools(built):
            if isinstance(tool, SubAgentToolAdapter) and name in (
                tool.name,
                tool.resolved.spec.name,
            ):
                base = built.context.runtime_context
                assert base is not None
                ctx = base.for_plugin(tool.resolved.owner)
                text, _ = await tool._run_inner(task, ctx)
                return text
        raise KeyError(f"no sub-agent named '{name}'")

    async def invoke_middleware(
        self,
        plugin: str,
        hook: str,
        *,
        state: Mapping[str, Any] | None = None,
        request: Any = None,
    ) -> Any:
        """Call one node hook (``before_model``, ``aafter_agent``, …) of a plugin's middleware.

        The middleware contract is enforced (``MiddlewareContractError``). Returns the
        result of each of the plugin's middleware that implements the hook, in order.
        """
        built = await self.build(state=state)
        runtime = Runtime(context=built.context)
        snapshot = {"messages": [], **self.state, **(state or {})}
        results = []
        entries = [b for b in self.runtime.booted if b.name == plugin]
        if not entries:
            raise KeyError(f"plugin '{plugin}' is not loaded")
        for mw in entries[0].middlewares:
            method = getattr(mw, hook, None)
            if method is None:
                raise AttributeError(f"middleware has no hook '{hook}'")
            if hook.startswith(("wrap_", "awrap_")):
                raise TypeError("invoke_middleware calls node hooks; run_turn drives wrap_*")
            result = method(snapshot, runtime)
            if inspect.isawaitable(result):
                result = await result
            results.append(result)
        del request
        return results

    async def list_capabilities(self) -> list[dict[str, Any]]:
        """The ``list_capabilities`` payload as the model reads it."""
        raw = await self.invoke_tool("list_capabilities", {})
        return list(json.loads(raw))

    def assert_manifest_valid(self, *, allow_warnings: bool = True) -> None:
        """Every included manifest passes the hard rules (and, optionally, the soft ones)."""
        problems: list[str] = []
        for entry in self.runtime.booted:
            names = [t.name for t in entry.tools] + [s.tool_name for s in entry.sub_agents]
            result = validate_manifest(entry.manifest, entry.name, names)
            problems.extend(result.errors)
            if not allow_warnings:
                problems.extend(result.warnings)
        if problems:
            raise AssertionError("manifest problems:\n" + "\n".join(problems))

    async def assert_no_collisions(self) -> None:
        """No tool name is bound twice and no request-time tool was dropped this build."""
        collisions: list[str] = []

        class _Catch(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "tool_collision" in record.getMessage():
                    collisions.append(record.getMessage())

        handler = _Catch(level=logging.ERROR)
        self.runtime.logger.addHandler(handler)
        try:
            built = await self.build()
        finally:
            self.runtime.logger.removeHandler(handler)
        names = [t.name for t in _bound_tools(built)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if collisions or duplicates:
            raise AssertionError(f"tool collisions: {collisions or duplicates}")

    async def run_turn(
        self, text: str, *, thread_id: str | None = None, client: str = "portal"
    ) -> TurnResult:
        """Drive one full turn through the per-request agent, offline."""
        return await self._run(text, None, thread_id, client)

    async def resume_turn(
        self,
        decisions: Mapping[str, str | Mapping[str, Any]],
        *,
        thread_id: str | None = None,
        client: str = "portal",
    ) -> TurnResult:
        """Answer paused approvals and run the turn on (plugins spec §20.2).

        Args:
            decisions: By ``ApprovalRequest.interrupt_id``: ``"approved"``, ``"declined"``
                or an ``ApprovalAnswer`` as data (``{"decision": "approved",
                "editedArgs": {...}}``). ``messages`` of the result are those added since
                the pause.

        Raises:
            pydantic.ValidationError: An answer is not an ``ApprovalAnswer``; nothing ran
                and the approval stays pending.
        """
        resume = {
            key: ApprovalAnswer.model_validate(
                {"decision": value} if isinstance(value, str) else value
            ).model_dump(by_alias=True, exclude_none=True)
            for key, value in decisions.items()
        }
        return await self._run(None, resume, thread_id, client)

    async def _run(
        self,
        text: str | None,
        resume: Mapping[str, Any] | None,
        thread_id: str | None,
        client: str,
    ) -> TurnResult:
        first_event = len(self.events.events)
        built = await self.build(
            text, thread_id=thread_id or self.session.id, client=client, resume=resume
        )
        before = await built.agent.aget_state(built.config)
        count = len(before.values.get("messages", [])) if before.values else 0
        state: dict[str, Any] = await built.agent.ainvoke(
            built.input, config=built.config, context=built.context
        )
        messages = list(state.get("messages", []))[count:]
        tool_calls = [
            dict(call) for m in messages if isinstance(m, AIMessage) for call in m.tool_calls
        ]
        return TurnResult(
            messages=messages,
            tool_calls=tool_calls,
            state=state,
            events=self.events.events[first_event:],
            approvals=approval_requests(state.get("__interrupt__", ())),
        )


def _bound_tools(built: BuiltAgent) -> list[Any]:
    return list(built.tools)


async def create_test_runtime(
    *,
    plugins: Sequence[OraclePlugin],
    config: Mapping[str, str] | None = None,
    features: Mapping[str, FeatureValue] | None = None,
    manifest_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    model: BaseChatModel | None = None,
    models: Mapping[str, BaseChatModel] | None = None,
    user: UserInfo | None = None,
    session: SessionInfo | None = None,
    state: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    capabilities: Sequence[Any] | None = None,
    ucan: UcanAccessor | None = None,
    hooks: MainAgentHooks | None = None,
    include_discovered: bool = False,
    oracle: OracleConfig | Mapping[str, Any] | None = None,
    kv_limits: KvLimits | None = None,
) -> TestRuntime:
    """Boot ``plugins`` through the real pipeline on the ``local`` backend (CORE-92).

    Args:
        plugins: The plugins under test.
        config: Plugin environment (what ``ctx.config`` reads); Tier-0 is not required.
            ``SQLITE_DATABASE_PATH`` defaults to a folder of the runtime's own, removed
            when it closes, so plugins that keep files beside it write nowhere else.
        features: Plugin toggles.
        manifest_overrides: Partial manifests by plugin name.
        model: Serves every model role (default: an empty ``ScriptedChatModel``).
        models: Per-role models that win over ``model``.
        user: The test user (default a fixed ``did:key``).
        session: The test session (default ``test-thread``).
        state: State merged into every build (e.g. ``user_context``).
        secrets: The user's secrets (name → value).
        capabilities: UCAN grants: ability strings (on any resource, ``ucan:*``),
            ``(resource, ability)`` pairs or ``CapabilityGrant``s; ``None`` grants
            everything.
        ucan: Supplies minting; without it minting raises ``NotConfiguredError``.
        hooks: Host hooks; the checkpointer defaults to an in-memory one per user.
        include_discovered: Also load ``oracle.plugins`` entry points.
        oracle: The oracle's identity (default ``Test Oracle``).
        kv_limits: The caps of ``rt_ctx.kv`` (an in-memory SQLite store).
    """
    default_model = model or ScriptedChatModel()
    env = {**_LOCAL_ENV, **dict(config or {})}
    # Plugins keep files beside SQLITE_DATABASE_PATH (./data/sqlite by default): a test
    # runtime gives them a folder of its own, removed when it closes.
    data_dir = None
    if "SQLITE_DATABASE_PATH" not in env:
        data_dir = tempfile.TemporaryDirectory(prefix="oracle-test-runtime-")
        env["SQLITE_DATABASE_PATH"] = str(Path(data_dir.name) / "sqlite")
    events = RecordingEventSink()
    matrix = RecordingMatrixService()
    frontend = LocalFrontendService()
    test_user = user or TEST_USER
    services = AmbientServices(
        secrets=LocalSecretsService(values_by_user={test_user.did: dict(secrets or {})}),
        blob_store=InMemoryBlobStore(),
        matrix=matrix,
        ucan=PermissiveUcanService(grants=_grants(capabilities), minter=ucan),
        events=events,
        llm=_RoleModels(default_model, models or {}),
        frontend=frontend,
        kv=KeyValueService(SqliteKvBackend(":memory:"), limits=kv_limits or KvLimits()),
    )
    checkpointers = InMemoryCheckpointers()
    base_hooks = MainAgentHooks(checkpointer_for_user=checkpointers)
    merged_hooks = (hooks or MainAgentHooks()).merged_over(base_hooks)
    try:
        runtime = await boot_runtime(
            logging.getLogger("oracle.test"),
            lambda: BootInputs(
                config=load_oracle_config(oracle or {"name": "Test Oracle"}),
                features=dict(features or {}),
                plugins=list(plugins),
                manifest_overrides=dict(manifest_overrides or {}),
                hooks=merged_hooks,
                bundled_plugins=None,
                discover_entry_points=include_discovered,
                strict_plugins=True,
                env=env,
                services=services,
                check_llm=False,
            ),
        )
    except BaseException:
        if data_dir is not None:
            data_dir.cleanup()
        raise
    return TestRuntime(
        runtime,
        model=default_model,
        events=events,
        matrix=matrix,
        user=test_user,
        session=session or TEST_SESSION,
        state=state,
        frontend=frontend,
        data_dir=data_dir,
    )


def human(text: str) -> HumanMessage:
    """A user message (convenience for building states in tests)."""
    return HumanMessage(content=text)
