"""``history-condenser``: a thread's older messages folded into a summary that fits the window."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import get_buffer_string
from langgraph.constants import TAG_NOSTREAM
from langgraph.types import Command

from oracle_core._middleware._common import state_value, turn_bindings
from oracle_core._providers import DEFAULT_CONTEXT_WINDOW, context_window
from oracle_core._tokens import (
    count_prompt_tokens,
    count_tokens,
    load_encoding,
    tool_schema_json,
    truncate_tokens,
)

__all__ = ["HistoryCondenserMiddleware", "HistorySummary", "reply_reserve"]

_logger = logging.getLogger("oracle.condense")

# Stored messages do not change, so their measures are kept between calls and turns.
_SIZE_CACHE_ENTRIES = 100_000

SUMMARY_HEADING = "Summary of the earlier conversation, which you can no longer see:"

SUMMARY_PROMPT = """You keep the running summary of a conversation between a user and an \
AI assistant. The summary stands in for the older messages, which the assistant no \
longer sees. Update it with the new messages below. Keep every fact, name, number, id, \
decision, preference and open task that may matter later, and what tools returned; \
drop greetings and repetition. Write at most {limit} tokens. Answer with the updated \
summary only.

<summary>
{summary}
</summary>

<new_messages>
{messages}
</new_messages>"""


class HistorySummary(TypedDict):
    """The condensed part of a thread, kept in its checkpoint under ``history_summary``.

    Attributes:
        text: The summary of every message up to and including ``through``.
        through: Id of the last message the summary covers.
    """

    text: str
    through: str


class CondensedState(AgentState[Any]):
    """The state key the condenser adds to every agent that uses it."""

    history_summary: NotRequired[HistorySummary | None]


def reply_reserve(window: int) -> int:
    """Tokens of a window kept free for the model's reply: a quarter, at most 16384."""
    return min(window // 4, 16_384)


def _summary_message(text: str) -> HumanMessage:
    return HumanMessage(f"{SUMMARY_HEADING}\n\n{text}")


def _byte_bound(messages: Sequence[AnyMessage]) -> int:
    """An upper bound of ``count_prompt_tokens(messages)``: a token is at least one byte."""
    return sum(_message_bytes(message) for message in messages)


def _message_bytes(message: AnyMessage) -> int:
    """:func:`_byte_bound` of one message."""
    total = 4 + len(str(message.text).encode())
    if isinstance(message, AIMessage):
        total += sum(len(repr(call).encode()) for call in message.tool_calls)
    return total


class _Measure:
    """A stored message's byte bound and (once counted) tokens, with the field values
    they were measured on."""

    __slots__ = ("calls", "calls_length", "content", "kind", "length", "size", "tokens")

    def __init__(self, message: AnyMessage, calls: Any) -> None:
        self.kind = message.type
        self.content = message.content
        self.length = len(message.content)
        self.calls = calls
        self.calls_length = None if calls is None else len(calls)
        self.size = _message_bytes(message)
        self.tokens: int | None = None

    def fits(self, message: AnyMessage, calls: Any) -> bool:
        """Whether ``message`` still holds exactly what was measured: the same objects
        (a thread's loads share its messages' field values, see ``_sqlite_saver``)."""
        return (
            self.content is message.content
            and self.calls is calls
            and self.kind == message.type
            and self.length == len(message.content)
            and self.calls_length == (None if calls is None else len(calls))
        )


def _tools_byte_bound(tools: Sequence[Any]) -> int:
    """An upper bound of what ``tools`` add to ``count_prompt_tokens``: their schemas' bytes."""
    return sum(len(tool_schema_json(tool).encode()) for tool in tools)


def _cut_points(messages: Sequence[AnyMessage]) -> list[int]:
    """Indices where a tail may start: never on a tool result, which needs its call, and
    only after a stored message (one with an id), which the summary can name."""
    return [
        i
        for i, m in enumerate(messages)
        if i > 0 and not isinstance(m, ToolMessage) and messages[i - 1].id is not None
    ]


class HistoryCondenserMiddleware(AgentMiddleware[CondensedState, Any]):
    """Keeps every model request inside its model's context window (CORE-18).

    On each model call it measures the request as it will be sent: system prompt, tool
    schemas and messages (``count_prompt_tokens``). When that passes the window less a
    reserve for the reply (``reply_reserve``), the oldest messages are folded into a
    running summary by the ``utility`` model and the request carries the summary and
    the most recent messages instead. The summary goes into the checkpoint
    (``history_summary``: its text and the id of the last message it covers), so the
    next call and the next turn start from it; the thread's messages themselves stay as
    they were, so the history a client reads loses nothing.

    LangChain's ``SummarizationMiddleware`` is not used because it replaces the thread's
    messages with the summary (the stored history would be lost), counts only the
    messages against its trigger (not the system prompt and tools that share the window),
    and trims what it summarises to the last few thousand tokens, which drops an earlier
    summary from the next one.

    Args:
        window: The model's context window; ``None`` reads the turn's from the run
            context's ``TurnBindings`` (the main agent, whose compiled graph is shared).
        summarizer: The model that writes summaries; ``None`` takes the ``utility`` role
            from the run's ``RuntimeContext`` when a summary is needed.
        windows: ``LLM_CONTEXT_WINDOWS`` overrides, for the summarizer's own window.
    """

    state_schema = CondensedState

    def __init__(
        self,
        *,
        window: int | None = None,
        summarizer: BaseChatModel | None = None,
        windows: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__()
        self._window = window
        self._summarizer = summarizer
        self._windows = dict(windows or {})
        self._measures: OrderedDict[str, _Measure] = OrderedDict()

    @property
    def name(self) -> str:
        """The reserved name ``history-condenser``."""
        return "history-condenser"

    def _window_of(self, request: ModelRequest[Any]) -> int:
        if self._window is not None:
            return self._window
        window = getattr(turn_bindings(request.runtime), "context_window", None)
        return window if isinstance(window, int) and window > 0 else DEFAULT_CONTEXT_WINDOW

    def _summarizer_of(self, request: ModelRequest[Any]) -> BaseChatModel:
        if self._summarizer is not None:
            return self._summarizer
        rt_ctx = getattr(getattr(request.runtime, "context", None), "runtime_context", None)
        llm = getattr(rt_ctx, "llm", None)
        if llm is None:
            raise RuntimeError("history-condenser: no model accessor in the run context")
        model: BaseChatModel = llm.get("utility")
        return model

    @staticmethod
    def _visible(request: ModelRequest[Any]) -> tuple[HistorySummary | None, list[AnyMessage]]:
        """The stored summary and the request's messages it does not cover."""
        summary = state_value(request.state, "history_summary")
        messages = list(request.messages)
        if not summary:
            return None, messages
        stored = list(state_value(request.state, "messages") or ())
        ids = [m.id for m in stored]
        if summary["through"] not in ids:
            # The thread no longer holds that message; summarise it again from the start.
            return None, messages
        covered = set(ids[: ids.index(summary["through"]) + 1])
        return summary, [m for m in messages if m.id is None or m.id not in covered]

    def _measure(self, message: AnyMessage) -> _Measure | None:
        """The stored message's measure, made when missing or stale; ``None`` for one
        with no id (not stored, measured each time)."""
        if message.id is None:
            return None
        calls = message.tool_calls if isinstance(message, AIMessage) else None
        measure = self._measures.get(message.id)
        if measure is None or not measure.fits(message, calls):
            measure = self._measures[message.id] = _Measure(message, calls)
            if len(self._measures) > _SIZE_CACHE_ENTRIES:
                self._measures.popitem(last=False)
        return measure

    def _bytes(self, messages: Sequence[AnyMessage]) -> int:
        """:func:`_byte_bound` of ``messages``, remembered for stored messages: a long
        thread's every model call would otherwise render and encode all of it again."""
        total = 0
        for message in messages:
            measure = self._measure(message)
            total += _message_bytes(message) if measure is None else measure.size
        return total

    def _size(self, message: AnyMessage) -> int:
        """``count_prompt_tokens([message])``, remembered for stored messages."""
        measure = self._measure(message)
        if measure is None:
            return count_prompt_tokens([message])
        if measure.tokens is None:
            measure.tokens = count_prompt_tokens([message])
        return measure.tokens

    def _compose(
        self, request: ModelRequest[Any], summary: str | None, tail: Sequence[AnyMessage]
    ) -> ModelRequest[Any]:
        head = [_summary_message(summary)] if summary else []
        return request.override(messages=[*head, *tail])

    async def _plan(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], HistorySummary | None]:
        """The request to send, and the new summary to store (``None``: unchanged)."""
        stored, visible = self._visible(request)
        previous = stored["text"] if stored else None
        composed = self._compose(request, previous, visible)
        window = self._window_of(request)
        budget = window - reply_reserve(window)
        system = [request.system_message] if request.system_message is not None else []
        head = [_summary_message(previous)] if previous else []
        messages_bound = _byte_bound(head) + self._bytes(visible)
        if _byte_bound(system) + messages_bound + _tools_byte_bound(request.tools) <= budget:
            # No text holds more tokens than bytes: most requests are measured without
            # the tokenizer, which is not even loaded until a request comes near its window.
            return composed, None
        await asyncio.to_thread(load_encoding)
        # Each part is counted once per call: a prompt's count is the sum of its parts'.
        base = count_prompt_tokens(system, request.tools)
        if base + messages_bound <= budget:
            return composed, None
        sizes = [self._size(m) for m in visible]
        if base + count_prompt_tokens(head) + sum(sizes) <= budget:
            return composed, None
        limit = max(64, budget // 5)
        frame = count_prompt_tokens([_summary_message("")])
        keep = max(0, (budget - base - frame - limit) // 2)
        cuts = _cut_points(visible)
        if not cuts:
            _logger.warning(
                "history.too_large: the latest message alone exceeds the %d-token window", window
            )
            return composed, None
        tail = [0] * (len(visible) + 1)
        for index in range(len(visible) - 1, -1, -1):
            tail[index] = tail[index + 1] + sizes[index]
        cut = next((i for i in cuts if tail[i] <= keep), cuts[-1])
        through = str(visible[cut - 1].id)
        try:
            text = await self._fold(self._summarizer_of(request), previous, visible[:cut], limit)
        except Exception as exc:
            # The turn goes on without the oldest messages this once; nothing is stored,
            # so the next call tries again.
            _logger.warning(
                "history.summary_failed: %s; this call sends the latest messages only",
                type(exc).__name__,
            )
            return self._compose(request, previous, visible[cut:]), None
        summary = HistorySummary(text=text, through=through)
        return self._compose(request, text, visible[cut:]), summary

    async def _fold(
        self,
        model: BaseChatModel,
        summary: str | None,
        messages: Sequence[AnyMessage],
        limit: int,
    ) -> str:
        """``summary`` updated with ``messages``, in as many calls as the summarizer needs."""
        window = context_window("utility", model, self._windows)
        room = window - reply_reserve(window) - limit - count_tokens(SUMMARY_PROMPT) - 64
        text = summary or ""
        batch: list[str] = []
        used = 0
        for message in messages:
            rendered = get_buffer_string([message])
            size = count_tokens(rendered)
            if size > room:
                rendered, size = truncate_tokens(rendered, room), room
            if batch and used + size > room:
                text = await self._summarise(model, text, batch, limit)
                batch, used = [], 0
            batch.append(rendered)
            used += size
        if batch:
            text = await self._summarise(model, text, batch, limit)
        return text

    @staticmethod
    async def _summarise(model: BaseChatModel, summary: str, batch: list[str], limit: int) -> str:
        prompt = SUMMARY_PROMPT.format(
            limit=limit, summary=summary or "(nothing yet)", messages="\n".join(batch)
        )
        # Tagged so that a streaming run does not send the summary to the client as if
        # it were the reply.
        answer = await model.ainvoke([HumanMessage(prompt)], config={"tags": [TAG_NOSTREAM]})
        text = str(answer.text).strip() if isinstance(answer, AIMessage) else ""
        if not text:
            # Storing it would drop the folded messages with nothing in their place.
            raise ValueError("the summarizer answered no text")
        # A summary longer than asked would eat the room kept for recent messages.
        return truncate_tokens(text, limit)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Call the model on the condensed request; store a new summary with the answer.

        There is no sync form: a summary is written with an async model call.
        """
        planned, summary = await self._plan(request)
        response = await handler(planned)
        if summary is None:
            return response
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"history_summary": summary})
        )
