"""The ``portal`` plugin in a test runtime: the Portal Agent exists only when the client
declares browser tools, runs them through ``rt_ctx.frontend`` and reports the ones it
cannot use."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel

from oracle_core import FrontendCall
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, validate_plugin
from oracle_plugins.portal import PortalPlugin

OPEN_URL = {
    "name": "open_url",
    "description": "Open a URL in the user's active tab.",
    "schema": {
        "type": "object",
        "properties": {"url": {"type": "string", "format": "uri"}, "newTab": {"type": "boolean"}},
        "required": ["url"],
        "additionalProperties": False,
    },
}
PAGE_TITLE = {"name": "get_page_title", "description": "The page's title.", "schema": {}}
STATE = {"browser_tools": [OPEN_URL, PAGE_TITLE]}
AGENT = "call_portal_agent"


async def test_the_plugin_passes_the_conformance_suite_without_manifest_warnings() -> None:
    with_tools = await validate_plugin(PortalPlugin(), state=STATE, entry_point=True)
    without = await validate_plugin(PortalPlugin())

    assert with_tools.ok
    assert without.ok


async def test_no_browser_tools_no_agent() -> None:
    async with await create_test_runtime(plugins=[PortalPlugin()]) as runtime:
        built = await runtime.build(state={"browser_tools": []})
        bare = await runtime.build()

    assert AGENT not in built.tool_infos
    assert AGENT not in bare.tool_infos


async def test_each_browser_tool_becomes_a_write_tool_of_the_agent_with_a_generated_model() -> None:
    async with await create_test_runtime(plugins=[PortalPlugin()], state=STATE) as runtime:
        built = await runtime.build()

    info = built.tool_infos[AGENT]
    [agent] = [t for t in built.tools if t.name == AGENT]
    inner = {tool.name: tool for tool in agent.resolved.tools}
    model = inner["open_url"].args_schema
    assert isinstance(model, type)
    assert issubclass(model, BaseModel)
    schema = model.model_json_schema()
    assert (info.owner, info.visibility) == ("portal", "on-demand")
    assert set(inner) == {"open_url", "get_page_title"}
    assert all(tool.effect == "write" for tool in inner.values())
    assert schema["required"] == ["url"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"url", "newTab"}
    assert "`open_url`: Open a URL" in agent.resolved.system_prompt
    # The browser tools are the sub-agent's: the main agent never binds them.
    assert "open_url" not in built.tool_infos


async def test_a_schema_that_cannot_become_a_model_is_left_out_and_the_client_told() -> None:
    broken = [
        {"name": "open url", "description": "bad name", "schema": {}},
        {"name": "pick", "description": "bad type", "schema": {"properties": {"a": {"type": 5}}}},
        {"name": "cfg", "description": "bad field", "schema": {"properties": {"model_config": {}}}},
        {"name": "list", "description": "not an object", "schema": {"type": "array"}},
    ]
    async with await create_test_runtime(plugins=[PortalPlugin()]) as runtime:
        built = await runtime.build(state={"browser_tools": [*broken, PAGE_TITLE]})
        warnings = [e.payload for e in runtime.events.events if e.name == "warning"]

    [agent] = [t for t in built.tools if t.name == AGENT]
    assert [tool.name for tool in agent.resolved.tools] == ["get_page_title"]
    assert {w["code"] for w in warnings} == {"tools.client_schema_invalid"}
    assert [w["message"].split(":")[0] for w in warnings] == [
        "tool 'open url'",
        "tool 'pick'",
        "tool 'cfg'",
        "tool 'list'",
    ]
    assert "model_config" in warnings[2]["message"]


async def test_a_turn_delegates_to_the_agent_which_runs_the_tool_in_the_client() -> None:
    main = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["portal"]}, id="l1"),
            call_tool(AGENT, {"task": "Open https://example.org/reports in a new tab"}, id="p1"),
            "The Reports page is open.",
        ]
    )
    sub = ScriptedChatModel(
        [
            call_tool("open_url", {"url": "https://example.org/reports", "newTab": True}, id="b1"),
            "Opened https://example.org/reports.",
        ]
    )
    calls: list[FrontendCall] = []

    async def client(call: FrontendCall) -> dict[str, Any]:
        calls.append(call)
        return {"result": {"opened": call.args["url"]}}

    async with await create_test_runtime(
        plugins=[PortalPlugin()], model=main, models={"subagent": sub}, state=STATE
    ) as runtime:
        runtime.frontend.attach(runtime.session.id, client)
        result = await runtime.run_turn("Open my reports page in a new tab")

    [call] = calls
    assert (call.kind, call.name) == ("browser_tool", "open_url")
    # Exactly what the model passed: the URL is not rewritten by the generated model.
    assert call.args == {"url": "https://example.org/reports", "newTab": True}
    [answer] = result.tool_messages(AGENT)
    assert answer.text == "Opened https://example.org/reports."
    assert result.text == "The Reports page is open."
    [inner] = [m for m in sub.calls[1].messages if isinstance(m, ToolMessage)]
    assert inner.text == '{"opened": "https://example.org/reports"}'


async def test_invalid_arguments_never_reach_the_client_and_a_client_error_is_a_tool_error() -> (
    None
):
    sub = ScriptedChatModel(
        [
            call_tool("open_url", {"newTab": True, "extra": 1}, id="b1"),
            call_tool("open_url", {"url": "https://example.org"}, id="b2"),
            "The page could not be opened.",
        ]
    )
    main = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["portal"]}, id="l1"),
            call_tool(AGENT, {"task": "Open https://example.org"}, id="p1"),
            "Sorry.",
        ]
    )
    calls: list[FrontendCall] = []

    async def client(call: FrontendCall) -> dict[str, Any]:
        calls.append(call)
        return {"error": "Popup blocked"}

    async with await create_test_runtime(
        plugins=[PortalPlugin()], model=main, models={"subagent": sub}, state=STATE
    ) as runtime:
        runtime.frontend.attach(runtime.session.id, client)
        await runtime.run_turn("Open example.org")

    invalid, failed = [m for m in sub.calls[2].messages if isinstance(m, ToolMessage)]
    assert [c.args for c in calls] == [{"url": "https://example.org"}]
    assert invalid.status == "error"
    assert "url" in invalid.text
    assert failed.status == "error"
    assert "Popup blocked" in failed.text
