"""A client's browser tools and AG-UI actions never shadow the oracle's own tools.

A real oracle on loopback with the real ``user-preferences``, ``portal`` and ``agui``
plugins; a real Socket.IO client in the session, and the OpenAI double as the model,
which calls a name that both the oracle and the client's declared tool carry. The
client's tools are the Portal and AG-UI agents' own, so the main agent sees one tool of
that name, the oracle's, and that is the one that runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oracle_plugins.agui import AguiPlugin
from oracle_plugins.portal import PortalPlugin
from oracle_plugins.user_preferences import UserPreferencesPlugin
from oracle_server.testing import RunningOracle, ToolCalls

SERVER_DESCRIPTION = "Save how the user wants you to behave"
AGENTS = {"tools": ("portal", "call_portal_agent"), "agActions": ("agui", "call_ag-ui_agent")}


@pytest.mark.parametrize("field", ["tools", "agActions"])
async def test_the_oracles_tool_runs_and_the_clients_stays_with_its_agent(
    tmp_path: Path, field: str
) -> None:
    capability, agent = AGENTS[field]
    oracle = await RunningOracle.start(
        [
            ToolCalls([("load_capability", {"names": [capability]})], ids=("load_1",)),
            ToolCalls([("set_user_preferences", {"agentName": "Nova"})], ids=("prefs_1",)),
            "Saved.",
        ],
        data_dir=tmp_path / "oracle",
        plugins=[UserPreferencesPlugin(), PortalPlugin(), AguiPlugin()],
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
        stored = await oracle.http.get("/user-preferences", headers=user.headers())
    finally:
        await oracle.aclose()

    assert response.status_code == 200, response.text
    assert "event: warning" not in response.text
    offered = [
        t["function"]
        for t in oracle.double.requests[1].tools
        if t["function"]["name"] in ("set_user_preferences", agent)
    ]
    assert sorted(tool["name"] for tool in offered) == sorted(["set_user_preferences", agent])
    [own] = [tool for tool in offered if tool["name"] == "set_user_preferences"]
    assert SERVER_DESCRIPTION in own["description"]
    assert oracle.tool_result("prefs_1").startswith("Updated. New preferences: ")
    assert stored.status_code == 200, stored.text
    assert stored.json()["agentName"] == "Nova"
    assert tab.records.named("browser_tool_call") == []
    assert tab.records.named("action_call") == []
