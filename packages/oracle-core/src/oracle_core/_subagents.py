"""Sub-agents as ``call_…`` tools of the main agent (CORE-16 … 19)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field

from oracle_core._context import OracleRunContext, RuntimeContext
from oracle_core._providers import context_window
from oracle_core._tool_adapter import PluginToolAdapter, context_from_runtime, model_description
from oracle_core._tools import PluginSubAgent, PluginTool, ToolInfo

__all__ = ["ResolvedSubAgent", "SubAgentToolAdapter", "create_summarization_middleware"]

_background: set[asyncio.Task[None]] = set()


def create_summarization_middleware(
    model: BaseChatModel,
    *,
    context_window: int | None = None,
    windows: Mapping[str, int] | None = None,
) -> Any:
    """The ``history-condenser`` middleware, as every sub-agent runs it.

    Args:
        model: The model that writes the summaries (the runtime passes ``utility``).
        context_window: The window to keep each request inside: the sub-agent model's
            (``context_window(role, model)``); ``None`` reads the turn's main window.
        windows: ``LLM_CONTEXT_WINDOWS`` overrides, for the summarizer's own window.
    """
    from oracle_core._middleware import HistoryCondenserMiddleware

    return HistoryCondenserMiddleware(window=context_window, summarizer=model, windows=windows)


class SubAgentTaskArgs(BaseModel):
    """The single argument of every sub-agent tool."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(
        min_length=1,
        description=(
            "Everything the sub-agent will see: it gets no conversation history and no "
            "user context. State the objective, every fact it needs (names, ids, URLs, "
            "dates), the expected output and any limits."
        ),
    )


