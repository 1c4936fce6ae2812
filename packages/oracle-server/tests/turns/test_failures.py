"""What a failed turn's client is told: one code per kind of failure, never the exception."""

from __future__ import annotations

import httpx
import pytest

from oracle_server._turns.failures import (
    MODEL_TIMEOUT,
    MODEL_UNAVAILABLE,
    TOOL_FAILED,
    TURN_DEADLINE,
    TURN_INTERNAL,
    ModelIdle,
    TurnDeadline,
    failure_of,
)


class APITimeoutError(Exception):
    """Named like the OpenAI SDK's class (the server matches model clients by name)."""


class APIConnectionError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "in_tool", "code"),
    [
        (TurnDeadline(), True, TURN_DEADLINE),
        (ModelIdle(), False, MODEL_TIMEOUT),
        (APITimeoutError("secret"), False, MODEL_TIMEOUT),
        (httpx.ReadTimeout("secret"), False, MODEL_TIMEOUT),
        (APIConnectionError("secret"), False, MODEL_UNAVAILABLE),
        (httpx.ConnectError("secret"), False, MODEL_UNAVAILABLE),
        (httpx.ConnectError("secret"), True, TOOL_FAILED),
        (
            UnicodeEncodeError("utf-8", "secret", 0, 1, "surrogates not allowed"),
            False,
            TURN_INTERNAL,
        ),
    ],
)
def test_each_failure_has_its_code_and_a_generic_message(
    exc: Exception, in_tool: bool, code: str
) -> None:
    failure = failure_of(exc, in_tool=in_tool)

    assert failure.code == code
    assert "secret" not in failure.message
    assert failure.to_frame() == {
        "error": failure.message,
        "code": code,
        "retryable": code in (MODEL_TIMEOUT, MODEL_UNAVAILABLE),
    }
