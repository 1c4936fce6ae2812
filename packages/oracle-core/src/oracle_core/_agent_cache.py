"""Sharing compiled agents between turns.

``create_agent`` compiles a graph, which costs more than the rest of a turn. Two turns whose
model and tool set are the same (names, descriptions, schemas) can share one compiled
agent: what differs per turn — the system prompt, the meta-tools' catalog, request-time
tools and sub-agents, per-run counters — reaches the graph through ``TurnBindings`` in the
run context, and per-turn tools are bound as ``TurnToolProxy`` objects that dispatch to the
turn's implementation by name. The user's checkpointer is attached per turn with
``copy(update={"checkpointer": ...})``, which does not recompile.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from oracle_core._context import OracleRunContext

__all__ = ["AgentCache", "TurnToolProxy", "tool_fingerprint"]

DEFAULT_CACHE_SIZE = 64


def tool_fingerprint(tool: BaseTool) -> Hashable:
    """What must match for a per-turn tool to reuse a compiled agent's binding."""
    schema = tool.args_schema
    schema_key: Hashable = id(schema) if isinstance(schema, type) else repr(schema)
    return (tool.name, tool.description, schema_key)


def _target(tool_input: Any, name: str) -> tuple[BaseTool, Any]:
    runtime = tool_input.get("runtime") if isinstance(tool_input, dict) else None
    context = getattr(runtime, "context", None)
    turn = context.turn if isinstance(context, OracleRunContext) else None
    target = turn.tools.get(name) if turn is not None else None
    if target is None:
        raise RuntimeError(f"tool '{name}' has no implementation bound for this turn")
    return target, runtime


class TurnToolProxy(BaseTool):
    """A bound tool whose implementation is looked up in the turn's bindings."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @classmethod
    def like(cls, tool: BaseTool) -> TurnToolProxy:
        """A proxy with ``tool``'s name, description and argument schema."""
        return cls(name=tool.name, description=tool.description, args_schema=tool.args_schema)

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        target, _ = _target(tool_input, self.name)
        args, kwargs = target._to_args_and_kwargs(tool_input, tool_call_id)
        return args, {**kwargs, "__target": target}

    async def _arun(
        self,
        *args: Any,
        runtime: ToolRuntime[Any, Any] = None,  # type: ignore[assignment]
        **kwargs: Any,
    ) -> Any:
        target: BaseTool = kwargs.pop("__target")
        return await target._arun(*args, runtime=runtime, **kwargs)

    def _run(
        self,
        *args: Any,
        runtime: ToolRuntime[Any, Any] = None,  # type: ignore[assignment]
        **kwargs: Any,
    ) -> Any:
        target: BaseTool = kwargs.pop("__target")
        return target._run(*args, runtime=runtime, **kwargs)

    # Declares the injected `runtime` argument to LangGraph's ToolNode (never called).
    async def coroutine(self, runtime: ToolRuntime[Any, Any]) -> None:
        """Declares the injected ``runtime`` argument to LangGraph (never called)."""
        raise NotImplementedError


@dataclass
class _Entry:
    agent: Any
    # Strong references keep the ids in the key from being reused while cached.
    keep_alive: tuple[Any, ...]


class AgentCache:
    """LRU of compiled agents keyed by model and tool fingerprints."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get_or_compile(
        self,
        model: Any,
        static_tools: Sequence[tuple[int, BaseTool]],
        turn_tools: Sequence[tuple[int, BaseTool]],
        compile_agent: Callable[[Any, list[BaseTool]], Any],
    ) -> Any:
        """The compiled agent for this model and tool set, compiling on a miss.

        Args:
            model: The main chat model.
            static_tools: ``(position, tool)`` of tools that live as long as the runtime.
            turn_tools: ``(position, tool)`` of this turn's own tool objects.
            compile_agent: ``(model, tools) -> compiled agent`` (no checkpointer).
        """
        positions = sorted([*static_tools, *turn_tools], key=lambda item: item[0])
        turn_ids = {id(tool) for _, tool in turn_tools}
        key = (
            id(model),
            tuple(
                tool_fingerprint(t) if id(t) in turn_ids else ("static", id(t))
                for _, t in positions
            ),
        )
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry.agent
        self.misses += 1
        bound = [TurnToolProxy.like(t) if id(t) in turn_ids else t for _, t in positions]
        agent = compile_agent(model, bound)
        # Only long-lived objects are kept: per-turn tools hold request data.
        schemas = tuple(t.args_schema for _, t in turn_tools)
        self._entries[key] = _Entry(agent, (model, *(t for _, t in static_tools), *schemas))
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return agent
