"""History ingestion: each finished turn is sent to ``POST /messages``, in the background.

The engine extracts facts from conversations; this is how what the user says reaches it
without the model having to call ``add_memory``. Only the user's message and the final
answer are sent (tool traffic is not conversation). Fire-and-forget: the turn never waits
for it and its failures are only logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from oracle_core import RuntimeContext

__all__ = ["HistoryIngestionMiddleware", "missed_turns", "turn_messages"]

INGESTED_KEY = "ingested:{session}"
"""``rt_ctx.kv`` key: ids of the user messages whose turns were sent, per session."""
MAX_REMEMBERED = 500

Ingest = Callable[[RuntimeContext[Any], list[dict[str, str]]], Awaitable[None]]


def _text(message: BaseMessage) -> str:
    return " ".join(str(message.text).split()) if message.text else ""


def turn_messages(
    messages: list[BaseMessage], *, user_name: str, oracle_name: str
) -> list[dict[str, str]]:
    """The last turn (from the last user message) as ``/messages`` entries.

    ``name`` carries the speaker's identity, as the contract asks, so the engine does not
    pin facts to a generic "user" node.
    """
    start = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
        None,
    )
    if start is None:
        return []
    return _entries(messages[start:], user_name=user_name, oracle_name=oracle_name)


def _entries(
    messages: list[BaseMessage], *, user_name: str, oracle_name: str
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for message in messages:
        text = _text(message)
        if not text:
            continue
        if isinstance(message, HumanMessage):
            out.append({"content": text, "role_type": "user", "name": user_name})
        elif isinstance(message, AIMessage) and not message.tool_calls:
            out.append({"content": text, "role_type": "assistant", "name": oracle_name})
    return out


def missed_turns(
    messages: list[BaseMessage], sent: set[str], *, user_name: str, oracle_name: str
) -> list[dict[str, str]]:
    """The turns of a thread whose user message is not in ``sent``, as ``/messages``
    entries: what per-turn ingestion never sent (turns that failed or were aborted, or
    every turn when it was off)."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    out: list[dict[str, str]] = []
    for n, start in enumerate(starts):
        if messages[start].id and messages[start].id in sent:
            continue
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        out += _entries(messages[start:end], user_name=user_name, oracle_name=oracle_name)
    return out


class HistoryIngestionMiddleware(AgentMiddleware[Any, Any, Any]):
    """Posts each finished turn to the Memory Engine.

    Args:
        ingest: ``(rt_ctx, messages)`` coroutine that sends them.
    """

    def __init__(self, ingest: Ingest) -> None:
        super().__init__()
        self._ingest = ingest
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        """The middleware's name in the agent."""
        return "memory-history-ingestion"

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        """Schedule the turn's ingestion; returns at once."""
        context = getattr(runtime, "context", None)
        rt_ctx = getattr(context, "runtime_context", None)
        if rt_ctx is None or not rt_ctx.user.did:
            return
        entries = turn_messages(
            list(state.get("messages", [])),
            user_name=rt_ctx.user.matrix_user_id or rt_ctx.user.did,
            oracle_name=rt_ctx.identity.name,
        )
        if not entries:
            return
        messages = list(state.get("messages", []))
        human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        self.schedule(rt_ctx.for_plugin("memory"), entries, human.id if human else None)

    def schedule(
        self,
        rt_ctx: RuntimeContext[Any],
        entries: list[dict[str, str]],
        sent_id: str | None = None,
    ) -> None:
        """Send ``entries`` in the background; ``sent_id`` (the turn's user message) is
        remembered in ``rt_ctx.kv`` once they are, so a later pass skips that turn."""
        task = asyncio.get_running_loop().create_task(self._run(rt_ctx, entries, sent_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self, rt_ctx: RuntimeContext[Any], entries: list[dict[str, str]], sent_id: str | None
    ) -> None:
        try:
            await self._ingest(rt_ctx, entries)
            if sent_id and rt_ctx.kv is not None:
                key = INGESTED_KEY.format(session=rt_ctx.session.id)
                sent = list(await rt_ctx.kv.get(key, []))
                await rt_ctx.kv.set(key, [*sent, sent_id][-MAX_REMEMBERED:])
        except Exception as exc:  # background work: logged, never raised
            rt_ctx.logger.warning("memory history ingestion failed: %s", type(exc).__name__)

    async def drain(self) -> None:
        """Wait for ingestions in flight (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
