"""Every plugin hook of the oracle runtime, in one place.

Hooks are pluggy hooks of project ``"oracle"``. A plugin implements a hook by defining a
method of the same name (class form), passing a callable of that name to
``define_oracle_plugin``, or decorating a function with ``oracle_core.hookimpl``. Every
hook is optional and may be ``async``; the runtime awaits awaitables. The runtime calls
each plugin's implementation on its own, so results and failures are attributed to
the plugin (it never relies on pluggy's combined result list).

Boot-time hooks receive a ``PluginContext`` (``ctx``); request-time hooks receive a
``RuntimeContext`` (``rt_ctx``) scoped to the plugin. Boot-time outputs are shared by
all requests: handlers must be safe under concurrency.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware

    from oracle_core._context import Accessor, PluginContext, RuntimeContext
    from oracle_core._registries import AuthExcludedRoute
    from oracle_core._session_events import SessionEvent
    from oracle_core._tools import PluginCapability, PluginSubAgent, PluginTool

PROJECT_NAME = "oracle"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]


# --- resolution ------------------------------------------------------------------------


@hookspec
def auto_detect(env: Mapping[str, str]) -> bool:  # type: ignore[empty-body]
    """Decide whether the plugin can run in this environment.

    When: at boot, for plugins whose feature toggle is ``"auto"`` or ``True``, before
    configuration is validated.

    Receives: ``env``, the raw environment (``os.environ`` or the ``env`` override).

    Returns: ``True`` to include the plugin. With ``"auto"``, ``False`` excludes it
    (``auto_detect_failed``, the reason quotes ``auto_detect_hint``); with ``True``,
    ``False`` fails boot with ``boot.plugin.env_missing``. A plugin whose manifest lists
    an embedded backend (``backends.embedded``) is included on it instead when forced on,
    or by default with ``ORACLE_BACKEND=local``.

    If it raises: boot fails.
    """


# --- boot-time contributions ---------------------------------------------------------


@hookspec
def get_tools(ctx: PluginContext[Any]) -> list[PluginTool]:  # type: ignore[empty-body]
    """Contribute tools that do not depend on the request.

    When: once at boot, after lifespans are entered; the result is cached.

    Receives: ``ctx``, the plugin's ``PluginContext``.

    Returns: a list of ``PluginTool``. Handlers still get a fresh ``RuntimeContext`` per
    call.

    If it raises: logged; the plugin contributes no boot tools and is reported degraded.
    """


@hookspec
def get_capabilities(ctx: PluginContext[Any]) -> list[PluginCapability]:  # type: ignore[empty-body]
    """Declare capabilities of the plugin's own besides itself (each MCP server of a hub).

    When: once at boot, before ``get_tools``; the result is cached.

    Receives: ``ctx``.

    Returns: a list of ``PluginCapability``. Each is listed, loaded, preloaded and gated by
    its own name like a plugin; tools join one with ``PluginTool(capability=name)``, at
    boot or per request.

    If it raises: logged; the plugin declares none and is reported degraded. A name that
    is another plugin's or capability's fails boot (``boot.plugin.capability_clash``).
    """


@hookspec
def get_sub_agents(ctx: PluginContext[Any]) -> list[PluginSubAgent]:  # type: ignore[empty-body]
    """Contribute sub-agents, each exposed to the main agent as one ``call_…`` tool.

    When: once at boot; the result is cached.

    Receives: ``ctx``.

    Returns: a list of ``PluginSubAgent``.

    If it raises: logged; no boot sub-agents from this plugin; reported degraded.
    """


@hookspec
def get_middlewares(ctx: PluginContext[Any]) -> list[AgentMiddleware[Any, Any]]:  # type: ignore[empty-body]
    """Contribute LangChain ``AgentMiddleware`` instances to the main agent.

    When: once at boot; the instances are shared by every request.

    Receives: ``ctx``.

    Returns: middleware in the order they should run. Node hooks may only return
    ``None`` or ``{"jump_to": "end"}``; no ``tools``, no extra ``state_schema``. A
    middleware whose ``reaches_sub_agents`` attribute is ``True`` (a per-model-call
    limiter, a policy) also runs in every sub-agent, after the framework's tool checks
    and before the sub-agent's own middleware.

    If it raises: logged; none of this plugin's middleware are registered.
    """


@hookspec
def get_shared_state() -> Mapping[str, Accessor]:  # type: ignore[empty-body]
    """Publish read-only values other plugins read through ``rt_ctx.shared``.

    When: once at boot.

    Receives: nothing.

    Returns: a mapping of key (a Python identifier not starting with ``_``) to an
    accessor ``(state, rt_ctx) -> value`` evaluated on every read.

    If it raises: boot fails.
    """


@hookspec
def get_routes(ctx: PluginContext[Any]) -> list[Any]:  # type: ignore[empty-body]
    """Contribute HTTP routes (Starlette ``BaseRoute``) that the server mounts.

    When: once at boot.

    Receives: ``ctx``.

    Returns: a list of Starlette routes; they are authenticated unless listed by
    ``get_auth_excluded_routes``. A handler gets the caller's ``RuntimeContext``
    (user, ambient services, this plugin's config) from ``route_context(request)``.

    If it raises: boot fails.
    """


@hookspec
def get_auth_excluded_routes() -> list[AuthExcludedRoute]:  # type: ignore[empty-body]
    """List routes that the server serves without authentication.

    When: once at boot.

    Receives: nothing.

    Returns: ``AuthExcludedRoute(path, method=None)`` entries (full mount path; ``None``
    means every method).

    If it raises: boot fails.
    """


@hookspec
def lifespan(ctx: PluginContext[Any]) -> AbstractAsyncContextManager[None]:  # type: ignore[empty-body]
    """Own resources for the life of the runtime (connections, background tasks).

    When: entered at boot in topological order, before boot-time contributions are
    collected; exited at shutdown in reverse order.

    Receives: ``ctx``.

    Returns: an async context manager (an ``@asynccontextmanager`` method works).

    If it raises: on enter, boot fails (lifespans already entered are exited in
    reverse); on exit, the error is logged.
    """


# --- request-time contributions --------------------------------------------------------


@hookspec
def get_request_tools(rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:  # type: ignore[empty-body]
    """Contribute tools that depend on the user or the request.

    When: on every agent build, concurrently with the other request-time hooks.

    Receives: ``rt_ctx``, the ``RuntimeContext`` of the turn scoped to the plugin.

    Returns: a list of ``PluginTool``. A name already assembled for this build is dropped
    with an error log (earlier in topological order wins).

    If it raises: logged; skipped for this build; listed as degraded in the prompt.
    """


@hookspec
def get_request_sub_agents(rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:  # type: ignore[empty-body]
    """Contribute sub-agents that depend on the user or the request.

    When: on every agent build.

    Receives: ``rt_ctx``.

    Returns: a list of ``PluginSubAgent``.

    If it raises: as ``get_request_tools``.
    """


@hookspec
def get_turn_state(rt_ctx: RuntimeContext[Any]) -> Mapping[str, Any]:  # type: ignore[empty-body]
    """Hydrate state for the turn before the prompt is built.

    When: on every agent build, after the checkpoint is loaded and before the prompt.

    Receives: ``rt_ctx``.

    Returns: values for ``user_context``, ``user_preferences``, ``current_entity_did``,
    ``space_id`` or ``editor_room_id``; other keys are logged and dropped. Values are
    merged into the invocation input, so reducers apply and they are checkpointed.

    If it raises: logged; skipped for this build.
    """


@hookspec
def get_prompt_blocks(rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:  # type: ignore[empty-body]
    """Fill named slots of the system prompt.

    When: on every agent build.

    Receives: ``rt_ctx``.

    Returns: a mapping of ``PromptSlot`` (``operational_mode``, ``editor_section``,
    ``composio_context``) to text. Unknown slots are logged and ignored; when several
    plugins fill one slot the later in topological order wins, with a warning.

    If it raises: logged; skipped for this build; listed as degraded.
    """


# --- events ---------------------------------------------------------------------------


@hookspec
def on_session_event(event: SessionEvent, rt_ctx: RuntimeContext[Any]) -> None:
    """React to a session of a user being created, titled or deleted.

    When: after the host created the session, gave it a title (after its first turn) or
    deleted it; the host waits for the hooks (at most 10 s), so keep it short and start
    slow work in the background.

    Receives: ``event`` (``SessionEvent``: ``kind``, ``session_id``, ``user_did``,
    ``title``; for ``session.deleted`` the thread's ``messages`` as they were before it
    was deleted) and ``rt_ctx``, a ``RuntimeContext`` of that user and session, scoped
    to the plugin.

    Returns: nothing.

    If it raises: logged; the other plugins still hear of the event.
    """
