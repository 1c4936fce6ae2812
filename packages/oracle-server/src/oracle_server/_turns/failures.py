"""Why a turn failed, as the client is told: a stable code and a generic message.

The exception itself (its class and text, which may quote the user's data or the server's
internals) goes only to the log. The client gets one of a small set of codes, in the SSE
``error`` frame and in the body of a non-stream 500:

- ``turn.model_unavailable``: the model's endpoint could not be reached or answered an error;
- ``turn.model_timeout``: the model sent nothing for ``TURN_IDLE_TIMEOUT_SECONDS`` (before
  its first token or between two), or its client timed out;
- ``turn.tool_failed``: a tool raised while it ran;
- ``turn.deadline``: the turn ran longer than ``TURN_DEADLINE_SECONDS``;
- ``turn.service_unavailable``: the database or Redis was away or had no connection free
  in time (``SERVICE_ERRORS``);
- ``turn.internal``: anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from oracle_server._errors import SERVICE_ERRORS

__all__ = [
    "MODEL_TIMEOUT",
    "MODEL_UNAVAILABLE",
    "TOOL_FAILED",
    "TURN_DEADLINE",
    "TURN_INTERNAL",
    "TURN_SERVICE_UNAVAILABLE",
    "ModelIdle",
    "TurnDeadline",
    "TurnFailure",
    "failure_of",
]

MODEL_UNAVAILABLE = "turn.model_unavailable"
MODEL_TIMEOUT = "turn.model_timeout"
TOOL_FAILED = "turn.tool_failed"
TURN_DEADLINE = "turn.deadline"
TURN_INTERNAL = "turn.internal"
TURN_SERVICE_UNAVAILABLE = "turn.service_unavailable"

_MESSAGES = {
    MODEL_UNAVAILABLE: "The model could not be reached; try again",
    MODEL_TIMEOUT: "The model did not answer in time; try again",
    TOOL_FAILED: "A tool failed during this turn",
    TURN_DEADLINE: "The turn took longer than this server allows",
    TURN_INTERNAL: "The turn failed on the server",
    TURN_SERVICE_UNAVAILABLE: "A service the oracle depends on is busy or unavailable; try again",
}
_RETRYABLE = frozenset({MODEL_UNAVAILABLE, MODEL_TIMEOUT, TURN_SERVICE_UNAVAILABLE})

# Model clients' error classes, by name: the server does not import the providers' SDKs.
# openai (and so langchain-openai) and httpx, which it and most other clients sit on.
_MODEL_TIMEOUTS = frozenset({"APITimeoutError", "TimeoutException"})
_MODEL_UNAVAILABLE = frozenset(
    {"APIConnectionError", "APIStatusError", "APIError", "TransportError", "HTTPStatusError"}
)


class ModelIdle(Exception):
    """The model sent nothing for the idle timeout."""


class TurnDeadline(Exception):
    """The turn ran past its deadline."""


@dataclass(frozen=True)
class TurnFailure:
    """What the client is told of a failed turn."""

    code: str
    message: str
    retryable: bool

    def to_frame(self) -> dict[str, object]:
        """The data of the SSE ``error`` frame (``error`` is what the client shows)."""
        return {"error": self.message, "code": self.code, "retryable": self.retryable}


def failure_of(exc: BaseException, *, in_tool: bool = False) -> TurnFailure:
    """The code and message for a turn that raised ``exc``.

    Args:
        exc: What the turn raised.
        in_tool: Whether a tool call was running when it did.
    """
    code = _code_of(exc, in_tool=in_tool)
    return TurnFailure(code, _MESSAGES[code], code in _RETRYABLE)


def _code_of(exc: BaseException, *, in_tool: bool) -> str:
    if isinstance(exc, TurnDeadline):
        return TURN_DEADLINE
    if isinstance(exc, ModelIdle):
        return MODEL_TIMEOUT
    if in_tool:
        return TOOL_FAILED
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _MODEL_TIMEOUTS:
        return MODEL_TIMEOUT
    if names & _MODEL_UNAVAILABLE:
        return MODEL_UNAVAILABLE
    if isinstance(exc, SERVICE_ERRORS):
        return TURN_SERVICE_UNAVAILABLE
    return TURN_INTERNAL
