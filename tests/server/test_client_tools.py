"""A client's browser tools and AG-UI actions never shadow the oracle's own tools.

A real oracle on loopback with the real ``user-preferences`` plugin, whose request-time
tool ``set_user_preferences`` comes after ``frontend-tools`` in plugin order; a real
Socket.IO client in the session, and the OpenAI double as the model, which calls the
shadowed name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oracle_plugins.user_preferences import UserPreferencesPlugin
from oracle_server.testing import RunningOracle, ToolCalls

SERVER_DESCRIPTION = "Save how the user wants you to behave"
WARNING = {
    "code": "tools.client_tool_shadowed",
    "toolName": "set_user_preferences",
    "message": (
        "The client's tool 'set_user_preferences' was not offered to the model: the oracle "
        "has a tool of that name, which is used instead."
    ),
}


def _frames(body: str) -> list[tuple[str, Any]]:
    """Every ``(event, data)`` of an SSE body, whatever the event's name."""
    frames = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields and "data" in fields:
            frames.append((fields["event"], json.loads(fields["data"])))
    return frames


@pytest.mark.parametrize("field", ["tools", "agActions"])
async def test_the_server_tool_runs_and_the_client_is_warned(tmp_path: Path, field: str) -> None:
    oracle = await RunningOracle.start(
        [ToolCalls([("set_user_preferences", {"agentName": "Nova"})]), "Saved."],
        data_dir=tmp_path / "oracle",
        plugins=[UserPreferencesPlugin()],
    )
    try:
        user = oracle.new_user()
        session_id = await oracle.create_session(user)
        tab = await oracle.connect(user, session_id)
        await tab.wait_for("connected")
        client_tool: dict[str, Any] = {
            "name": "set_user_preferences",
            "description": "The page's own preferences dialog.",
            "schema": {"type": "object", "properties": {"agentName": {"type": "string"}}},
        }

        body: dict[str, Any] = {"stream": True, field: [client_tool]}
        response = await oracle.send_message(user, session_id, "Call yourself Nova", **body)
        [warning] = await tab.wait_for("warning")
        stored = await oracle.http.get("/user-preferences", headers=user.headers())
    finally:
        await oracle.aclose()

    assert response.status_code == 200, response.text
    frames = _frames(response.text)
    assert [data for event, data in frames if event == "warning"] == [
        {"sessionId": session_id, "requestId": warning["payload"]["requestId"], **WARNING}
    ]
    assert frames[-1] == ("done", frames[-1][1])
    assert frames[-1][1]["status"] == "finished"
    assert warning["eventName"] == "warning"
    # The model saw one tool of that name, the oracle's, and the oracle's ran.
    offered = [
        t["function"]
        for t in oracle.double.requests[0].tools
        if t["function"]["name"] == "set_user_preferences"
    ]
    assert len(offered) == 1
    assert SERVER_DESCRIPTION in offered[0]["description"]
    assert oracle.second_request_tool_message().startswith("Updated. New preferences: ")
    assert stored.status_code == 200, stored.text
    assert stored.json()["agentName"] == "Nova"
    assert tab.records.named("browser_tool_call") == []
    assert tab.records.named("action_call") == []
