"""A chat model that replays a script, for offline tests of agents, sub-agents and classifiers."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolCallChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from oracle_core._tokens import count_prompt_tokens
from oracle_core.testing._secrets import mark_sensitive

__all__ = [
    "RecordedCall",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "Step",
    "ToolNotVisibleError",
    "call_tool",
    "call_tools",
    "reply",
]

Step: TypeAlias = (
    AIMessage | str | Exception | Callable[[Sequence[BaseMessage], tuple[str, ...]], AIMessage]
)
"""One scripted model turn: a message, a plain text reply, an error to raise, or a function
of the request."""

_PREVIEW_MESSAGES = 3
_PREVIEW_CHARS = 80


class ScriptExhaustedError(AssertionError):
    """A `ScriptedChatModel` was called more often than its script allows.

    It subclasses `AssertionError` because it means the code under test made a model call
    the test did not expect.
    """


class ToolNotVisibleError(AssertionError):
    """A strict `ScriptedChatModel` was scripted to call a tool the request did not offer.

    Tests rely on it to prove that a gate (for example a middleware that filters
    `request.tools`) hid a tool from the model.
    """


@dataclass(frozen=True)
class RecordedCall:
    """One call made to a `ScriptedChatModel` (or any of its bound copies).

    Attributes:
        messages: The messages as sent to the model, the system message included if any.
        tool_names: Names of the tools bound to (visible to) the model for this call.
        system_prompt: Text of the leading `SystemMessage`, or `None` when there is none.
        prompt_tokens: The request's size by `count_prompt_tokens` (messages and tool
            schemas), measured when the model has a `context_window`; else `None`.
    """

    messages: tuple[BaseMessage, ...]
    tool_names: tuple[str, ...]
    system_prompt: str | None
    prompt_tokens: int | None = None

    @property
    def conversation(self) -> list[BaseMessage]:
        """The thread's messages as sent: no system prompt, no ``[Current time: …]`` note.

        The runtime's ``current-time`` middleware adds the note to every request; it is
        never stored, so comparing a request with a thread's history leaves it out.
        """
        start = 1 if self.system_prompt is not None else 0
        return [m for m in self.messages[start:] if not _is_time_note(m)]


@dataclass
class _ScriptState:
    """Mutable state shared by a model and every copy returned by its `bind_tools`."""

    steps: tuple[Step, ...]
    on_exhausted: Literal["error", "repeat_last"] | AIMessage
    cursor: int = 0
    next_call_id: int = 1
    calls: list[RecordedCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def reply(text: str) -> AIMessage:
    """Build a plain assistant reply without tool calls.

    Args:
        text: The reply text.

    Returns:
        An `AIMessage` whose content is `text`.
    """
    return AIMessage(content=text)


def call_tool(name: str, args: Mapping[str, Any] | None = None, id: str | None = None) -> AIMessage:
    """Build an assistant message that calls one tool.

    Args:
        name: Name of the tool to call.
        args: Arguments of the call; none by default.
        id: Tool-call id; when omitted the model assigns `call_1`, `call_2`, … as it emits it.

    Returns:
        An `AIMessage` with empty content and one tool call.
    """
    return AIMessage(content="", tool_calls=[_tool_call(name, args or {}, id)])


def call_tools(
    calls: Sequence[tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]],
) -> AIMessage:
    """Build one assistant message that calls several tools in parallel.

    Args:
        calls: `(name, args)` or `(name, args, id)` tuples, in order; missing ids are assigned
            by the model as it emits the message.

    Returns:
        An `AIMessage` with empty content and one tool call per entry.
    """
    tool_calls: list[ToolCall] = []
    for entry in calls:
        if len(entry) == 3:
            name, args, call_id = entry
            tool_calls.append(_tool_call(name, args, call_id))
        else:
            name, args = entry
            tool_calls.append(_tool_call(name, args, None))
    return AIMessage(content="", tool_calls=tool_calls)


def _tool_call(name: str, args: Mapping[str, Any], call_id: str | None) -> ToolCall:
    return ToolCall(name=name, args=dict(args), id=call_id, type="tool_call")


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model that replays scripted steps, one per model call.

    Each call consumes the next step: a `str` is a plain reply, an `AIMessage` is returned
    as a copy, an `Exception` is raised from the call (a provider that times out or
    refuses), and a callable receives `(messages, visible_tool_names)` and returns the
    `AIMessage`. Tool calls without an id get `call_1`, `call_2`, … in the order they are
    emitted. Every call is recorded in `calls`, a call that raises included.

    `bind_tools` returns a copy that shares the script, the position in it, the id counter
    and the call log, and that remembers the names of the bound tools, so the model can be
    handed to `langchain.agents.create_agent` (which binds per call) and still be inspected
    through the original object. It needs no network and reads no environment, so it can
    serve as the main model, a sub-agent model or a safety classifier (script `"SAFE"`).

    Example:
        ```python
        model = ScriptedChatModel([call_tool("add", {"a": 1, "b": 2}), "It is 3."])
        agent = create_agent(model, tools=[add])
        await agent.ainvoke({"messages": [HumanMessage("1 + 2?")]})
        assert model.calls[0].tool_names == ("add",)
        ```
    """

    strict: bool = False
    """Raise `ToolNotVisibleError` when a scripted tool call names a tool not bound."""

    context_window: int | None = None
    """Refuse a request larger than this many tokens, as a provider does."""

    _state: _ScriptState = PrivateAttr()
    _tool_names: tuple[str, ...] = PrivateAttr(default=())
    _tools: tuple[Any, ...] = PrivateAttr(default=())

    def __init__(
        self,
        steps: Sequence[Step] = (),
        *,
        on_exhausted: Literal["error", "repeat_last"] | AIMessage = "error",
        strict: bool = False,
        name: str | None = None,
        context_window: int | None = None,
    ) -> None:
        """Create a model that replays `steps`.

        Args:
            steps: The script, one step per model call.
            on_exhausted: What a call past the end of the script does: `"error"` raises
                `ScriptExhaustedError`, `"repeat_last"` replays the last step, and an
                `AIMessage` is returned (as a fresh copy) every time.
            strict: Raise `ToolNotVisibleError` when a step calls a tool that is not among
                the tools visible to that call.
            name: Optional runnable name, shown in traces.
            context_window: The model's window in tokens. A request whose messages and
                tool schemas count more (`count_prompt_tokens`) raises LangChain's
                `ContextOverflowError` without consuming a step, as a provider answers
                an oversized prompt; the model's profile reports it as
                `max_input_tokens`. Each call then records its `prompt_tokens`.

        Raises:
            TypeError: A step or `on_exhausted` has an unsupported type.
        """
        # The annotations promise these types; untyped test code gets a clear error anyway.
        for index, candidate in enumerate(steps):
            step: object = candidate
            if not isinstance(step, AIMessage | str | Exception) and not callable(step):
                msg = (
                    f"step {index} of the script is a {type(step).__name__}; use an AIMessage, "
                    "a str, an Exception or a callable (messages, tool_names) -> AIMessage"
                )
                raise TypeError(msg)
        if not isinstance(on_exhausted, AIMessage) and on_exhausted not in ("error", "repeat_last"):
            msg = (
                f"on_exhausted must be 'error', 'repeat_last' or an AIMessage, not {on_exhausted!r}"
            )
            raise TypeError(msg)
        # cache=False: a process-wide LLM cache must never answer instead of the script.
        profile: Any = None if context_window is None else {"max_input_tokens": context_window}
        super().__init__(
            name=name, cache=False, strict=strict, context_window=context_window, profile=profile
        )
        self._state = _ScriptState(steps=tuple(steps), on_exhausted=on_exhausted)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def calls(self) -> list[RecordedCall]:
        """Every call made so far, through this model or any bound copy, oldest first."""
        return self._state.calls

    @property
    def remaining(self) -> int:
        """How many scripted steps have not been consumed yet."""
        state = self._state
        return max(0, len(state.steps) - state.cursor)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """Names of the tools bound to this copy (empty for an unbound model)."""
        return self._tool_names

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> ScriptedChatModel:
        """Return a copy that sees `tools` and shares script, position and log with this one.

        Args:
            tools: Tools to make visible: `BaseTool`s, OpenAI-format dicts, provider
                built-in dicts (named by their `type`), callables or schema classes.
            tool_choice: Accepted for interface compatibility; the script decides.
            **kwargs: Accepted for interface compatibility and ignored.

        Returns:
            A `ScriptedChatModel` whose calls record the names of `tools` as visible.
        """
        del tool_choice, kwargs
        bound = self.model_copy()
        bound._state = self._state
        bound._tool_names = tuple(_tool_name(tool) for tool in tools)
        bound._tools = tuple(tools)
        return bound

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self._next_message(messages, kwargs)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Stay on the event loop: the default would hop to a thread for no benefit.
        message = self._next_message(messages, kwargs)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield ChatGenerationChunk(message=_to_chunk(self._next_message(messages, kwargs)))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        yield ChatGenerationChunk(message=_to_chunk(self._next_message(messages, kwargs)))

    def _next_message(
        self, messages: Sequence[BaseMessage], kwargs: Mapping[str, Any]
    ) -> AIMessage:
        """Record the call, consume one step and return its message with ids filled in."""
        visible = self._visible_tool_names(kwargs)
        sent = tuple(messages)
        mark_sensitive(*(m.text for m in sent if isinstance(m, HumanMessage)))
        tokens = None
        if self.context_window is not None:
            tokens = count_prompt_tokens(sent, self._request_tools(kwargs))
        state = self._state
        with state.lock:
            state.calls.append(RecordedCall(sent, visible, _system_prompt(sent), tokens))
            call_number = len(state.calls)
            window = self.context_window
            if tokens is not None and window is not None and tokens > window:
                msg = (
                    f"call #{call_number}: the prompt has {tokens} tokens, more than the "
                    f"model's context window of {window}"
                )
                raise ContextOverflowError(msg)
            step: Step
            if state.cursor < len(state.steps):
                step = state.steps[state.cursor]
                state.cursor += 1
            elif isinstance(state.on_exhausted, AIMessage):
                step = state.on_exhausted
            elif state.on_exhausted == "repeat_last" and state.steps:
                step = state.steps[-1]
            else:
                raise ScriptExhaustedError(_exhausted_message(len(state.steps), call_number, sent))
        message = _resolve(step, sent, visible)
        if self.strict:
            for tool_call in message.tool_calls:
                if tool_call["name"] not in visible:
                    msg = (
                        f"call #{call_number}: the script calls tool {tool_call['name']!r}, "
                        f"which is not visible to the model; visible tools: {list(visible)}"
                    )
                    raise ToolNotVisibleError(msg)
        with state.lock:
            for tool_call in message.tool_calls:
                if not tool_call.get("id"):
                    tool_call["id"] = f"call_{state.next_call_id}"
                    state.next_call_id += 1
        return message

    def _request_tools(self, kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        tools = kwargs.get("tools")
        if isinstance(tools, Sequence) and not isinstance(tools, str):
            return tuple(tools)
        return self._tools

    def _visible_tool_names(self, kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        # Tools passed per call (e.g. `model.bind(tools=[...])`) win over those bound.
        tools = kwargs.get("tools")
        if isinstance(tools, Sequence) and not isinstance(tools, str):
            return tuple(_tool_name(tool) for tool in tools)
        return self._tool_names


def _resolve(step: Step, messages: tuple[BaseMessage, ...], visible: tuple[str, ...]) -> AIMessage:
    if isinstance(step, Exception):
        raise step
    if isinstance(step, str):
        return AIMessage(content=step)
    if isinstance(step, AIMessage):
        # A deep copy, so filling ids or a caller mutating the result never edits the script.
        return step.model_copy(deep=True)
    produced: object = step(messages, visible)
    if not isinstance(produced, AIMessage):
        msg = f"a callable step must return an AIMessage, got {type(produced).__name__}"
        raise TypeError(msg)
    return produced.model_copy(deep=True)


def _to_chunk(message: AIMessage) -> AIMessageChunk:
    """Turn a whole message into the single, final chunk of a stream."""
    tool_call_chunks = [
        ToolCallChunk(
            name=tool_call["name"],
            args=json.dumps(tool_call["args"]),
            id=tool_call["id"],
            index=index,
            type="tool_call_chunk",
        )
        for index, tool_call in enumerate(message.tool_calls)
    ]
    # chunk_position="last" marks the stream complete, so LangChain adds no empty tail chunk.
    return AIMessageChunk(
        content=message.content,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata,
        id=message.id,
        name=message.name,
        tool_call_chunks=tool_call_chunks,
        chunk_position="last",
    )


def _tool_name(tool: Mapping[str, Any] | type | Callable[..., Any] | BaseTool) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        for key in ("name", "title", "type"):
            # "type" names provider built-ins such as {"type": "web_search"}.
            if isinstance(tool.get(key), str):
                return str(tool[key])
        msg = f"cannot tell the name of tool {dict(tool)!r}"
        raise TypeError(msg)
    return str(convert_to_openai_tool(tool)["function"]["name"])


def _is_time_note(message: BaseMessage) -> bool:
    return isinstance(message, SystemMessage) and str(message.text).startswith("[Current time: ")


def _system_prompt(messages: Sequence[BaseMessage]) -> str | None:
    if messages and isinstance(messages[0], SystemMessage):
        return str(messages[0].text)
    return None


def _exhausted_message(step_count: int, call_number: int, messages: Sequence[BaseMessage]) -> str:
    plural = "" if step_count == 1 else "s"
    lines = [
        f"ScriptedChatModel ran out of script: it had {step_count} step{plural} "
        f"and this is call #{call_number}. Last messages:"
    ]
    lines.extend(f"  {_preview(message)}" for message in messages[-_PREVIEW_MESSAGES:])
    if not messages:
        lines.append("  (none)")
    return "\n".join(lines)


def _preview(message: BaseMessage) -> str:
    text = " ".join(str(message.text).split())
    if len(text) > _PREVIEW_CHARS:
        text = text[: _PREVIEW_CHARS - 1] + "…"
    summary = f"[{message.type}] {text!r}"
    if isinstance(message, AIMessage) and message.tool_calls:
        names = ", ".join(tool_call["name"] for tool_call in message.tool_calls)
        summary += f" tool_calls: {names}"
    return summary
