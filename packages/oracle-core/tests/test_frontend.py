"""Frontend calls (``rt_ctx.frontend``): the wire outcomes, the local service, and the
Matrix log of each call."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from oracle_core import (
    ACTION_LOG_EVENT_TYPE,
    FrontendCall,
    FrontendCallError,
    FrontendOutcome,
    LocalFrontendService,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    SessionInfo,
    UserInfo,
    frontend_outcome,
    new_frontend_call_id,
)
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime

USER = UserInfo(did="did:key:z6MkFrontendUser")
SESSION = SessionInfo(id="s1", request_id="req-1")


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"toolCallId": "t", "result": "x"}, FrontendOutcome(value="x")),
        ({"toolCallId": "t"}, FrontendOutcome(value=None)),
        ({"toolCallId": "t", "result": "x", "error": ""}, FrontendOutcome(value="x")),
        ({"toolCallId": "t", "result": "x", "error": "bad"}, FrontendOutcome(error="bad")),
        ({"toolCallId": "t", "error": {"message": "boom"}}, FrontendOutcome(error="boom")),
        ({"toolCallId": "t", "error": {"code": 3}}, FrontendOutcome(error='{"code": 3}')),
    ],
)
def test_browser_tool_answers(answer: dict[str, Any], outcome: FrontendOutcome) -> None:
    assert frontend_outcome("browser_tool", answer) == outcome


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"result": {"success": True}}, FrontendOutcome(value={"success": True})),
        ({"result": "done"}, FrontendOutcome(value="done")),
        ({"result": {"success": False, "error": "locked"}}, FrontendOutcome(error="locked")),
        ({"result": {"success": False}, "error": "crashed"}, FrontendOutcome(error="crashed")),
        ({"result": {"success": False}}, FrontendOutcome(error="Action failed")),
        ({"result": None, "error": "crashed"}, FrontendOutcome(error="crashed")),
    ],
)
def test_action_answers(answer: dict[str, Any], outcome: FrontendOutcome) -> None:
    assert frontend_outcome("action", answer) == outcome


def test_call_ids_name_the_kind_and_the_request() -> None:
    action = new_frontend_call_id("action", "req-1")
    tool = new_frontend_call_id("browser_tool", None)
    odd = new_frontend_call_id("action", "a b/c" + "x" * 100)

    assert re.fullmatch(r"ag_req-1_[0-9a-f]{8}", action)
    assert re.fullmatch(r"tc_noreq_[0-9a-f]{8}", tool)
    assert re.fullmatch(r"ag_abc" + "x" * 61 + r"_[0-9a-f]{8}", odd)
    assert new_frontend_call_id("action", "req-1") != action


async def test_local_calls_go_to_the_newest_responder_of_the_session() -> None:
    service = LocalFrontendService()
    seen: list[tuple[str, FrontendCall]] = []

    def responder(label: str, answer: dict[str, Any]) -> Any:
        async def respond(call: FrontendCall) -> dict[str, Any]:
            seen.append((label, call))
            return answer

        return respond

    service.attach("s1", responder("old", {"result": "old"}))
    detach = service.attach("s1", responder("new", {"result": {"title": "Home"}}))
    service.attach("s2", responder("other session", {"result": "no"}))
    frontend = service.for_session(USER, SESSION)

    assert await frontend.call("browser_tool", "get_title", {"tab": 1}) == {"title": "Home"}
    detach()
    assert await frontend.call("action", "open_panel", {}) == "old"
    [(label, first), (second_label, second)] = seen
    assert (label, second_label) == ("new", "old")
    assert (first.name, first.args, first.session_id, first.kind) == (
        "get_title",
        {"tab": 1},
        "s1",
        "browser_tool",
    )
    assert first.call_id.startswith("tc_req-1_")
    assert second.call_id.startswith("ag_req-1_")


async def test_local_calls_fail_with_the_clients_error_and_a_code() -> None:
    service = LocalFrontendService()
    frontend = service.for_session(USER, SESSION)

    with pytest.raises(FrontendCallError) as nobody:
        await frontend.call("browser_tool", "get_title", {})
    answers: Iterator[dict[str, Any]] = iter(
        [{"error": "Element not found"}, {"result": {"success": False}}]
    )

    async def respond(call: FrontendCall) -> dict[str, Any]:
        return next(answers)

    service.attach("s1", respond)
    with pytest.raises(FrontendCallError, match=r"^Element not found$") as failed:
        await frontend.call("browser_tool", "get_title", {})
    with pytest.raises(FrontendCallError, match=r"^Action failed$"):
        await frontend.call("action", "save", {})
    with pytest.raises(ValueError, match="kind"):
        await frontend.call("popup", "save", {})  # type: ignore[arg-type]

    assert nobody.value.code == "ws.no_client"
    assert "'get_title' did not run" in str(nobody.value)
    assert failed.value.code == "frontend.failed"


async def test_a_local_call_without_an_answer_in_time_says_the_outcome_is_unknown() -> None:
    service = LocalFrontendService(timeout_seconds=30)

    async def never(call: FrontendCall) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    service.attach("s1", never)
    with pytest.raises(FrontendCallError) as timed_out:
        await service.for_session(USER, SESSION).call("action", "chart", {}, timeout=0.05)

    assert timed_out.value.code == "frontend.timeout"
    assert str(timed_out.value).startswith("AG-UI action timeout after 50ms: chart. ")
    assert "Outcome unknown" in str(timed_out.value)


class PageArgs(BaseModel):
    page: str


class PageOpener(OraclePlugin):
    """A plugin whose tool asks the client to open a page."""

    name = "page-opener"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Pages",
        summary="Opens pages in the user's client.",
        when_to_use=["The user asks to open a page."],
        visibility="always",
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        async def run(args: PageArgs, rt_ctx: RuntimeContext[Any]) -> Any:
            assert rt_ctx.frontend is not None
            return await rt_ctx.frontend.call("action", "open_page", {"page": args.page})

        return [
            PluginTool(
                name="open_page",
                description="Open a page in the user's client.",
                args_schema=PageArgs,
                handler=run,
                effect="write",
            )
        ]


async def _logged(matrix: Any, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    for _ in range(200):
        if len(matrix.sent_events) >= count:
            break
        await asyncio.sleep(0.01)
    return list(matrix.sent_events)


async def test_each_call_of_a_turn_is_logged_to_the_users_room_without_its_content() -> None:
    model = ScriptedChatModel(
        [
            call_tool("open_page", {"page": "secret-report"}, id="c1"),
            call_tool("open_page", {"page": "other"}, id="c2"),
            "Opened.",
        ]
    )
    async with await create_test_runtime(plugins=[PageOpener()], model=model) as runtime:
        runtime.matrix.user_rooms[runtime.user.did] = "!room:example.org"
        answers: Iterator[dict[str, Any]] = iter(
            [{"result": {"success": True, "opened": 1}}, {"error": "Tab closed"}]
        )

        async def respond(call: FrontendCall) -> dict[str, Any]:
            return next(answers)

        runtime.frontend.attach(runtime.session.id, respond)
        result = await runtime.run_turn("Open the report, then the other page")
        logged = await _logged(runtime.matrix, 2)

    ok, failed = result.tool_messages("open_page")
    assert '"opened": 1' in ok.text
    assert failed.status == "error"
    assert "Tab closed" in failed.text
    assert [(room, kind) for room, kind, _ in logged] == [
        ("!room:example.org", ACTION_LOG_EVENT_TYPE),
        ("!room:example.org", ACTION_LOG_EVENT_TYPE),
    ]
    assert [content for _, _, content in logged] == [
        {
            "action": {"name": "open_page", "kind": "action", "success": True, "outcome": "ok"},
            "threadId": runtime.session.id,
        },
        {
            "action": {
                "name": "open_page",
                "kind": "action",
                "success": False,
                "outcome": "frontend.failed",
            },
            "threadId": runtime.session.id,
        },
    ]
    assert "secret-report" not in repr(logged)
    assert "Tab closed" not in repr(logged)


async def test_no_room_no_log() -> None:
    model = ScriptedChatModel([call_tool("open_page", {"page": "a"}, id="c1"), "Done."])
    async with await create_test_runtime(plugins=[PageOpener()], model=model) as runtime:

        async def respond(call: FrontendCall) -> dict[str, Any]:
            return {"result": "ok"}

        runtime.frontend.attach(runtime.session.id, respond)
        result = await runtime.run_turn("Open a")
        await asyncio.sleep(0.05)

    assert result.text == "Done."
    assert runtime.matrix.sent_events == []
