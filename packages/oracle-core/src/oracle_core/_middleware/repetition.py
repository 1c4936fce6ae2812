"""``tool-repetition-guard``: stops the model from running the same call over and over."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage

from oracle_core._middleware._common import (
    RefusingToolMiddleware,
    error_tool_message,
    turn_bindings,
)

__all__ = ["ToolRepetitionGuardMiddleware"]


def call_signature(request: ToolCallRequest) -> str:
    """Tool name plus canonical (sorted-key JSON) arguments of the call."""
    args = json.dumps(request.tool_call.get("args") or {}, sort_keys=True, default=str)
    return f"{request.tool_call['name']}:{args}"


class ToolRepetitionGuardMiddleware(RefusingToolMiddleware):
    """Refuses a tool call already executed ``max_repeats`` times in this run (CORE-78).

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
        bindings = turn_bindings(request.runtime)
        counts: Any = bindings.call_counts if bindings is not None else self._counts
        with self._lock:
            seen = counts.get(signature, 0)
            if seen < self._max_repeats:
                # Counted before the handler runs so parallel identical calls see it.
                counts[signature] = seen + 1
                return None
        tool_name = request.tool_call["name"]
        return error_tool_message(
            request,
            f"Tool '{tool_name}' already ran {seen} times with exactly these arguments in "
            f"this turn, so it was not run again. Reuse the earlier result, or change the "
            f"arguments if you need something different.",
        )
