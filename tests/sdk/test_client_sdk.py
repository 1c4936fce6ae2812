"""The published JavaScript client, ``@ixo/oracles-client-sdk`` 1.4.0, drives the oracle.

``js/drive_sdk.mjs`` renders the SDK's own hooks (react-test-renderer, no DOM) as a front
end does: it lists the models, creates a session, streams a turn that calls a tool of
`FactsPlugin` — a proxy cuts that stream mid-way and the SDK rejoins the run — sends a
second turn, reopens the session with a small history page size and pages back, then
deletes the session. The scenario runs once (`scenario`); each test checks one part of it,
against what the SDK's hooks exposed and what the server saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import pytest_asyncio
from pydantic import BaseModel, ConfigDict

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext, plugin_tool
from oracle_server import create_oracle_app
from oracle_server.testing import (
    MemoryRunLog,
    OpenAIDouble,
    PersistentSseParser,
    SseEvent,
    Step,
    ToolCalls,
)
from oracle_ucan import Ed25519Signer

# Fixture types live in conftest.py, which test modules cannot import (importlib mode).
DriverRun = Any
ProxiedRequest = Any

TOPIC = "tides"
FACT = "Tides follow the moon: two highs and two lows a day."
LONG_ANSWER = " ".join(f"Tides rise and fall, part {n}." for n in range(1, 41))
SHORT_ANSWER = "You are welcome."
PROMPTS = ["Tell me everything about tides.", "Thanks!"]
PAGE_SIZE = 2
CUT_AFTER_MESSAGES = 3
ORACLE_NAME = "SDK Oracle"


class TopicArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str


class FactsPlugin(OraclePlugin):
    """The tool the model calls in the first turn."""

    name = "facts"
    version = "1.0.0"
    manifest = {
        "title": "Facts",
        "summary": "Look up a fact about a topic.",
        "when_to_use": ["The user asks about a topic"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="lookup_fact", description="A fact about a topic.", args_schema=TopicArgs)
        def lookup_fact(args: TopicArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return FACT if args.topic == TOPIC else "unknown"

        return [lookup_fact]


@dataclass
class Run:
    """A run as the server's run log holds it."""

    run_id: str
    session_id: str
    request_id: str
    status: str
    events: list[SseEvent]

    @property
    def text(self) -> str:
        return "".join(e.data["content"] for e in self.events if e.event == "message")


