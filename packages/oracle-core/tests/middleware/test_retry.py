"""Tests of ``tool-retry`` (CORE-79)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langgraph.errors import GraphInterrupt, NodeCancelledError
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command
from pydantic import BaseModel, ValidationError

import oracle_core
from oracle_core._context import OracleRunContext, TurnBindings
from oracle_core._middleware import EffectAwareToolRetryMiddleware
from oracle_core._tools import ToolInfo
from oracle_core.testing import ScriptedChatModel, call_tool


def script(tool_name: str) -> ScriptedChatModel:
    """Call ``tool_name`` once (id ``c1``), then answer ``done``."""
    return ScriptedChatModel([call_tool(tool_name, id="c1"), "done"])


ATTEMPTS: dict[str, int] = {}


def attempt(name: str) -> int:
    ATTEMPTS[name] = ATTEMPTS.get(name, 0) + 1
    return ATTEMPTS[name]


@tool
async def flaky() -> str:
    """Fails on the first attempt only."""
    if attempt("flaky") == 1:
        raise ConnectionError("reset by peer")
    return "fine"


@tool
async def broken() -> str:
    """Always fails."""
    attempt("broken")
    raise ValueError("bad upstream data")


@tool
async def send_payment() -> str:
    """A write that fails."""
    attempt("send_payment")
    raise RuntimeError("gateway timeout")


@tool
async def wipe() -> str:
    """A destructive call that fails."""
    attempt("wipe")
    raise RuntimeError("gateway timeout")


@tool
async def aborted() -> str:
    """The client went away."""
    attempt("aborted")
    raise asyncio.CancelledError


INDEX = {
    "send_payment": ToolInfo(name="send_payment", owner="pay", visibility="always", effect="write"),
    "broken": ToolInfo(name="broken", owner="data", visibility="always", effect="read"),
    "wipe": ToolInfo(name="wipe", owner="data", visibility="always", effect="destructive"),
}


async def run(tool_name: str, backoff: float = 0.0) -> ToolMessage:
    ATTEMPTS.clear()
    graph: Any = create_agent(
        script(tool_name),
        [flaky, broken, send_payment, wipe, aborted],
        middleware=[EffectAwareToolRetryMiddleware(INDEX, backoff_seconds=backoff)],
    )
    result = await graph.ainvoke({"messages": [("user", "go")]})
    answer = result["messages"][2]
    assert isinstance(answer, ToolMessage)
    return answer


async def test_flaky_tool_succeeds_on_the_second_attempt_after_the_backoff() -> None:
    started = time.monotonic()
    answer = await run("flaky", backoff=0.05)

    assert time.monotonic() - started >= 0.05
    assert answer.status == "success"
    assert answer.text == "fine"
    assert ATTEMPTS == {"flaky": 2}


async def test_final_failure_becomes_an_error_message_with_type_and_message() -> None:
    answer = await run("broken")

    assert ATTEMPTS == {"broken": 2}
    assert answer.status == "error"
    assert answer.name == "broken"
    assert answer.tool_call_id == "c1"
    assert "ValueError" in answer.text
    assert "bad upstream data" in answer.text


async def test_write_tool_is_never_re_run() -> None:
    answer = await run("send_payment")

    assert ATTEMPTS == {"send_payment": 1}
    assert answer.status == "error"
    assert "RuntimeError: gateway timeout" in answer.text


async def test_destructive_tool_is_never_re_run() -> None:
    answer = await run("wipe")

    assert ATTEMPTS == {"wipe": 1}
    assert answer.status == "error"
    assert "RuntimeError: gateway timeout" in answer.text


@pytest.mark.parametrize(
    ("tool_name", "attempts"), [("send_payment", 1), ("broken", 2)], ids=["write", "read"]
)
async def test_without_a_fixed_index_the_effect_is_read_from_the_turn_bindings(
    tool_name: str, attempts: int
) -> None:
    # The runtime builds it without an index: compiled agents are shared between turns,
    # and each turn's tool effects travel in its TurnBindings.
    ATTEMPTS.clear()
    graph: Any = create_agent(
        script(tool_name),
        [broken, send_payment],
        middleware=[EffectAwareToolRetryMiddleware(backoff_seconds=0)],
        context_schema=OracleRunContext,
    )
    context = OracleRunContext(
        user_did="did:key:z", session_id="s", turn=TurnBindings(tool_infos=INDEX)
    )

    result = await graph.ainvoke({"messages": [("user", "go")]}, context=context)

    assert {tool_name: attempts} == ATTEMPTS
    answer = result["messages"][2]
    assert isinstance(answer, ToolMessage)
    assert answer.status == "error"


async def test_cancelled_error_raised_by_a_tool_is_not_retried_nor_reported() -> None:
    # LangGraph turns a CancelledError raised inside a node into NodeCancelledError;
    # the point is that the middleware let it through on the first attempt.
    with pytest.raises(NodeCancelledError):
        await run("aborted")

    assert ATTEMPTS == {"aborted": 1}


async def test_cancelling_the_run_propagates_cancelled_error_without_a_retry() -> None:
    started = asyncio.Event()

    @tool
    async def hangs() -> str:
        """Waits until the run is cancelled."""
        attempt("hangs")
        started.set()
        await asyncio.Event().wait()
        return "never"

    ATTEMPTS.clear()
    graph: Any = create_agent(
        script("hangs"), [hangs], middleware=[EffectAwareToolRetryMiddleware({}, backoff_seconds=0)]
    )
    task = asyncio.create_task(graph.ainvoke({"messages": [("user", "go")]}))
    await started.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert ATTEMPTS == {"hangs": 1}


async def test_cancelled_error_from_the_handler_propagates_unchanged() -> None:
    async def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await EffectAwareToolRetryMiddleware({}, backoff_seconds=0).awrap_tool_call(
            _request(), handler
        )


def _request() -> ToolCallRequest:
    return ToolCallRequest(
        tool_call={"name": "lookup", "args": {}, "id": "c1"},
        tool=None,
        state={"messages": []},
        runtime=cast(Any, None),
    )


class Args(BaseModel):
    city: str


def _validation_error() -> ValidationError:
    try:
        Args.model_validate({})
    except ValidationError as exc:
        return exc
    raise AssertionError("expected a validation error")


@pytest.mark.parametrize(
    "error",
    [
        ToolInvocationError("lookup", _validation_error(), {}),
        _validation_error(),
        GraphInterrupt(()),
    ],
    ids=["tool-invocation-error", "validation-error", "graph-bubble-up"],
)
async def test_argument_errors_and_graph_control_flow_pass_through_once(error: Exception) -> None:
    calls: list[int] = []

    async def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        await EffectAwareToolRetryMiddleware({}, backoff_seconds=0).awrap_tool_call(
            _request(), handler
        )

    assert calls == [1]


def test_sync_form_retries_once_then_reports() -> None:
    calls: list[int] = []

    def handler(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        calls.append(1)
        raise OSError("disk full")

    answer = EffectAwareToolRetryMiddleware({}, backoff_seconds=0).wrap_tool_call(
        _request(), handler
    )

    assert calls == [1, 1]
    assert isinstance(answer, ToolMessage)
    assert answer.status == "error"
    assert "OSError: disk full" in answer.text


def test_backoff_is_capped_at_one_second() -> None:
    with pytest.raises(ValueError, match="backoff_seconds"):
        EffectAwareToolRetryMiddleware({}, backoff_seconds=1.5)


def test_registered_name_and_the_deprecated_alias() -> None:
    assert EffectAwareToolRetryMiddleware().name == "tool-retry"
    assert oracle_core.ToolRetryMiddleware is oracle_core.EffectAwareToolRetryMiddleware
    assert oracle_core.EffectAwareToolRetryMiddleware is EffectAwareToolRetryMiddleware
