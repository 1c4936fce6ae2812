"""``frontend-tools``: the turn's browser tools and AG-UI actions as tools (SRV-51).

The plugin runs in core's test runtime here, with a recording stand-in for the gateway;
the real socket round trips are in ``test_ws_frontend_calls.py`` and
``test_ws_node_client.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from oracle_core import SessionInfo
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_server._socket.frontend_tools import FrontendToolsPlugin, tool_schema

TURN = SessionInfo(id="s-1", request_id="req-1")
STATE: dict[str, Any] = {
    "browser_tools": [
        {
            "name": "get_page_title",
            "description": "The title of the open page.",
            "schema": {"type": "object", "properties": {"frame": {"type": "integer"}}},
        }
    ],
    "ag_actions": [
        {
            "name": "open_panel",
            "description": "Open a panel.",
            "schema": {"properties": {"panel": {"type": "string"}}},
            "has_render": True,
        }
    ],
}


@dataclass
class RecordingCaller:
    """Stands in for the gateway: records each call and answers ``answer``."""

    answer: Any = "ok"
    calls: list[tuple[str, str, str, dict[str, Any], str | None]] = field(default_factory=list)

    async def call_browser_tool(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        self.calls.append(("browser_tool", session_id, tool_name, dict(args), request_id))
        return self.answer

    async def call_action(
        self,
        session_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        *,
        request_id: str | None = None,
        socket_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        self.calls.append(("action", session_id, tool_name, dict(args), request_id))
        return self.answer


async def test_the_plugin_passes_the_conformance_suite() -> None:
    report = await validate_plugin(FrontendToolsPlugin(RecordingCaller()), state=STATE)

    assert report.ok


async def test_each_browser_tool_and_action_becomes_a_write_tool() -> None:
    async with await create_test_runtime(
        plugins=[FrontendToolsPlugin(RecordingCaller())], state=STATE
    ) as runtime:
        built = await runtime.build()

    infos = {name: info for name, info in built.tool_infos.items() if info.owner}
    assert set(infos) == {"get_page_title", "open_panel"}
    assert all(info.owner == "frontend-tools" for info in infos.values())
    assert all(info.effect == "write" for info in infos.values())
    assert all(info.visibility == "silent" for info in infos.values())
    schemas = {tool.name: tool.args_schema for tool in built.tools if tool.name in infos}
    assert schemas["get_page_title"] == STATE["browser_tools"][0]["schema"]
    assert schemas["open_panel"] == {
        "type": "object",
        "properties": {"panel": {"type": "string"}},
    }


async def test_without_client_tools_the_plugin_adds_none() -> None:
    async with await create_test_runtime(
        plugins=[FrontendToolsPlugin(RecordingCaller())]
    ) as runtime:
        built = await runtime.build()

    assert [i for i in built.tool_infos.values() if i.owner == "frontend-tools"] == []


async def test_tools_with_unusable_names_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = {
        "browser_tools": [
            {"name": "read page", "description": "Spaces are not allowed.", "schema": {}},
            "not an object",
            {"name": "scroll", "description": "Scroll.", "schema": {}},
        ]
    }
    caplog.set_level(logging.WARNING, logger="oracle.server.frontend_tools")

    async with await create_test_runtime(
        plugins=[FrontendToolsPlugin(RecordingCaller())], state=state
    ) as runtime:
        built = await runtime.build()

    owned = [i.name for i in built.tool_infos.values() if i.owner == "frontend-tools"]
    assert owned == ["scroll"]
    assert "browser tool 'read page' skipped" in caplog.text


async def test_a_browser_tool_call_goes_to_the_sessions_client() -> None:
    caller = RecordingCaller(answer={"title": "My Page"})
    async with await create_test_runtime(
        plugins=[FrontendToolsPlugin(caller)], state=STATE, session=TURN
    ) as runtime:
        result = await runtime.invoke_tool("get_page_title", {"frame": 2}, tool_call_id="c9")

    assert json.loads(result) == {"title": "My Page"}
    # The turn's request id, never the model's tool-call id: that one is only unique
    # within one model reply.
    assert caller.calls == [("browser_tool", "s-1", "get_page_title", {"frame": 2}, "req-1")]


async def test_an_action_call_goes_to_the_sessions_client() -> None:
    caller = RecordingCaller(answer="opened")
    async with await create_test_runtime(
        plugins=[FrontendToolsPlugin(caller)], state=STATE, session=TURN
    ) as runtime:
        result = await runtime.invoke_tool("open_panel", {"panel": "help"}, tool_call_id="c3")

    assert result == "opened"
    assert caller.calls == [("action", "s-1", "open_panel", {"panel": "help"}, "req-1")]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, {"type": "object", "properties": {}}),
        (None, {"type": "object", "properties": {}}),
        (
            {"properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"a": {"type": "string"}}},
        ),
        ({"type": "object", "required": []}, {"type": "object", "required": [], "properties": {}}),
        ({"type": "string"}, {"type": "string"}),
    ],
)
def test_tool_schema_makes_an_object_schema(given: Any, expected: dict[str, Any]) -> None:
    assert tool_schema(given) == expected
