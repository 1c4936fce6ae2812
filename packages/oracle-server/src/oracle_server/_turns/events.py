"""From the agent's stream to the client's events (SRV-29 … 31).

LangGraph streams a turn as ``messages`` (tokens) and ``updates`` (node outputs);
:func:`stream_client_events` turns them into the client's ``message`` and ``tool_call``
events on the run's stream, and ends a turn whose model went quiet. :class:`ServerEventSink`
does the same for plugin events (``rt_ctx.emit``), which also go to the session's sockets;
they reach the turn by its run id, which the server issues (a client's request id may be
anything, and two turns may send the same one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

from oracle_core import OracleEvent
from oracle_server._timestamps import timestamp
from oracle_server._turns.failures import ModelIdle
from oracle_server._turns.stream import TurnStream

__all__ = ["EVENT_NAMES", "ServerEventSink", "TurnProgress", "stream_client_events"]

logger = logging.getLogger("oracle.server.turns")

# Client event names (SRV-31) for the runtime's emit channels.
EVENT_NAMES = {
    "tool_call": "tool_call",
    "action_call": "action_call",
    "render_component": "render_component",
    "reasoning": "reasoning",
    "browser_tool_call": "browser_tool_call",
    "router": "router.update",
    "message_cache_invalidation": "message_cache_invalidation",
    "warning": "warning",
    "tool_approval_request": "tool_approval_request",
}


class ServerEventSink:
    """Routes plugin events (``rt_ctx.emit``) to the turn's stream and to socket.io.

    Args:
        broadcast: Sends an event to the session's sockets (the socket.io gateway).

    Attributes:
        streams: The running turns' streams by run id.
    """

    def __init__(self, broadcast: Callable[[OracleEvent], None] | None = None) -> None:
        self.streams: dict[str, TurnStream] = {}
        self.broadcast = broadcast

    def emit(self, event: OracleEvent) -> None:
        name = EVENT_NAMES.get(event.name, event.name)
        payload = {"sessionId": event.session_id, "requestId": event.request_id, **event.payload}
        stream = self.streams.get(event.run_id) if event.run_id else None
        if stream is not None:
            stream.push(name, payload)
        if self.broadcast is not None:
            try:
                self.broadcast(event)
            except Exception:
                logger.exception("socket broadcast of %s failed", event.name)


@dataclass
class TurnProgress:
    """Where a turn is: the tool calls running now (their ids), and whether it paused on
    an interrupt (a tool call waiting for the user's approval)."""

    running_tools: set[str] = field(default_factory=set)
    interrupted: bool = False


async def stream_client_events(
    chunks: AsyncIterator[tuple[str, Any]],
    stream: TurnStream,
    base: Mapping[str, Any],
    *,
    idle_timeout: float | None = None,
    progress: TurnProgress | None = None,
) -> AIMessage | None:
    """Push the client's events for the agent's ``messages`` / ``updates`` stream.

    Args:
        chunks: ``(mode, data)`` pairs of ``astream(stream_mode=["messages", "updates"])``.
        stream: The run's stream.
        base: ``sessionId`` and ``requestId``, repeated in each tool event.
        idle_timeout: Seconds the agent may send nothing while no tool runs: the model's
            time to its first token and between two. Tools are bounded by the turn's
            deadline only (they may rightly take long). ``None``: no limit.
        progress: Updated with the running tool calls (so a failure can tell a tool's).

    Returns:
        The main agent's last message without tool calls: the reply.

    Raises:
        ModelIdle: The idle timeout passed; the agent's stream is closed.
    """
    reply: AIMessage | None = None
    call_args: dict[str, dict[str, Any]] = {}
    progress = progress if progress is not None else TurnProgress()
    async with contextlib.aclosing(_paced(chunks, idle_timeout, progress)) as paced:
        async for mode, data in paced:
            if mode == "messages":
                chunk, metadata = data
                if isinstance(chunk, AIMessageChunk) and _is_main_model(metadata):
                    text = chunk.text
                    if text:
                        stream.push("message", {"content": text, "timestamp": timestamp()})
                continue
            for node, update in data.items():
                if node == "__interrupt__":
                    progress.interrupted = True
                    continue
                for message in _ai_messages(update):
                    for call in message.tool_calls:
                        args = dict(call["args"])
                        if call.get("id"):
                            call_args[str(call["id"])] = args
                            progress.running_tools.add(str(call["id"]))
                        stream.push(
                            "tool_call",
                            {
                                **base,
                                "toolName": call["name"],
                                "args": {**args, "toolName": call["name"]},
                                "status": "isRunning",
                                "eventId": call.get("id"),
                            },
                        )
                    if not message.tool_calls:
                        reply = message
                if node == "tools" or node.endswith("tools"):
                    for result in _tool_messages(update):
                        progress.running_tools.discard(result.tool_call_id)
                        stream.push(
                            "tool_call",
                            {
                                **base,
                                "toolName": result.name,
                                # The client replaces the running call's message with
                                # this one: repeat the arguments.
                                "args": {
                                    **call_args.get(result.tool_call_id, {}),
                                    "toolName": result.name,
                                },
                                "status": "done",
                                "eventId": result.tool_call_id,
                                "output": str(result.content),
                            },
                        )
    return reply


async def _paced(
    chunks: AsyncIterator[tuple[str, Any]], idle_timeout: float | None, progress: TurnProgress
) -> AsyncGenerator[tuple[str, Any]]:
    """``chunks``, raising :class:`ModelIdle` when none comes in time while no tool runs."""
    try:
        while True:
            quiet = idle_timeout if not progress.running_tools else None
            timer = asyncio.timeout(quiet)
            try:
                async with timer:
                    item = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if timer.expired():
                    raise ModelIdle(f"nothing from the agent for {quiet} s") from None
                raise
            yield item
    finally:
        closing = getattr(chunks, "aclose", None)
        if closing is not None:
            await closing()


def _tool_messages(update: Any) -> list[ToolMessage]:
    items = update if isinstance(update, list) else [update]
    found: list[ToolMessage] = []
    for item in items:
        if isinstance(item, Mapping):
            found.extend(m for m in item.get("messages", []) if isinstance(m, ToolMessage))
    return found


def _ai_messages(update: Any) -> list[AIMessage]:
    items = update if isinstance(update, list) else [update]
    found: list[AIMessage] = []
    for item in items:
        if isinstance(item, Mapping):
            found.extend(m for m in item.get("messages", []) if isinstance(m, AIMessage))
    return found


def _is_main_model(metadata: Mapping[str, Any]) -> bool:
    namespace = str(metadata.get("langgraph_checkpoint_ns") or metadata.get("checkpoint_ns") or "")
    # Nested graphs (sub-agents) add "|" segments; their tokens are not the reply.
    return metadata.get("langgraph_node") == "model" and "|" not in namespace
