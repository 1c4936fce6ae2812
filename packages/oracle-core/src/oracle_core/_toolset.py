"""A user's tools outside a turn, called one at a time (plugins spec §20.4).

``OracleRuntime.user_toolset(turn)`` binds what a turn of that user would bind (boot-time,
request-time and sub-agent tools, the tool policy applied) and runs each call through the
same tool-call middleware a turn's tool node does: ``tool-policy``, ``capability-gate``,
``tool-validation``, ``tool-repetition-guard``, ``tool-retry`` and the plugins'. It is how
hosts serve the oracle's tools to other agents (the server's ``/mcp``). There is no thread:
a call sees an empty history, with every capability loaded (the caller lists and picks
tools itself, so the capability gate has nothing to hide), and its state updates are not
kept.

What cannot happen outside a turn is refused, never run unchecked: a call the policy marks
for the user's approval (no turn can pause for it), and a tool the build did not bind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode

from oracle_core._context import OracleRunContext, RuntimeContext, TurnBindings
from oracle_core._langgraph_compat import chain_async_tool_call_wrappers
from oracle_core._middleware.policy import policy_refusal
from oracle_core._policy import ToolPolicy, ToolVerdict
from oracle_core._state import MainAgentState
from oracle_core._subagents import SubAgentToolAdapter
from oracle_core._tools import Effect, ToolInfo

__all__ = ["ExposedTool", "ToolCallOutcome", "UserToolset", "tool_call_wrapper"]

Refusal = Literal["unknown_tool", "denied", "approval_required"]


@dataclass(frozen=True)
class ExposedTool:
    """One tool of a user's toolset, as another agent would be shown it.

    Attributes:
        name: The tool's bound name.
        description: Its description, as the model gets it (plugin title prefix included).
        input_schema: The JSON schema of its arguments, as the model gets it.
        owner: The plugin that contributes it.
        effect: ``read``, ``write``, ``destructive`` or unknown (``None``).
        sub_agent: Whether it is a sub-agent's ``call_…`` wrapper.
        verdict: What the tool policy says of it; ``approve`` tools cannot be called
            through a toolset.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    owner: str | None
    effect: Effect | None
    sub_agent: bool
    verdict: ToolVerdict


@dataclass(frozen=True)
class ToolCallOutcome:
    """What one call gave.

    Attributes:
        text: The tool message's text (an error's explanation when ``is_error``).
        is_error: Whether the call failed or was refused.
        refused: Why it was not run at all, when the toolset refused it:
            ``unknown_tool``, ``denied`` or ``approval_required``. A refusal by the
            middleware (bad arguments, the repetition guard) is an error with ``None``.
    """

    text: str
    is_error: bool = False
    refused: Refusal | None = None


def tool_call_wrapper(framework: Iterable[Any], plugin: Iterable[Any]) -> Any:
    """The tool-call middleware of a turn, composed for a toolset (``None`` when empty).

    ``tool-approval`` is left out: a toolset refuses calls that need approval before the
    chain (``UserToolset.call``), and outside a graph run it could not pause anyway.
    """
    from langchain.agents.middleware import AgentMiddleware

    from oracle_core._middleware import ToolApprovalMiddleware

    def wraps_tools(middleware: Any) -> bool:
        cls = type(middleware)
        return any(
            getattr(cls, hook) is not getattr(AgentMiddleware, hook)
            for hook in ("wrap_tool_call", "awrap_tool_call")
        )

    chosen = [
        m
        for m in [*framework, *plugin]
        if wraps_tools(m) and not isinstance(m, ToolApprovalMiddleware)
    ]
    return chain_async_tool_call_wrappers([m.awrap_tool_call for m in chosen])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "\n".join(parts)


