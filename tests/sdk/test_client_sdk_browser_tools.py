"""The published client SDK declares a browser tool through its own API
(``useChat({browserTools})``) and runs it when the oracle's Portal Agent calls it.

The SDK turns each tool's zod schema into JSON Schema with ``zod-to-json-schema``; with
the zod 4 the SDK's peer range takes, that gives ``{"$schema": …}`` and no properties, so
the oracle must offer the tool with an open argument object and pass the model's
arguments through unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from oracle_plugins.portal import PortalPlugin
from oracle_server import create_oracle_app
from oracle_server.testing import ChatRequest, OpenAIDouble, ToolCalls, delegating
from oracle_ucan import Ed25519Signer

TOOL = "open_page"
DESCRIPTION = "Open a page of the user's workspace."
ARGS = {"url": "https://example.org/reports"}
RESULT = {"opened": True, "title": "Reports"}


@dataclass
class Scenario:
    driver: Any
    requests: list[ChatRequest]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scenario(drive_sdk: Any, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    data: Path = tmp_path_factory.mktemp("sdk-portal-oracle")
    steps = delegating(
        "portal",
        "call_portal_agent",
        ToolCalls([(TOOL, ARGS)], ids=("b1",)),
        "The Reports page is open.",
        "Your Reports page is open.",
        task="Open https://example.org/reports",
    )
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "SDK Portal Oracle"},
            plugins=[PortalPlugin()],
            env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(data), **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        run = await drive_sdk(
            app,
            Ed25519Signer.generate(),
            prompts=["Open my reports page."],
            browserTools=[{"toolName": TOOL, "description": DESCRIPTION, "result": RESULT}],
        )
        requests = list(llm.requests)
    return Scenario(run.driver, requests)


def test_the_sdk_runs_the_turn_and_logs_nothing(scenario: Scenario) -> None:
    steps = [r["step"] for r in scenario.driver.records]

    assert "console" not in steps
    assert steps.count("browser_tool") == 1
    assert steps[-1] == "end"


def test_the_sdk_ran_its_tool_with_the_models_arguments(scenario: Scenario) -> None:
    [ran] = [r for r in scenario.driver.records if r["step"] == "browser_tool"]

    assert (ran["toolName"], ran["args"]) == (TOOL, ARGS)


def test_the_portal_agent_offered_the_sdks_tool_and_got_its_result(scenario: Scenario) -> None:
    main, sub, answered, final = (scenario.requests[i] for i in (1, 2, 3, 4))
    [offered] = [t["function"] for t in sub.tools if t["function"]["name"] == TOOL]
    [result] = [m for m in answered.messages if m.get("tool_call_id") == "b1"]
    [delegated] = [m for m in final.messages if m.get("tool_call_id") == "agent_1"]

    assert "call_portal_agent" in [t["function"]["name"] for t in main.tools]
    assert TOOL not in [t["function"]["name"] for t in main.tools]
    assert offered["description"].endswith(DESCRIPTION)
    assert offered["parameters"]["type"] == "object"
    assert json.loads(result["content"]) == RESULT
    assert delegated["content"] == "The Reports page is open."