class ResolvedSubAgent(BaseModel):
    """A sub-agent with its prompt and tools resolved for one build."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    spec: PluginSubAgent
    owner: str
    system_prompt: str
    tools: list[PluginTool]


def resolve_sub_agent(
    spec: PluginSubAgent, owner: str, ctx: RuntimeContext[Any]
) -> ResolvedSubAgent:
    """Run the ``system_prompt``/``tools`` callables (failures propagate to the build)."""
    prompt = spec.system_prompt(ctx) if callable(spec.system_prompt) else spec.system_prompt
    tools = spec.tools(ctx) if callable(spec.tools) else list(spec.tools)
    return ResolvedSubAgent(spec=spec, owner=owner, system_prompt=str(prompt), tools=tools)


def _forwarded(
    messages: Sequence[BaseMessage], names: bool | Sequence[str], parent_id: str
) -> list[BaseMessage]:
    wanted = None if names is True else set(names or ())
    forwarded: list[BaseMessage] = []
    kept_ids: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = [c for c in message.tool_calls if wanted is None or c["name"] in wanted]
            if not calls:
                continue
            rewritten = [{**c, "id": f"{parent_id}_{c['id']}"} for c in calls]
            kept_ids.update(str(c["id"]) for c in calls)
            forwarded.append(
                AIMessage(content="", tool_calls=rewritten, id=f"{parent_id}_{message.id}")
            )
        elif isinstance(message, ToolMessage) and message.tool_call_id in kept_ids:
            forwarded.append(
                message.model_copy(
                    update={
                        "tool_call_id": f"{parent_id}_{message.tool_call_id}",
                        "id": f"{parent_id}_{message.id}",
                    }
                )
            )
    return forwarded


class SubAgentToolAdapter(BaseTool):
    """The ``call_…`` tool running one sub-agent in a fresh ``create_agent``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    args_schema: type[BaseModel] = SubAgentTaskArgs
    resolved: ResolvedSubAgent
    checkpointer: Any = None
    time_line: str = ""
    date_line: str = ""
    windows: dict[str, int] = Field(default_factory=dict)
    title: str | None = None
    logger: Any = None
    shared_middleware: list[Any] = Field(default_factory=list)

    @classmethod
    def build(
        cls,
        resolved: ResolvedSubAgent,
        *,
        title: str | None,
        checkpointer: Any,
        time_line: str,
        logger: logging.Logger,
        date_line: str = "",
        windows: Mapping[str, int] | None = None,
        shared_middleware: Sequence[Any] = (),
    ) -> SubAgentToolAdapter:
        """The tool for ``resolved``, description prefixed with the plugin title.

        ``date_line`` goes in the sub-agent's system prompt and ``time_line`` in a note on
        its task (``current-time``), as for the main agent. ``windows`` are the
        ``LLM_CONTEXT_WINDOWS`` overrides its history is condensed against.
        ``shared_middleware`` are the plugins' middleware that declare
        ``reaches_sub_agents``: they run in the sub-agent before its own.
        """
        return cls(
            name=resolved.spec.tool_name,
            description=model_description(title, resolved.spec.description),
            resolved=resolved,
            checkpointer=checkpointer,
            time_line=time_line,
            date_line=date_line,
            windows=dict(windows or {}),
            title=title,
            logger=logger,
            shared_middleware=list(shared_middleware),
        )

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        raw = {"task": tool_input} if isinstance(tool_input, str) else dict(tool_input)
        runtime = raw.pop("runtime", None)
        args = SubAgentTaskArgs.model_validate(raw)
        return (), {"task": args.task, "runtime": runtime}

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("sub-agents run asynchronously; invoke the agent with ainvoke")

    async def _arun(
        self,
        *,
        task: str,
        runtime: ToolRuntime[Any, Any] = None,  # type: ignore[assignment]
    ) -> Any:
        resolved = self.resolved
        spec = resolved.spec
        ctx = context_from_runtime(runtime, resolved.owner, None)
        parent_id = (runtime.tool_call_id if runtime else None) or ""
        try:
            text, new_messages = await self._run_inner(task, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            ctx.logger.exception("sub-agent '%s' failed", spec.name)
            return ToolMessage(
                content=f"Error running {spec.name}: {type(exc).__name__}: {exc}",
                tool_call_id=parent_id,
                name=self.name,
                status="error",
            )
        if spec.on_complete is not None:
            self._schedule_on_complete(text, ctx)
        final = ToolMessage(content=text, tool_call_id=parent_id, name=self.name)
        if not spec.forward_tools:
            return final
        forwarded = _forwarded(new_messages, spec.forward_tools, parent_id)
        # The final answer comes first so the parent's tool call is answered before
        # the forwarded calls: chat APIs reject an assistant tool call whose result
        # does not directly follow it.
        return Command(update={"messages": [final, *forwarded]})

    async def _run_inner(
        self, task: str, ctx: RuntimeContext[Any]
    ) -> tuple[str, list[BaseMessage]]:
        from langchain.agents import create_agent

        from oracle_core._middleware import (
            CurrentTimeMiddleware,
            EffectAwareToolRetryMiddleware,
            ToolPolicyMiddleware,
            ToolValidationMiddleware,
            wrap_plugin_middleware,
        )
        from oracle_core._middleware.chain import fold_wrap_only

        resolved = self.resolved
        spec = resolved.spec
        if ctx.llm is None:
            raise RuntimeError("no model accessor in this context")
        model = ctx.llm.get(spec.model)
        # The tool policy holds here as on the main agent (§20.1): denied tools are not
        # bound, and the policy middleware runs first.
        policy = ctx.tool_policy
        tools = [
            PluginToolAdapter.from_plugin_tool(t, owner=resolved.owner, title=None)
            for t in resolved.tools
            if not policy.denies(t.name)
        ]
        # No approval can be asked from here (the parent's turn would have to pause and
        # replay this run): calls that need one are refused, never run unapproved.
        verdicts = {t.name: policy.verdict(t.name, t.effect) for t in resolved.tools}
        unapprovable = {n: v.rule or "" for n, v in verdicts.items() if v.action == "approve"}
        # Bad arguments and failing tools come back to the sub-agent's model as tool
        # errors, as on the main agent, instead of ending the sub-agent's run.
        index = {
            t.name: ToolInfo(
                name=t.name, owner=resolved.owner, visibility="always", effect=t.effect
            )
            for t in resolved.tools
        }
        middleware: list[Any] = [
            ToolPolicyMiddleware(policy, unapprovable=unapprovable),
            ToolValidationMiddleware(),
            EffectAwareToolRetryMiddleware(index),
        ]
        middleware += self.shared_middleware
        middleware += [wrap_plugin_middleware(resolved.owner, m) for m in spec.middlewares]
        middleware.append(CurrentTimeMiddleware(self.time_line or None))
        window = context_window(spec.model, model, self.windows)
        middleware.append(
            create_summarization_middleware(
                ctx.llm.get("utility"), context_window=window, windows=self.windows
            )
        )
        today = f"Today is {self.date_line}." if self.date_line else ""
        prompt = "\n\n".join(p for p in (resolved.system_prompt, today) if p)
        agent = create_agent(
            model,
            tools,
            system_prompt=prompt,
            middleware=fold_wrap_only(middleware),
            context_schema=OracleRunContext,
            checkpointer=self.checkpointer,
            name=spec.name,
        )
        session_id = ctx.session.id
        config: Any = {"configurable": {"thread_id": f"{session_id}_{spec.name}"}}
        context = OracleRunContext(
            user_did=ctx.user.did,
            session_id=session_id,
            request_id=ctx.session.request_id,
            client=ctx.session.client,
            ws_id=ctx.session.ws_id,
            room_id=ctx.session.room_id,
            timezone=ctx.user.timezone,
            current_time=ctx.user.current_time,
            runtime_context=ctx,
        )
        before = 0
        if self.checkpointer is not None:
            snapshot = await agent.aget_state(config)
            before = len(snapshot.values.get("messages", [])) if snapshot.values else 0
        result = await agent.ainvoke(
            {"messages": [HumanMessage(content=task)]}, config=config, context=context
        )
        messages: list[BaseMessage] = list(result.get("messages", []))
        new_messages = messages[before + 1 :]
        final = next((m for m in reversed(new_messages) if isinstance(m, AIMessage)), None)
        text = final.text if final is not None else ""
        return text, new_messages

    def _schedule_on_complete(self, text: str, ctx: RuntimeContext[Any]) -> None:
        callback = self.resolved.spec.on_complete
        assert callback is not None
        name = self.resolved.spec.name

        async def run() -> None:
            try:
                result = callback(text, ctx)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                ctx.logger.exception("on_complete of sub-agent '%s' failed", name)

        task = asyncio.get_running_loop().create_task(run())
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def coroutine(self, runtime: ToolRuntime[Any, Any]) -> None:
        """Declares the injected ``runtime`` argument to LangGraph (never called)."""
        raise NotImplementedError