class UserToolset:
    """The tools a turn of one user would bind, callable one at a time.

    Built by ``OracleRuntime.user_toolset``; like a ``RuntimeContext`` it belongs to one
    request and must not be kept.

    Args:
        ctx: The request's runtime context (every capability loaded).
        adapters: The bound LangChain tools, meta-tools excluded.
        infos: What the build knows of each bound tool.
        policy: The runtime's tool policy.
        wrapper: The composed tool-call middleware (``tool_call_wrapper``).
        degraded: ``(plugin, what failed)`` while binding.
    """

    def __init__(
        self,
        ctx: RuntimeContext[Any],
        adapters: Iterable[BaseTool],
        infos: Mapping[str, ToolInfo],
        policy: ToolPolicy,
        wrapper: Any,
        degraded: Iterable[tuple[str, str]] = (),
    ) -> None:
        self._ctx = ctx
        self._adapters = {tool.name: tool for tool in adapters}
        self._infos = dict(infos)
        self._policy = policy
        self._wrapper = wrapper
        self.degraded = list(degraded)
        """``(plugin, what failed)`` while binding, as a turn reports them."""
        self.tools: dict[str, ExposedTool] = {
            name: self._exposed(tool) for name, tool in self._adapters.items()
        }
        """Every bound tool, by name."""

    def _exposed(self, tool: BaseTool) -> ExposedTool:
        info = self._infos.get(tool.name)
        effect = info.effect if info is not None else None
        function = convert_to_openai_tool(tool)["function"]
        return ExposedTool(
            name=tool.name,
            description=str(function.get("description") or ""),
            input_schema=dict(function.get("parameters") or {"type": "object", "properties": {}}),
            owner=info.owner if info is not None else None,
            effect=effect,
            sub_agent=isinstance(tool, SubAgentToolAdapter),
            verdict=self._policy.verdict(tool.name, effect),
        )

    async def call(
        self, name: str, args: Mapping[str, Any] | None, *, call_id: str | None = None
    ) -> ToolCallOutcome:
        """Run one call of ``name`` through the turn's tool-call middleware.

        Args:
            name: The tool's bound name.
            args: Its arguments (validated by ``tool-validation``, as the model's are).
            call_id: The call's id (``rt_ctx.tool_call_id``); default a fresh one.
        """
        tool = self._adapters.get(name)
        exposed = self.tools.get(name)
        if tool is None or exposed is None:
            return ToolCallOutcome(
                f"There is no tool '{name}' here.", is_error=True, refused="unknown_tool"
            )
        verdict = exposed.verdict
        if verdict.action == "deny":  # never bound; kept for a policy that changed
            return ToolCallOutcome(
                policy_refusal(name, verdict.rule), is_error=True, refused="denied"
            )
        if verdict.action == "approve":
            return ToolCallOutcome(
                f"Tool '{name}' needs the user's approval ({verdict.rule}), which cannot be "
                "asked outside a conversation, so it was not run. Ask the user to request it "
                "in a conversation with this oracle.",
                is_error=True,
                refused="approval_required",
            )
        call_id = call_id or f"call_{uuid.uuid4().hex[:24]}"
        context = OracleRunContext.of(
            self._ctx, TurnBindings(tool_infos=self._infos, tools=self._adapters)
        )
        ctx = self._ctx
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(
            MainAgentState, context_schema=OracleRunContext
        )
        graph.add_node("tools", ToolNode([tool], awrap_tool_call=self._wrapper))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        request = AIMessage(
            content="", tool_calls=[{"name": name, "args": dict(args or {}), "id": call_id}]
        )
        state: Any = {
            "messages": [request],
            "loaded_plugins": sorted(ctx.loaded_plugins),
            "config": {"did": ctx.user.did, "ws_id": None},
            "client": ctx.session.client,
        }
        try:
            result: dict[str, Any] = await graph.compile().ainvoke(state, context=context)
        except Exception as exc:  # what no middleware turned into an error message
            ctx.logger.exception("tool '%s' failed outside a turn", name)
            return ToolCallOutcome(f"Error: {type(exc).__name__}: {exc}", is_error=True)
        return _answer(result.get("messages", ()), call_id)


def _answer(messages: Iterable[Any], call_id: str) -> ToolCallOutcome:
    for message in messages:
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
            return ToolCallOutcome(_text(message.content), is_error=message.status == "error")
    return ToolCallOutcome("The tool gave no result.", is_error=True)