@dataclass
class Scenario:
    """What happened: the driver's records and the server's side of it."""

    driver: DriverRun
    requests: list[ProxiedRequest]
    cut: ProxiedRequest | None
    runs: list[Run]
    session_kept: bool
    entity_queries: list[tuple[str, dict[str, Any]]]
    oracle_did: str
    delegation: str
    tool_results: list[str]

    @property
    def session_id(self) -> str:
        return str(self.driver.step("created")["session"]["sessionId"])

    def requests_to(self, method: str, path: str) -> list[ProxiedRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def turn(self, index: int) -> dict[str, Any]:
        return dict(self.driver.step("turn", index=index))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scenario(drive_sdk: Any, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """The SDK's scenario against a served oracle, through the proxy; then the facts."""
    data: Path = tmp_path_factory.mktemp("sdk-oracle")
    user = Ed25519Signer.generate()
    steps: list[Step] = [ToolCalls([("lookup_fact", {"topic": TOPIC})]), LONG_ANSWER, SHORT_ANSWER]
    # Four characters a frame, 5 ms apart: the answer streams for about 1.5 s.
    async with OpenAIDouble(steps, chunk_size=4, delay_between_chunks=0.005) as llm:
        app = await create_oracle_app(
            {"name": ORACLE_NAME},
            plugins=[FactsPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(data),
                # The default throttle: the client's normal use never meets it.
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        oracle_did = app.state.oracle_did

        async def server_side(driver: DriverRun) -> tuple[list[Run], bool]:
            runs = []  # in the order they were created
            log = app.state.runner.runs
            assert isinstance(log, MemoryRunLog)
            for run_id in log.run_ids():
                info = await log.info(run_id)
                assert info is not None
                parser = PersistentSseParser()
                events: list[SseEvent] = []
                for event in await log.read(run_id, 0, wait=0):
                    events += parser.feed(event.to_sse().decode())
                runs.append(Run(run_id, info.session_id, info.request_id, info.status, events))
            session_id = driver.step("created")["session"]["sessionId"]
            kept = await app.state.sessions.get(user.did(), session_id) is not None
            return runs, kept

        sdk = await drive_sdk(
            app,
            user,
            prompts=PROMPTS,
            cut_after=CUT_AFTER_MESSAGES,
            history_page_size=PAGE_SIZE,
            while_serving=server_side,
        )
        runs, session_kept = sdk.served
        # The model request after the tool call: it carries the tool's result.
        tool_results = [
            str(message.get("content"))
            for message in llm.requests[1].messages
            if message.get("role") == "tool"
        ]
    return Scenario(
        driver=sdk.driver,
        requests=sdk.requests,
        cut=sdk.cut,
        runs=runs,
        session_kept=session_kept,
        entity_queries=sdk.entity_queries,
        oracle_did=oracle_did,
        delegation=sdk.delegation,
        tool_results=tool_results,
    )


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["type"], m["content"]) for m in messages]


def test_the_sdk_plays_the_whole_scenario(scenario: Scenario) -> None:
    driver = scenario.driver
    steps = [r["step"] for r in driver.records if r["step"] != "console"]

    assert driver.returncode == 0
    assert steps == [
        "delegation",
        "models",
        "sessions",
        "created",
        "sessions",
        "opened",
        "turn",
        "turn",
        "page",
        "page",
        "page",
        "deleted",
        "sessions",
        "end",
    ]


def test_the_sdk_logs_nothing_but_the_dropped_stream(scenario: Scenario) -> None:
    # The SDK's SSE reader logs the cut connection before it rejoins (sse-parser.ts).
    logged = [(r["level"], r["text"]) for r in scenario.driver.steps("console")]

    assert logged == [("error", "Error parsing SSE stream: TypeError: terminated")]


def test_the_models_are_listed_without_credentials(scenario: Scenario) -> None:
    # Once per mounted provider: on the first mount and on the reload.
    requests = scenario.requests_to("GET", "/models")

    assert scenario.driver.step("models") == {
        "step": "models",
        "models": [{"id": "double-model", "isDefault": True}],
        "defaultModelId": "double-model",
        "error": None,
    }
    assert len(requests) == 2
    for request in requests:
        assert "authorization" not in request.headers
        assert "x-ucan-delegation" not in request.headers


def test_the_sdk_authenticates_with_the_delegation_alone(scenario: Scenario) -> None:
    authed = [r for r in scenario.requests if r.path != "/models"]

    assert scenario.driver.step("delegation")["oracleDid"] == scenario.oracle_did
    assert len(authed) > 10
    for request in authed:
        assert request.headers.get("x-ucan-delegation") == scenario.delegation, request.target
        assert "authorization" not in request.headers, request.target
        # The rejoin is a bare fetch; every other call goes through the SDK's `request`.
        json_type = None if request.path.startswith("/runs/") else "application/json"
        assert request.headers.get("content-type") == json_type, request.target


def test_the_sdk_looks_the_oracle_up_once_per_provider(scenario: Scenario) -> None:
    assert scenario.entity_queries == [("GetEntityById", {"id": scenario.oracle_did})] * 2


def test_a_session_is_created_and_listed(scenario: Scenario) -> None:
    session = scenario.driver.step("created")["session"]
    mounted = scenario.driver.step("sessions", when="mounted")
    created = scenario.driver.step("sessions", when="created")

    assert {"sessionId", "title", "lastUpdatedAt", "createdAt", "oracleName"} <= set(session)
    assert session["oracleName"] == ORACLE_NAME
    assert (mounted["sessions"], mounted["total"]) == ([], 0)
    assert (created["sessions"], created["total"]) == ([session], 1)
    assert len(scenario.requests_to("POST", "/sessions")) == 1


def test_opening_the_session_loads_history_checks_the_run_and_connects(
    scenario: Scenario,
) -> None:
    sid = scenario.session_id
    first_history = scenario.requests_to("GET", f"/sessions/{sid}/messages")[0]

    assert scenario.driver.step("opened") == {"step": "opened", "messages": [], "connected": True}
    assert first_history.target == f"/sessions/{sid}/messages?limit=20"
    # Once per mounted provider: on opening, and on reopening with the small page size.
    assert len(scenario.requests_to("GET", f"/sessions/{sid}/run")) == 2


def test_a_tool_turn_streams_into_the_sdk_messages(scenario: Scenario) -> None:
    turn = scenario.turn(0)
    request_id = scenario.runs[0].request_id
    streamed = {m["id"]: m for m in turn["streamed"]}
    tool = streamed[f"{request_id}-ToolCall-call_1"]

    assert turn["run"]["ended"] == "done"
    assert _texts(turn["streamed"])[0] == ("human", PROMPTS[0])
    assert tool["type"] == "ai"
    assert [(c["name"], c["status"], c["output"]) for c in tool["toolCalls"]] == [
        ("lookup_fact", "done", FACT)
    ]
    assert scenario.tool_results == [FACT]
    [human, called, answer] = turn["history"]
    assert (human["type"], human["content"]) == ("human", PROMPTS[0])
    [component] = called["content"]
    assert component["name"] == "ToolCall"
    assert component["props"]["args"] == {"topic": TOPIC}
    assert (component["props"]["status"], component["props"]["output"]) == ("done", FACT)
    assert (answer["type"], answer["content"]) == ("ai", LONG_ANSWER)


def test_the_live_tool_call_keeps_its_arguments(scenario: Scenario) -> None:
    request_id = scenario.runs[0].request_id
    streamed = {m["id"]: m for m in scenario.turn(0)["streamed"]}

    [call] = streamed[f"{request_id}-ToolCall-call_1"]["toolCalls"]
    assert call["args"] == {"topic": TOPIC, "toolName": "lookup_fact"}


def test_a_cut_stream_is_rejoined_after_the_last_frame_seen(scenario: Scenario) -> None:
    cut, run = scenario.cut, scenario.runs[0]
    assert cut is not None
    seen = cut.frames()
    later = scenario.requests[scenario.requests.index(cut) + 1 :]
    rejoins = [r for r in scenario.requests if r.path.startswith("/runs/")]
    states = scenario.turn(0)["states"]

    assert (cut.method, cut.path) == ("POST", f"/messages/{scenario.session_id}")
    assert sum(event == "message" for event, _ in seen) >= CUT_AFTER_MESSAGES
    assert run.events[-1].event == "done"
    assert run.events[-1].id is not None
    assert seen[-1][1] < run.events[-1].id
    assert [r.target for r in rejoins] == [f"/runs/{run.run_id}?after={seen[-1][1]}"]
    assert later[0] is rejoins[0]
    assert any(s["reconnecting"] for s in states)
    assert states[-1]["runId"] == run.run_id
    assert (states[-1]["status"], states[-1]["ended"]) == ("ready", "done")


def test_the_run_finished_on_the_server_with_the_whole_answer(scenario: Scenario) -> None:
    [first, second] = scenario.runs

    assert [r.session_id for r in scenario.runs] == [scenario.session_id] * 2
    assert (first.status, second.status) == ("finished", "finished")
    assert [e.id for e in first.events] == list(range(1, len(first.events) + 1))
    assert first.events[-1].data["status"] == "finished"
    assert (first.text, second.text) == (LONG_ANSWER, SHORT_ANSWER)


def test_the_sdk_shows_the_whole_answer_after_the_rejoin(scenario: Scenario) -> None:
    # Whatever the streamed messages are called, their text adds up to the answer, once.
    streamed = scenario.turn(0)["streamed"]
    answer = [
        m["content"]
        for m in streamed
        if m["type"] == "ai" and isinstance(m["content"], str) and not m.get("isReasoning")
    ]

    assert "".join(answer) == LONG_ANSWER


def test_the_rejoined_answer_stays_one_message(scenario: Scenario) -> None:
    turn, run = scenario.turn(0), scenario.runs[0]
    streamed = {m["id"]: m for m in turn["streamed"]}

    assert turn["run"]["requestId"] == run.request_id
    assert streamed[run.request_id]["content"] == LONG_ANSWER


def test_each_turn_ends_done_and_revalidates_only_what_is_new(scenario: Scenario) -> None:
    sid = scenario.session_id
    catch_ups = [
        parse_qs(urlsplit(r.target).query)
        for r in scenario.requests_to("GET", f"/sessions/{sid}/messages")
        if "after=" in r.target
    ]
    second = scenario.turn(1)

    assert catch_ups == [{"limit": ["20"], "after": ["m0"]}, {"limit": ["20"], "after": ["m3"]}]
    assert second["run"]["ended"] == "done"
    assert not any(s["reconnecting"] for s in second["states"])
    assert _texts(second["history"]) == [
        *_texts(scenario.turn(0)["history"]),
        ("human", PROMPTS[1]),
        ("ai", SHORT_ANSWER),
    ]


def test_a_reopened_session_pages_back_through_its_history(scenario: Scenario) -> None:
    sid = scenario.session_id
    pages = scenario.driver.steps("page")
    everything = scenario.turn(1)["history"]
    paged = [
        r.target
        for r in scenario.requests_to("GET", f"/sessions/{sid}/messages")
        if parse_qs(urlsplit(r.target).query)["limit"] == [str(PAGE_SIZE)]
    ]

    assert [(len(p["messages"]), p["hasEarlier"]) for p in pages] == [
        (2, True),
        (4, True),
        (5, False),
    ]
    for page in pages:  # each older page goes in front of what is shown
        assert page["messages"] == everything[-len(page["messages"]) :]
    assert paged == [
        f"/sessions/{sid}/messages?limit=2",
        f"/sessions/{sid}/messages?limit=2&before=m3",
        f"/sessions/{sid}/messages?limit=2&before=m1",
    ]


def test_the_session_is_deleted(scenario: Scenario) -> None:
    deleted = scenario.driver.step("sessions", when="deleted")

    assert scenario.driver.step("deleted")["response"] == {
        "message": "Session deleted successfully"
    }
    assert (deleted["sessions"], deleted["total"]) == ([], 0)
    assert len(scenario.requests_to("DELETE", f"/sessions/{scenario.session_id}")) == 1
    assert not scenario.session_kept
