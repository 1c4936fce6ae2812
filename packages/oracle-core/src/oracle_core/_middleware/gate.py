"""``capability-gate``: hides and refuses tools of plugins not loaded in the thread."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import (
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain_core.messages import SystemMessage, ToolMessage

from oracle_core._middleware._common import (
    RefusingToolMiddleware,
    error_tool_message,
    loaded_plugins,
    tool_index,
    turn_bindings,
)
from oracle_core._tools import ToolInfo

__all__ = ["CapabilityGateMiddleware"]


class CapabilityGateMiddleware(RefusingToolMiddleware):
    """Shows the model only the tools of loaded plugins (CORE-57, CORE-58).

    Every tool is bound when the agent is created; on each model call this middleware
    removes the ``on-demand`` tools whose plugin is in neither ``state.loaded_plugins``
    nor the turn's ``preloaded_plugins``, so a ``load_capability`` takes effect from the
    next model call. A call to such a tool that reaches the tool node anyway (a
    hallucinated name, or a call issued in the same step as its own load) is refused with
    an error ``ToolMessage``.

    Tools missing from the index and provider tools given as dicts always pass.

    When the run context carries ``TurnBindings`` (the runtime shares one compiled agent
    between turns), the index and the turn's system prompt come from there: the gate
    sets the system message of every model call to the turn's prompt.

    Args:
        tool_index: What the runtime knows about each bound tool, by name; ``None`` reads
            it from the turn bindings.
    """

    def __init__(self, tool_index: Mapping[str, ToolInfo] | None = None) -> None:
        super().__init__()
        self._tool_index = None if tool_index is None else dict(tool_index)

    @property
    def name(self) -> str:
        """The reserved name ``capability-gate``."""
        return "capability-gate"

    def _gated_owner(
        self, tool_name: str, loaded: frozenset[str], index: Mapping[str, ToolInfo]
    ) -> str | None:
        """The capability (plugin) that must be loaded before ``tool_name`` may run, if any."""
        info = index.get(tool_name)
        name = None if info is None or info.visibility != "on-demand" else info.loaded_as
        return None if name is None or name in loaded else name

    def _shape(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with hidden tools removed and the turn's system prompt set."""
        # `runtime` is None when a request is built by hand, outside a graph.
        loaded = loaded_plugins(request.state, getattr(request.runtime, "context", None))
        index = tool_index(self._tool_index, request.runtime)
        visible = [
            tool
            for tool in request.tools
            if isinstance(tool, dict) or self._gated_owner(tool.name, loaded, index) is None
        ]
        bindings = turn_bindings(request.runtime)
        prompt = getattr(bindings, "system_prompt", None)
        if prompt is not None:
            return request.override(tools=visible, system_message=SystemMessage(prompt))
        return request if len(visible) == len(request.tools) else request.override(tools=visible)

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        loaded = loaded_plugins(request.state, getattr(request.runtime, "context", None))
        tool_name = request.tool_call["name"]
        owner = self._gated_owner(tool_name, loaded, tool_index(self._tool_index, request.runtime))
        if owner is None:
            return None
        names = json.dumps([owner])
        return error_tool_message(
            request,
            f"Tool '{tool_name}' belongs to the capability '{owner}', which is not loaded in "
            f"this conversation, so it was not run. Call load_capability with "
            f"names={names} first, then call '{tool_name}' again.",
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the tools of unloaded ``on-demand`` plugins removed."""
        return handler(self._shape(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Async form of ``wrap_model_call``."""
        return await handler(self._shape(request))
