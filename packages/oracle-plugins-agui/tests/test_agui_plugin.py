"""The ``agui`` plugin in a test runtime: the AG-UI Agent runs the client's actions
through ``rt_ctx.frontend`` and forwards every action call into the parent thread."""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from oracle_core import FrontendCall, SessionInfo
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, validate_plugin
from oracle_plugins.agui import AguiPlugin

TABLE = {
    "name": "create_data_table",
    "description": "Show rows as a table.",
    "schema": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "rows": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["rows"],
    },
    "hasRender": True,
}
STATE = {"ag_actions": [TABLE]}
AGENT = "call_ag-ui_agent"
ROWS = [{"date": "2026-11-30", "amount": 12}]


async def test_the_plugin_passes_the_conformance_suite_without_manifest_warnings() -> None:
    with_actions = await validate_plugin(AguiPlugin(), state=STATE, entry_point=True)
    without = await validate_plugin(AguiPlugin())

    assert with_actions.ok
    assert without.ok


async def test_no_actions_no_agent() -> None:
    async with await create_test_runtime(plugins=[AguiPlugin()]) as runtime:
        built = await runtime.build()

    assert AGENT not in built.tool_infos


def _turn_models(action_args: dict[str, Any]) -> tuple[ScriptedChatModel, ScriptedChatModel]:
    main = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["agui"]}, id="l1"),
            call_tool(AGENT, {"task": f"Show these rows as a table: {ROWS}"}, id="g1"),
            "Here is the table.",
        ]
    )
    sub = ScriptedChatModel([call_tool("create_data_table", action_args, id="a1"), "Shown."])
    return main, sub


async def test_an_action_runs_in_the_client_and_is_forwarded_into_the_parent_thread() -> None:
    main, sub = _turn_models({"title": "Last transactions", "rows": ROWS})
    calls: list[FrontendCall] = []

    async def client(call: FrontendCall) -> dict[str, Any]:
        calls.append(call)
        return {"result": {"success": True, "rendered": len(call.args["rows"])}}

    session = SessionInfo(id="s-agui", request_id="req-42")
    async with await create_test_runtime(
        plugins=[AguiPlugin()], model=main, models={"subagent": sub}, state=STATE, session=session
    ) as runtime:
        runtime.frontend.attach(session.id, client)
        result = await runtime.run_turn("Show my last transactions as a table")

    [call] = calls
    assert (call.kind, call.name, call.args) == (
        "action",
        "create_data_table",
        {"title": "Last transactions", "rows": ROWS},
    )
    assert re.fullmatch(r"ag_req-42_[0-9a-f]{8}", call.call_id)
    answer, forwarded = result.tool_messages(AGENT)[0], result.tool_messages("create_data_table")
    assert answer.text == "Shown."
    # The parent thread holds the action call and its result, for the client to render.
    [rendered] = forwarded
    assert rendered.tool_call_id == "g1_a1"
    assert rendered.text == '{"success": true, "rendered": 1}'
    calling = [m for m in result.messages if isinstance(m, AIMessage) and m.id and "g1_" in m.id]
    assert [c["name"] for m in calling for c in m.tool_calls] == ["create_data_table"]
    assert result.text == "Here is the table."


async def test_success_false_fails_the_action_with_the_clients_reason() -> None:
    main, sub = _turn_models({"rows": ROWS})

    async def client(call: FrontendCall) -> dict[str, Any]:
        return {"result": {"success": False, "error": "Too many columns"}}

    async with await create_test_runtime(
        plugins=[AguiPlugin()], model=main, models={"subagent": sub}, state=STATE
    ) as runtime:
        runtime.frontend.attach(runtime.session.id, client)
        await runtime.run_turn("Show my transactions")

    [failed] = [m for m in sub.calls[1].messages if isinstance(m, ToolMessage)]
    assert failed.status == "error"
    assert "Too many columns" in failed.text
