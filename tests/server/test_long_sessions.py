"""A session longer than the main model's window, served over real HTTP.

The oracle runs on loopback against the OpenAI-compatible double with
``LLM_CONTEXT_WINDOWS`` set small; the summarizer is the ``utility`` role, told apart by
its model id. The client sees only the replies, and reads the whole history back.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from oracle_core._middleware.condense import SUMMARY_HEADING
from oracle_server import OracleApp
from oracle_server.testing import ChatRequest, OpenAIDouble, PersistentSseParser, auth_headers
from oracle_ucan import Ed25519Signer

ServeFactory = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]

TURNS = 16
SUMMARY = "The user is planning a trip and named fact-1 as amber."
PADDING = "I am writing a long message about my travel plans and preferences. " * 12


def reply(request: ChatRequest) -> str:
    return SUMMARY if request.model == "summary-model" else "Noted."


async def test_a_long_session_is_condensed_and_the_client_sees_only_replies(
    serve: ServeFactory,
) -> None:
    user = Ed25519Signer.generate()
    streamed: list[str] = []
    async with OpenAIDouble(auto_reply=reply) as llm:
        env = {
            **llm.env(),
            "LLM_CONTEXT_WINDOWS": "main=4096",
            "OPENAI_COMPATIBLE_ROLE_MODELS": "utility=summary-model",
        }
        await converse(serve, env, user, streamed)
        requests = list(llm.requests)
    summaries = [r for r in requests if r.model == "summary-model"]
    assert summaries, "the session never outgrew the window"
    # The summary is never streamed to the client: every turn shows its reply only.
    assert streamed == ["Noted."] * TURNS
    # Main requests after the first summary start from it, right after the system prompt.
    later = [r for r in requests[requests.index(summaries[0]) :] if r.model != "summary-model"]
    assert later
    for request in later:
        first = request.messages[1]
        assert first["role"] == "user"
        assert str(first["content"]).startswith(SUMMARY_HEADING)
        assert SUMMARY in str(first["content"])


async def converse(
    serve: ServeFactory, env: dict[str, str], user: Ed25519Signer, streamed: list[str]
) -> None:
    """Run the session's turns, then check the stored history keeps every message."""
    async with (
        serve(**env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, timeout=60) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
        for turn in range(1, TURNS + 1):
            body: dict[str, Any] = {"message": f"Turn {turn}. {PADDING}", "stream": True}
            async with client.stream(
                "POST", f"/messages/{session}", headers=headers, json=body
            ) as response:
                assert response.status_code == 200
                parser = PersistentSseParser()
                events = [e async for c in response.aiter_text() for e in parser.feed(c)]
            events += parser.end()
            assert events[-1].event == "done"
            assert events[-1].data["status"] == "finished"
            streamed.append("".join(e.data["content"] for e in events if e.event == "message"))
        history = await client.get(
            f"/sessions/{session}/messages", headers=headers, params={"limit": 100}
        )

    assert history.status_code == 200
    assert len(history.json()["messages"]) == 2 * TURNS
