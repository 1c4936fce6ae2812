"""Framework middleware that only wrap calls, handed to ``create_agent`` as one.

``create_agent`` wraps every middleware's ``wrap_*`` hooks in LangSmith's ``traceable``,
whose wrapper sets up and ends a run on every call, traced or not: about 20-30 us a call,
and a turn with one tool call passes a dozen of them through the framework middleware
alone (four hooks around each of two model calls, four around the tool call). Runs of
consecutive framework middleware whose only hooks are ``wrap_*`` (no node hooks, no
tools, at most one state schema) are therefore folded into one ``FrameworkChain``: LangChain
wraps the chain once, and the chain runs its members' hooks composed by LangChain's own
composition functions, so the members see exactly what they would see one by one (the
first member outermost, commands from each layer kept). With LangSmith tracing on, the
chain is one span (named after its members, ``capability-gate+tool-validation+...``)
instead of one per member.

``OracleRuntime.framework_middleware`` keeps the members, in the order of CORE-76;
``OracleRuntime.framework_chain`` is what agents are built with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from oracle_core._langgraph_compat import (
    chain_async_model_call_handlers,
    chain_async_tool_call_wrappers,
    chain_model_call_handlers,
    chain_tool_call_wrappers,
)

# The node hooks and the state schemas that add no keys, as the plugin contract reads them.
from oracle_core._middleware.contract import _DEFAULT_STATE_SCHEMAS, _NODE_HOOKS

__all__ = ["FrameworkChain", "fold_wrap_only"]


def _overrides(middleware: AgentMiddleware[Any, Any], *hooks: str) -> bool:
    cls = type(middleware)
    return any(getattr(cls, hook) is not getattr(AgentMiddleware, hook) for hook in hooks)


def _own_schema(middleware: AgentMiddleware[Any, Any]) -> type | None:
    schema = middleware.state_schema
    return None if schema in _DEFAULT_STATE_SCHEMAS else schema


def _foldable(middleware: AgentMiddleware[Any, Any]) -> bool:
    """Whether only ``wrap_*`` hooks make ``middleware`` what it is."""
    return not _overrides(middleware, *_NODE_HOOKS) and not getattr(middleware, "tools", None)


class FrameworkChain(AgentMiddleware[Any, Any]):
    """Several ``wrap_*``-only middleware run as one (see the module docs).

    Built by `fold_wrap_only`, as a subclass that defines only the hooks its members have,
    since LangChain adds a layer for every hook a middleware class overrides.

    Args:
        members: The middleware, outermost first; two or more, each `_foldable`, at most
            one with a state schema of its own.
    """

    def __init__(self, members: Sequence[AgentMiddleware[Any, Any]]) -> None:
        super().__init__()
        self.members = tuple(members)
        schemas = [s for s in map(_own_schema, self.members) if s is not None]
        if len(self.members) < 2 or not all(map(_foldable, self.members)) or len(schemas) > 1:
            raise ValueError("a FrameworkChain folds two or more wrap-only middleware")
        if schemas:
            self.state_schema = schemas[0]
        self._name = "+".join(member.name for member in self.members)
        # LangChain's selection: a member with either form of a hook takes part in both
        # paths, so that the form it lacks raises as it would on its own.
        model = [m for m in self.members if _overrides(m, "wrap_model_call", "awrap_model_call")]
        tool = [m for m in self.members if _overrides(m, "wrap_tool_call", "awrap_tool_call")]
        # Each is None when no member has the hook; the class then lacks it (`_chain_class`).
        self._model: Any = chain_model_call_handlers([m.wrap_model_call for m in model])
        self._amodel: Any = chain_async_model_call_handlers([m.awrap_model_call for m in model])
        self._tool: Any = chain_tool_call_wrappers([m.wrap_tool_call for m in tool])
        self._atool: Any = chain_async_tool_call_wrappers([m.awrap_tool_call for m in tool])

    @property
    def name(self) -> str:
        return self._name


def _wrap_model_call(self: FrameworkChain, request: Any, handler: Callable[[Any], Any]) -> Any:
    return self._model(request, handler)


async def _awrap_model_call(
    self: FrameworkChain, request: Any, handler: Callable[[Any], Awaitable[Any]]
) -> Any:
    return await self._amodel(request, handler)


def _wrap_tool_call(self: FrameworkChain, request: Any, handler: Callable[[Any], Any]) -> Any:
    return self._tool(request, handler)


async def _awrap_tool_call(
    self: FrameworkChain, request: Any, handler: Callable[[Any], Awaitable[Any]]
) -> Any:
    return await self._atool(request, handler)


_CLASSES: dict[tuple[bool, bool], type[FrameworkChain]] = {}


def _chain_class(model: bool, tool: bool) -> type[FrameworkChain]:
    cls = _CLASSES.get((model, tool))
    if cls is None:
        hooks: dict[str, Any] = {}
        if model:
            hooks.update(wrap_model_call=_wrap_model_call, awrap_model_call=_awrap_model_call)
        if tool:
            hooks.update(wrap_tool_call=_wrap_tool_call, awrap_tool_call=_awrap_tool_call)
        cls = _CLASSES[(model, tool)] = type("FrameworkChain", (FrameworkChain,), hooks)
    return cls


def fold_wrap_only(middleware: Sequence[AgentMiddleware[Any, Any]]) -> list[Any]:
    """``middleware`` with each run of two or more consecutive wrap-only middleware
    folded into one `FrameworkChain`, in place; the order of every hook is unchanged."""
    folded: list[Any] = []
    run: list[AgentMiddleware[Any, Any]] = []

    def close_run() -> None:
        if len(run) == 1:
            folded.append(run[0])
        elif run:
            model = any(_overrides(m, "wrap_model_call", "awrap_model_call") for m in run)
            tool = any(_overrides(m, "wrap_tool_call", "awrap_tool_call") for m in run)
            folded.append(_chain_class(model, tool)(run))
        run.clear()

    for item in middleware:
        schema = _own_schema(item)
        if _foldable(item) and not (
            schema is not None and any(_own_schema(m) is not None for m in run)
        ):
            run.append(item)
            continue
        close_run()
        if _foldable(item):
            run.append(item)  # a second schema starts a run of its own
        else:
            folded.append(item)
    close_run()
    return folded
