"""Turns that go wrong, over HTTP against the model double: what the client is told of a
failure, frames that cannot be encoded, events of turns sharing a request id, a model that
stalls or trickles, more turns than a replica runs at once, a rejoin of an ended or
expired run, and a session deleted mid-turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from redis.asyncio import Redis

from oracle_core import OraclePlugin, PluginContext, PluginTool, RuntimeContext
from oracle_server import OracleApp
from oracle_server._turns.runlog import RedisRunLog
from oracle_server.testing import (
    Announcer,
    ClockPlugin,
    OpenAIDouble,
    Paced,
    PersistentSseParser,
    SseEvent,
    ToolCalls,
    auth_headers,
    redis_url_or_skip,
)
from oracle_ucan import Ed25519Signer

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]

SURROGATE = "\udc80"


class _NoArgs(BaseModel):
    pass


class FaultyPlugin(OraclePlugin):
    """``hold`` waits until its turn is cancelled, then runs ``on_cancelled`` (a plugin
    tidying up after itself) before it lets go."""

    name = "faulty"
    version = "1.0.0"
    manifest = {
        "title": "Faulty",
        "summary": "A tool that hangs.",
        "when_to_use": ["Never"],
        "visibility": "always",
    }

    def __init__(self) -> None:
        self.holding = asyncio.Event()
        self.on_cancelled: Callable[[], Awaitable[None]] | None = None

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        """``hold``."""
        return [
            PluginTool(name="hold", description="Hang.", args_schema=_NoArgs, handler=self.hold)
        ]

    async def hold(self, args: _NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
        """Wait for ever; on cancellation, tidy up first."""
        self.holding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.on_cancelled is not None:
                await self.on_cancelled()
            raise
        return "never"


def events_of(chunks: list[str]) -> list[SseEvent]:
    parser = PersistentSseParser()
    return [e for chunk in chunks for e in parser.feed(chunk)] + parser.end()


async def new_session(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.post("/sessions", headers=headers)
    assert response.status_code == 201
    session_id: str = response.json()["sessionId"]
    return session_id


async def stream_turn(
    client: httpx.AsyncClient, session_id: str, headers: dict[str, str], text: str = "hi"
) -> tuple[httpx.Response, list[SseEvent]]:
    body = {"message": text, "stream": True}
    async with client.stream(
        "POST", f"/messages/{session_id}", headers=headers, json=body
    ) as response:
        chunks = [chunk async for chunk in response.aiter_text()]
    return response, events_of(chunks)


async def rejoin(
    client: httpx.AsyncClient, run_id: str, after: int, headers: dict[str, str]
) -> tuple[int, list[SseEvent], Any]:
    """Status, events, and (for an error) the JSON body of ``GET /runs/{id}?after=N``."""
    async with client.stream(
        "GET", f"/runs/{run_id}", params={"after": after}, headers=headers
    ) as response:
        chunks = [chunk async for chunk in response.aiter_text()]
    if response.status_code != 200:
        return response.status_code, [], json.loads("".join(chunks))
    return response.status_code, events_of(chunks), None


def assert_whole(events: list[SseEvent]) -> None:
    """Frames numbered 1, 2, … without a gap, ``done`` last and only there."""
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.event for e in events].count("done") == 1
    assert events[-1].event == "done"


# -- what a failed turn tells the client -------------------------------------------------


async def test_a_failed_turn_answers_a_code_and_a_generic_message(
    serve: Serve, llm: OpenAIDouble, caplog: pytest.LogCaptureFixture
) -> None:
    # The script is empty: every model request answers HTTP 500 with the double's own
    # error text (the model client retries, then raises it).
    user = Ed25519Signer.generate()
    async with (
        serve([ClockPlugin()]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)

        response, events = await stream_turn(client, session, headers)
        assert response.status_code == 200
        assert_whole(events)
        error = next(e for e in events if e.event == "error")
        assert error.data["code"] == "turn.model_unavailable"
        assert error.data["error"] == "The model could not be reached; try again"
        assert error.data["retryable"] is True
        assert error.data["runId"] == response.headers["x-run-id"]
        assert events[-1].data["status"] == "failed"

        plain = await client.post(f"/messages/{session}", headers=headers, json={"message": "x"})
        assert plain.status_code == 500
        body = plain.json()
        assert (body["statusCode"], body["error"]) == (500, "Internal Server Error")
        assert body["code"] == "turn.model_unavailable"
        assert body["message"] == "The model could not be reached; try again"

        assert llm.errors  # the double's error text, which stays on the server
        for text in (json.dumps([e.data for e in events]), plain.text):
            assert "no step left" not in text
            assert "Error code" not in text
        assert "no step left" not in caplog.text
        assert "turns.failed: turn.model_unavailable" in caplog.text


# -- every frame is delivered -------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_lone_surrogate_costs_no_frame(
    serve: Serve, llm: OpenAIDouble, backend: str
) -> None:
    env = {"REDIS_URL": redis_url_or_skip()} if backend == "redis" else {}
    llm.add_steps(
        ToolCalls([("city_time", {"city": f"Par{SURROGATE}is"})], text=f"Look{SURROGATE}ing"),
        f"It is noon{SURROGATE}.",
    )
    user = Ed25519Signer.generate()
    async with (
        serve([ClockPlugin()], **env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)
        response, live = await stream_turn(client, session, headers)
        assert_whole(live)
        running = next(e for e in live if e.event == "tool_call")
        assert running.data["args"]["city"] == "Par\ufffdis"
        assert "Look\ufffding" in "".join(e.data["content"] for e in live if e.event == "message")

        _, replayed, _ = await rejoin(client, response.headers["x-run-id"], 0, headers)
        assert [(e.id, e.event, e.data) for e in replayed] == [
            (e.id, e.event, e.data) for e in live
        ]


# -- plugin events reach their own turn -----------------------------------------------------


def _announce_then_answer(chat: Any) -> str | ToolCalls:
    if chat.messages and chat.messages[-1].get("role") == "tool":
        return "announced"
    return ToolCalls([("announce", {})])


async def test_turns_sending_the_same_request_id_get_their_own_events(serve: Serve) -> None:
    async with OpenAIDouble(
        auto_reply=_announce_then_answer, chunk_size=2, delay_between_chunks=0.02
    ) as llm:
        alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
        async with (
            serve([Announcer()], **llm.env()) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, timeout=60) as client,
        ):
            callers = []
            for user in (alice, alice, bob):
                headers = {**auth_headers(user, app.state.oracle_did), "x-request-id": "same-id"}
                callers.append((await new_session(client, headers), headers))
            results = await asyncio.gather(
                *(stream_turn(client, session, headers) for session, headers in callers)
            )
            for (session, _), (response, events) in zip(callers, results, strict=True):
                assert response.headers["x-request-id"] == "same-id"
                assert_whole(events)
                components = [e for e in events if e.event == "render_component"]
                assert [e.data["sessionId"] for e in components] == [session]
                routed = [e for e in events if "sessionId" in e.data]
                assert {e.data["sessionId"] for e in routed} == {session}


# -- liveness -----------------------------------------------------------------------------


async def test_a_model_stalled_before_its_first_byte_ends_the_turn(
    serve: Serve, llm: OpenAIDouble
) -> None:
    llm.add_steps(Paced("never sent", first_byte_after=120), "Back again.")
    user = Ed25519Signer.generate()
    async with (
        serve([ClockPlugin()], TURN_IDLE_TIMEOUT_SECONDS="1") as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)
        _, events = await stream_turn(client, session, headers)
        assert_whole(events)
        assert [e.event for e in events[-2:]] == ["error", "done"]
        assert events[-2].data["code"] == "turn.model_timeout"
        assert events[-1].data["status"] == "failed"
        assert len(llm.requests) == 1  # ended, not retried for minutes

        # The session is usable at once: its lock was released. A loaded machine must not
        # make the next, healthy turn look idle.
        app.state.runner.idle_timeout = 60
        _, again = await stream_turn(client, session, headers)
        assert again[-1].data["status"] == "finished"
        assert "".join(e.data["content"] for e in again if e.event == "message") == "Back again."


async def test_a_trickling_model_is_ended_at_the_turn_deadline(
    serve: Serve, llm: OpenAIDouble
) -> None:
    trickle = " ".join(f"w{n}" for n in range(400))
    llm.add_steps(Paced(trickle, between_chunks=0.05), "Done now.")
    user = Ed25519Signer.generate()
    async with (
        serve([ClockPlugin()], TURN_DEADLINE_SECONDS="2") as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)
        _, events = await stream_turn(client, session, headers)
        assert_whole(events)
        assert [e.event for e in events[-2:]] == ["error", "done"]
        assert events[-2].data["code"] == "turn.deadline"
        done = events[-1].data
        assert done["status"] == "failed"
        assert trickle.startswith(done["partialText"])
        assert done["partialText"] != trickle

        app.state.runner.deadline = 60
        _, again = await stream_turn(client, session, headers)
        assert again[-1].data["status"] == "finished"


# -- more turns than the replica runs at once ------------------------------------------------


async def test_turns_past_the_concurrency_bound_wait_queued_then_run(
    serve: Serve, llm: OpenAIDouble
) -> None:
    plugin = FaultyPlugin()
    # Alice's and Bob's turns each hold the only slot in a tool until their deadline
    # ends them (tools are not timed by the idle timeout); Carol's turn answers.
    llm.add_steps(ToolCalls([("hold", {})]), ToolCalls([("hold", {})]), "Your turn came.")
    users = [Ed25519Signer.generate() for _ in range(3)]
    async with (
        serve([plugin], TURN_CONCURRENCY="1", TURN_DEADLINE_SECONDS="3") as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = [auth_headers(user, app.state.oracle_did) for user in users]
        sessions = [await new_session(client, h) for h in headers]
        alice = asyncio.create_task(stream_turn(client, sessions[0], headers[0]))
        await asyncio.wait_for(plugin.holding.wait(), 30)
        turns: list[asyncio.Task[tuple[httpx.Response, list[SseEvent]]]] = []
        for session, session_headers in zip(sessions[1:], headers[1:], strict=True):
            # One after the other: the slot goes in arrival order.
            turns.append(asyncio.create_task(stream_turn(client, session, session_headers)))
            async with asyncio.timeout(30):
                while not app.state.runner.turns_of(session):  # noqa: ASYNC110 - polling
                    await asyncio.sleep(0.01)
        bob, carol = turns
        for session in sessions[1:]:
            info = await app.state.runner.runs.info(app.state.runner.turns_of(session)[0].run_id)
            assert info is not None
            assert info.status == "queued"  # other users' sessions, and still they wait
        assert len(llm.requests) == 1

        for task in (alice, bob):
            _, held = await task
            assert_whole(held)
            assert held[-2].data["code"] == "turn.deadline"
        # Carol waited for two deadlines, yet her turn ran whole: a deadline counts from
        # when a turn runs, not from when it queued.
        _, served = await carol
        assert_whole(served)
        assert served[-1].data["status"] == "finished"
        reply = "".join(e.data["content"] for e in served if e.event == "message")
        assert reply == "Your turn came."
        assert len(llm.requests) == 3


# -- rejoining an ended run -----------------------------------------------------------------


async def test_an_ended_run_closes_a_rejoin_and_an_expired_one_is_gone(
    serve: Serve, llm: OpenAIDouble
) -> None:
    redis_url = redis_url_or_skip()
    llm.add_steps("Hello there.")
    user = Ed25519Signer.generate()
    async with (
        serve([ClockPlugin()], REDIS_URL=redis_url) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)
        response, events = await stream_turn(client, session, headers)
        run_id = response.headers["x-run-id"]

        # Nothing left after the last frame: one closing frame with the stored status.
        status, tail, _ = await rejoin(client, run_id, len(events), headers)
        assert status == 200
        assert [(e.event, e.data["status"]) for e in tail] == [("done", "finished")]

        # The log's retention ends (what Redis does when the keys expire).
        redis = Redis.from_url(redis_url)
        try:
            prefix = RedisRunLog.PREFIX
            await redis.delete(f"{prefix}{run_id}:info", f"{prefix}{run_id}:events")
        finally:
            await redis.aclose()
        status, _, body = await rejoin(client, run_id, 0, headers)
        assert (status, body["statusCode"], body["code"]) == (410, 410, "run.expired")
        stranger = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        status, _, body = await rejoin(client, run_id, 0, stranger)
        assert (status, body["code"]) == (404, "run.not_found")
        status, _, body = await rejoin(client, "0" * 32, 0, headers)
        assert (status, body["code"]) == (404, "run.not_found")


# -- deleting a session mid-turn --------------------------------------------------------------


async def test_deleting_a_session_waits_for_its_runs_to_end(
    serve: Serve, llm: OpenAIDouble
) -> None:
    plugin = FaultyPlugin()
    llm.add_steps(ToolCalls([("hold", {})]))
    user = Ed25519Signer.generate()
    async with (
        serve([plugin]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = await new_session(client, headers)
        still_there: list[bool] = []

        async def tidy_up() -> None:
            # A slow clean-up: the session must outlive the run's last work.
            await asyncio.sleep(0.5)
            still_there.append(await app.state.sessions.get(user.did(), session) is not None)

        plugin.on_cancelled = tidy_up
        turn = asyncio.create_task(stream_turn(client, session, headers))
        await asyncio.wait_for(plugin.holding.wait(), 30)
        queued = asyncio.create_task(stream_turn(client, session, headers, "second"))
        async with asyncio.timeout(30):
            while len(app.state.runner.turns_of(session)) < 2:  # noqa: ASYNC110 - polling
                await asyncio.sleep(0.01)
        run_ids = [t.run_id for t in app.state.runner.turns_of(session)]

        deleted = await client.delete(f"/sessions/{session}", headers=headers)
        assert deleted.status_code == 200
        # Both runs had ended, their last work done, before the rows went.
        assert still_there == [True]
        assert app.state.runner.turns_of(session) == []
        for run_id in run_ids:
            info = await app.state.runner.runs.info(run_id)
            assert info is not None
            assert info.status == "aborted"

        (_, first), (_, second) = await turn, await queued
        for events in (first, second):
            assert_whole(events)
            assert events[-1].data["status"] == "aborted"
        assert (await client.get("/sessions", headers=headers)).json()["total"] == 0
        assert await app.state.runtime.thread_messages(user.did(), session) == []
        gone = await client.post(f"/messages/{session}", headers=headers, json={"message": "x"})
        assert gone.status_code == 404
