"""The published client SDK through a tool approval (plugins spec §20.2): it knows nothing
of approvals, so the request must reach it as words it shows, its unknown-event handling
must stay quiet, and a plain "yes" as the next message must run the call once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel, ConfigDict

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, Step, ToolCalls
from oracle_ucan import Ed25519Signer

PROMPTS = ["Forget what you know about tides.", "yes"]
ANSWER = "Done: I forgot everything about tides."
NEVER_CUT = 10**9


class TopicArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str


class ForgetPlugin(OraclePlugin):
    """A destructive tool, so the call waits for the user's approval."""

    name = "forget"
    version = "1.0.0"
    manifest = {
        "title": "Forget",
        "summary": "Forget what is known about a topic.",
        "when_to_use": ["The user asks to forget a topic"],
        "visibility": "always",
    }

    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(
            name="forget_topic",
            description="Forget a topic.",
            args_schema=TopicArgs,
            effect="destructive",
        )
        def forget_topic(args: TopicArgs, rt_ctx: RuntimeContext[Any]) -> str:
            self.forgotten.append(args.topic)
            return f"forgot {args.topic}"

        return [forget_topic]


@dataclass
class Scenario:
    driver: Any
    forgotten: list[str]
    approvals: list[dict[str, Any]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scenario(drive_sdk: Any, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    data: Path = tmp_path_factory.mktemp("sdk-approval-oracle")
    user = Ed25519Signer.generate()
    plugin = ForgetPlugin()
    steps: list[Step] = [ToolCalls([("forget_topic", {"topic": "tides"})]), ANSWER]
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "SDK Approval Oracle"},
            plugins=[plugin],
            env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(data), **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )

        async def approvals(driver: Any) -> list[dict[str, Any]]:
            return [
                record.to_wire() | {"via": record.decided_via}
                for record in await app.state.storage.approvals.find(user.did())
            ]

        run = await drive_sdk(app, user, prompts=PROMPTS, while_serving=approvals)
    return Scenario(run.driver, plugin.forgotten, run.served)


def test_the_sdk_plays_both_turns_and_logs_nothing(scenario: Scenario) -> None:
    steps = [r["step"] for r in scenario.driver.records if r["step"] != "console"]

    assert steps.count("turn") == 2
    assert steps[-1] == "end"
    # The tool_approval_request event is dropped without a word.
    assert scenario.driver.steps("console") == []


def test_the_request_is_shown_while_streaming_and_after_the_history_reloads(
    scenario: Scenario,
) -> None:
    turn = scenario.driver.step("turn", index=0)
    streamed = [m["content"] for m in turn["streamed"] if m["type"] == "ai"]
    [human, paused] = turn["history"]
    [component] = paused["content"]

    assert turn["run"]["ended"] == "done"
    assert any(isinstance(c, str) and "Approval needed" in c for c in streamed)
    assert "Reply yes" in next(c for c in streamed if isinstance(c, str) and "Approval" in c)
    assert human["content"] == PROMPTS[0]
    # Reloaded, the paused call shows that it waits (the history's positions are kept).
    assert component["props"]["toolName"] == "forget_topic"
    assert component["props"]["output"].startswith("Waiting for your approval (apr_")


def test_yes_runs_the_call_once_and_the_answer_follows(scenario: Scenario) -> None:
    turn = scenario.driver.step("turn", index=1)
    answer = turn["history"][-1]
    reloaded = scenario.driver.steps("page")[0]["messages"]
    [called] = [m for m in reloaded if isinstance(m["content"], list)]
    [component] = called["content"]

    assert scenario.forgotten == ["tides"]
    assert (answer["type"], answer["content"]) == ("ai", ANSWER)
    # The SDK keeps the pages it has and fetches only what is new; a reload shows the
    # call's result.
    assert component["props"]["output"] == "forgot tides"
    assert [m["content"] for m in reloaded if isinstance(m["content"], str)] == [
        PROMPTS[0],
        ANSWER,
    ]
    # The yes answered the approval: it is not a message of the thread.
    assert PROMPTS[1] not in [m["content"] for m in reloaded]
    # Deleting the session (the driver's last step) took its approvals with it.
    assert scenario.approvals == []
