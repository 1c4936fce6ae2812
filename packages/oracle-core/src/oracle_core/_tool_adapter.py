"""Turns ``PluginTool``s into LangChain tools that receive a fresh ``RuntimeContext``.

The adapter is a ``BaseTool`` whose ``runtime`` argument LangGraph's ``ToolNode``
injects (current state, run context, tool-call id); the plugin handler then gets its
validated argument model and a ``RuntimeContext`` rebuilt from them (CORE-47).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, ValidationError

from oracle_core._context import OracleRunContext, RuntimeContext
from oracle_core._tools import PluginTool

__all__ = ["PluginToolAdapter", "ToolHandlerError", "encode_tool_result", "model_description"]


class ToolHandlerError(RuntimeError):
    """A tool handler raised a pydantic ``ValidationError`` of its own.

    Re-raised under this type so it is treated as a failure of the tool, not as bad
    arguments from the model.
    """


def model_description(title: str | None, description: str) -> str:
    """``[{title}] {description}`` unless already so prefixed (CORE-14)."""
    if not title:
        return description
    prefix = f"[{title}]"
    return description if description.startswith(prefix) else f"{prefix} {description}"


def encode_tool_result(result: Any) -> Any:
    """ToolMessage content for a handler result (CORE-13).

    ``str``, ``ToolMessage`` and ``Command`` pass through; pydantic models are dumped in
    JSON mode; anything else is JSON-encoded.
    """
    if isinstance(result, str | ToolMessage | Command):
        return result
    if isinstance(result, BaseModel):
        return json.dumps(result.model_dump(mode="json"), ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False, default=str)


def context_from_runtime(
    runtime: ToolRuntime[Any, Any] | None,
    owner: str | None,
    fallback: RuntimeContext[Any] | None,
) -> RuntimeContext[Any]:
    """Rebuild the request's ``RuntimeContext`` for one tool call."""
    base: RuntimeContext[Any] | None = None
    state: dict[str, Any] = {}
    tool_call_id: str | None = None
    if runtime is not None:
        context = runtime.context
        if isinstance(context, OracleRunContext):
            base = context.runtime_context
        state = dict(runtime.state or {})
        tool_call_id = runtime.tool_call_id
    base = base or fallback
    if base is None:
        raise RuntimeError(
            "a plugin tool was invoked outside an oracle agent; use TestRuntime.invoke_tool"
        )
    ctx = base.with_state(state, tool_call_id=tool_call_id) if runtime is not None else base
    return ctx.for_plugin(owner) if owner else ctx


class PluginToolAdapter(BaseTool):
    """LangChain face of one ``PluginTool`` (or any handler with an args model)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    plugin_tool: PluginTool
    owner: str | None = None
    # Typed loosely: pydantic must not validate the context dataclass field by field.
    fallback_context: Any = None

    @classmethod
    def from_plugin_tool(
        cls, tool: PluginTool, *, owner: str | None, title: str | None
    ) -> PluginToolAdapter:
        """Adapter whose description carries the plugin title prefix."""
        return cls(
            name=tool.name,
            description=model_description(title, tool.description),
            args_schema=tool.args_schema,
            plugin_tool=tool,
            owner=owner,
        )

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        raw: dict[str, Any]
        schema = self.plugin_tool.args_schema
        if isinstance(tool_input, str):
            fields = list(schema.model_fields) if isinstance(schema, type) else []
            raw = {fields[0]: tool_input} if fields else {}
        else:
            raw = dict(tool_input)
        runtime = raw.pop("runtime", None)
        args: Any = schema.model_validate(raw) if isinstance(schema, type) else raw
        return (), {"args": args, "runtime": runtime}

    # `runtime` is annotated plainly (not `| None`) so LangChain recognises it as injected
    # and keeps the whole state out of callback inputs and traces.
    async def _arun(
        self,
        *,
        args: Any,
        runtime: ToolRuntime[Any, Any] = None,  # type: ignore[assignment]
        **_: Any,
    ) -> Any:
        ctx = context_from_runtime(runtime, self.owner, self.fallback_context)
        try:
            result = self.plugin_tool.handler(args, ctx)
            if inspect.isawaitable(result):
                result = await result
        except ValidationError as exc:
            raise ToolHandlerError(f"{self.name} failed: {exc}") from exc
        return encode_tool_result(result)

    def _run(
        self,
        *,
        args: Any,
        runtime: ToolRuntime[Any, Any] = None,  # type: ignore[assignment]
        **_: Any,
    ) -> Any:
        handler: Callable[..., Any] = self.plugin_tool.handler
        if inspect.iscoroutinefunction(handler):
            raise RuntimeError(f"tool '{self.name}' is async; invoke the agent with ainvoke")
        ctx = context_from_runtime(runtime, self.owner, self.fallback_context)
        try:
            result = handler(args, ctx)
        except ValidationError as exc:
            raise ToolHandlerError(f"{self.name} failed: {exc}") from exc
        if inspect.isawaitable(result):
            raise RuntimeError(f"tool '{self.name}' is async; invoke the agent with ainvoke")
        return encode_tool_result(result)

    # LangGraph's ToolNode finds the argument to inject by reading the annotations of a
    # `func`/`coroutine` attribute; this method exists only to declare `runtime`.
    async def coroutine(self, runtime: ToolRuntime[Any, Any]) -> None:
        """Declares the injected ``runtime`` argument to LangGraph (never called)."""
        raise NotImplementedError
