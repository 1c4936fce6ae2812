"""The contract plugin middleware must keep: checked at boot, enforced per call (CORE-52, 82)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState

from oracle_core._errors import MiddlewareContractError, OracleBootError

__all__ = [
    "RESERVED_MIDDLEWARE_NAMES",
    "check_plugin_middleware",
    "wrap_plugin_middleware",
]

RESERVED_MIDDLEWARE_NAMES: tuple[str, ...] = (
    "tool-policy",
    "capability-gate",
    "tool-validation",
    "tool-repetition-guard",
    "tool-approval",
    "tool-retry",
    "page-context",
    "safety-guardrail",
    "current-time",
    "history-condenser",
)
"""Names of the framework middleware, in the order they run (CORE-76)."""

_NODE_HOOKS: tuple[str, ...] = (
    "before_agent",
    "abefore_agent",
    "before_model",
    "abefore_model",
    "after_model",
    "aafter_model",
    "after_agent",
    "aafter_agent",
)
_WRAP_HOOKS: tuple[str, ...] = (
    "wrap_model_call",
    "awrap_model_call",
    "wrap_tool_call",
    "awrap_tool_call",
)
_ASYNC_HOOKS = frozenset(
    {
        "abefore_agent",
        "abefore_model",
        "aafter_model",
        "aafter_agent",
        "awrap_model_call",
        "awrap_tool_call",
    }
)
_JUMP_TO_END: Mapping[str, str] = {"jump_to": "end"}
# Both add no state keys: LangChain's per-middleware default and the agent's base state.
_DEFAULT_STATE_SCHEMAS: tuple[type, ...] = (vars(AgentMiddleware)["state_schema"], AgentState)


def _overrides(cls: type, hook: str) -> bool:
    """Whether ``cls`` overrides ``hook``, judged as ``create_agent`` judges it."""
    return getattr(cls, hook) is not getattr(AgentMiddleware, hook)


def _invalid(plugin: str, problem: str, hint: str) -> OracleBootError:
    return OracleBootError(
        f"plugin '{plugin}' middleware {problem}", code="boot.plugin.invalid", hint=hint
    )


def check_plugin_middleware(plugin: str, middleware: object) -> None:
    """Check at boot that one middleware of ``plugin`` keeps the plugin contract (CORE-82).

    Args:
        plugin: The plugin that returned the middleware.
        middleware: One entry of its ``get_middleware`` list.

    Raises:
        OracleBootError: ``boot.plugin.invalid`` when it is not an ``AgentMiddleware``,
            declares ``tools`` or its own ``state_schema``, overrides a sync ``wrap_*``
            hook without the async twin, or takes a reserved framework name.
    """
    if not isinstance(middleware, AgentMiddleware):
        raise _invalid(
            plugin,
            f"{type(middleware).__name__!r} is not a LangChain AgentMiddleware",
            "return instances of langchain.agents.middleware.AgentMiddleware subclasses",
        )
    name = middleware.name
    if getattr(middleware, "tools", None):
        raise _invalid(
            plugin,
            f"'{name}' declares tools",
            "register tools through the plugin's get_tools hook, not on middleware",
        )
    if middleware.state_schema not in _DEFAULT_STATE_SCHEMAS:
        raise _invalid(
            plugin,
            f"'{name}' declares state_schema {middleware.state_schema.__name__}",
            "plugins cannot add state keys; change state through tool Commands or get_turn_state",
        )
    for hook in ("wrap_model_call", "wrap_tool_call"):
        if _overrides(type(middleware), hook) and not _overrides(type(middleware), f"a{hook}"):
            raise _invalid(
                plugin,
                f"'{name}' implements {hook} without a{hook}",
                f"the runtime invokes agents asynchronously; implement async a{hook} too",
            )
    if name in RESERVED_MIDDLEWARE_NAMES:
        raise _invalid(
            plugin,
            f"'{name}' uses a reserved framework middleware name",
            f"rename it; reserved names are {', '.join(RESERVED_MIDDLEWARE_NAMES)}",
        )


class _PluginMiddlewareProxy(AgentMiddleware[AgentState[Any], Any]):
    """Base of the generated proxies; the hooks come from ``wrap_plugin_middleware``."""

    def __init__(self, plugin: str, inner: AgentMiddleware[Any, Any, Any]) -> None:
        super().__init__()
        self._plugin = plugin
        self._inner = inner
        self.tools = list(getattr(inner, "tools", ()))
        self.state_schema = inner.state_schema
        self.trace_policy = inner.trace_policy
        self.transformers = inner.transformers

    @property
    def name(self) -> str:
        """The wrapped middleware's name."""
        return self._inner.name

    @property
    def plugin(self) -> str:
        """The plugin that contributed the wrapped middleware."""
        return self._plugin

    @property
    def wrapped(self) -> AgentMiddleware[Any, Any, Any]:
        """The plugin's own middleware instance."""
        return self._inner

    def __getattr__(self, attribute: str) -> Any:
        # Only reached for attributes the proxy lacks: the plugin's own extras.
        if attribute.startswith("__") or attribute in {"_inner", "_plugin"}:
            raise AttributeError(attribute)
        return getattr(self._inner, attribute)

    def __repr__(self) -> str:
        return f"<plugin middleware {self.name!r} of {self._plugin!r}: {self._inner!r}>"

    def _checked(self, hook: str, result: Any) -> Any:
        """``result`` when the contract allows it; raises otherwise."""
        if result is None:
            return None
        if isinstance(result, Mapping) and dict(result) == _JUMP_TO_END:
            # LangChain routes an after_agent jump to "end" back to the first after_agent
            # node, so every after_agent hook (this one included) would run again, in a
            # loop if it keeps jumping. The run ends after the after_agent chain anyway.
            return None if hook.endswith("after_agent") else result
        keys = [str(key) for key in result] if isinstance(result, Mapping) else []
        raise MiddlewareContractError(
            plugin=self._plugin,
            middleware=self.name,
            hook=hook,
            keys=keys or [f"<{type(result).__name__}>"],
        )


