"""``tool-repetition-guard``: stops the model from running the same call over and over."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from oracle_core._approval import APPROVAL_MARK
from oracle_core._middleware._common import (
    RefusingToolMiddleware,
    error_tool_message,
    state_value,
    turn_bindings,
)

__all__ = ["ToolRepetitionGuardMiddleware"]


def call_signature(request: ToolCallRequest) -> str:
    """Tool name plus canonical (sorted-key JSON) arguments of the call."""
    return _signature(request.tool_call["name"], request.tool_call.get("args"))


def _signature(name: str, args: Any) -> str:
    return f"{name}:{json.dumps(args or {}, sort_keys=True, default=str)}"


def declined_in_turn(messages: Any) -> set[str]:
    """Signatures of the calls the user declined since their last message (§20.2).

    Read from the thread: a declined call is answered by a tool message marked
    ``oracle_approval``; the call it answers is in the assistant message before it.
    """
    refused: set[str] = set()
    for message in reversed(messages or ()):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, ToolMessage) and message.response_metadata.get(APPROVAL_MARK):
            refused.add(message.tool_call_id)
    if not refused:
        return set()
    signatures: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id") in refused:
                    signatures.add(_signature(call["name"], call.get("args")))
    return signatures


class ToolRepetitionGuardMiddleware(RefusingToolMiddleware):
    """Refuses a tool call already executed ``max_repeats`` times in this run (CORE-78), or
    one the user declined since their last message (plugins spec §20.2).

    A call counts as executed once it is handed to the next handler, whatever the
    outcome. A refused call gets an error ``ToolMessage`` telling the model to reuse the
    earlier result or change the arguments. Counts are per run: in the oracle runtime they
    live in the run's ``TurnBindings`` (one compiled agent serves many turns); used on its
    own, the instance keeps them, so create one instance per run. There is deliberately
    no ``before_agent`` reset: it would add a graph step, and a checkpoint write, to
    every turn.

    Args:
        max_repeats: How many times one name + arguments pair may run per run.
    """

    def __init__(self, max_repeats: int = 2) -> None:
        super().__init__()
        if max_repeats < 1:
            raise ValueError("max_repeats must be at least 1")
        self._max_repeats = max_repeats
        self._counts: Counter[str] = Counter()
        # The sync tool node runs parallel calls in threads.
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The reserved name ``tool-repetition-guard``."""
        return "tool-repetition-guard"

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        """Count the call and return ``None``, or a refusal when over the limit."""
        signature = call_signature(request)
        tool_name = request.tool_call["name"]
        if signature in declined_in_turn(state_value(request.state, "messages")):
            return error_tool_message(
                request,
                f"The user declined '{tool_name}' with exactly these arguments in this turn, "
                "so it was not run again. Do not retry it; tell the user it was not done, or "
                "ask them what they want instead.",
            )
        bindings = turn_bindings(request.runtime)
        counts: Any = bindings.call_counts if bindings is not None else self._counts
        with self._lock:
            seen = counts.get(signature, 0)
            if seen < self._max_repeats:
                # Counted before the handler runs so parallel identical calls see it.
                counts[signature] = seen + 1
                return None
        return error_tool_message(
            request,
            f"Tool '{tool_name}' already ran {seen} times with exactly these arguments in "
            f"this turn, so it was not run again. Reuse the earlier result, or change the "
            f"arguments if you need something different.",
        )