def _node_proxy(hook: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """A proxy node hook that delegates to the wrapped middleware and checks the result.

    ``functools.wraps`` keeps the original signature visible (LangGraph injects arguments
    such as ``runtime`` by inspecting it) and copies ``__can_jump_to__``.
    """
    if hook in _ASYNC_HOOKS:

        @functools.wraps(original)
        async def async_hook(self: _PluginMiddlewareProxy, *args: Any, **kwargs: Any) -> Any:
            result = await getattr(self._inner, hook)(*args, **kwargs)
            return self._checked(hook, result)

        return async_hook

    @functools.wraps(original)
    def sync_hook(self: _PluginMiddlewareProxy, *args: Any, **kwargs: Any) -> Any:
        return self._checked(hook, getattr(self._inner, hook)(*args, **kwargs))

    return sync_hook


def _wrap_proxy(hook: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """A proxy ``wrap_*`` hook: a plain pass-through (CORE-52 puts no limit on them)."""
    if hook in _ASYNC_HOOKS:

        @functools.wraps(original)
        async def async_hook(self: _PluginMiddlewareProxy, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self._inner, hook)(*args, **kwargs)

        return async_hook

    @functools.wraps(original)
    def sync_hook(self: _PluginMiddlewareProxy, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, hook)(*args, **kwargs)

    return sync_hook


def wrap_plugin_middleware(
    plugin: str, middleware: AgentMiddleware[Any, Any, Any]
) -> AgentMiddleware[Any, Any, Any]:
    """Wrap a plugin middleware so its node hooks keep the state contract (CORE-52).

    The proxy's class is generated to override exactly the hooks the original class
    overrides, because ``create_agent`` adds graph nodes by comparing class attributes
    with ``AgentMiddleware``'s. It keeps the original ``name`` and ``can_jump_to``
    configuration and delegates every call. Node hooks may return ``None`` or exactly
    ``{"jump_to": "end"}``; anything else raises ``MiddlewareContractError``, failing the
    turn. ``wrap_*`` hooks pass through unchanged. A jump to ``end`` from
    ``after_agent`` is dropped, because LangChain would re-run the ``after_agent`` chain
    instead of ending; the chain, and so the run, ends normally.

    Args:
        plugin: The plugin that contributed ``middleware``.
        middleware: The plugin's middleware, already accepted by
            ``check_plugin_middleware``.

    Returns:
        The proxy to hand to ``create_agent``.
    """
    original_cls = type(middleware)
    namespace: dict[str, Any] = {"__module__": __name__}
    for hook in _NODE_HOOKS:
        if _overrides(original_cls, hook):
            namespace[hook] = _node_proxy(hook, getattr(original_cls, hook))
    for hook in _WRAP_HOOKS:
        if _overrides(original_cls, hook):
            namespace[hook] = _wrap_proxy(hook, getattr(original_cls, hook))
    proxy_cls = type(
        f"PluginMiddleware[{original_cls.__name__}]", (_PluginMiddlewareProxy,), namespace
    )
    proxy: AgentMiddleware[Any, Any, Any] = proxy_cls(plugin, middleware)
    return proxy
