"""A message's ``model`` selects the main agent's model (SRV-22), over real HTTP.

The oracle runs on loopback against the OpenAI-compatible double, which records each
chat-completions request: the ``model`` in its body is what the runtime asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server.testing import OpenAIDouble, PersistentSseParser, SseEvent, auth_headers
from oracle_ucan import Ed25519Signer

ServeFactory = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]

ROLE_MODELS = {"OPENAI_COMPATIBLE_ROLE_MODELS": "subagent=small-model"}


async def send(
    client: httpx.AsyncClient, session_id: str, headers: dict[str, str], body: dict[str, Any]
) -> tuple[httpx.Response, list[SseEvent]]:
    """POST a message; the SSE events when the answer is a stream (read as the SDK does)."""
    async with client.stream(
        "POST", f"/messages/{session_id}", headers=headers, json=body
    ) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            await response.aread()
            return response, []
        parser = PersistentSseParser()
        events = [e async for chunk in response.aiter_text() for e in parser.feed(chunk)]
    return response, events + parser.end()


async def new_session(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.post("/sessions", headers=headers)
    assert response.status_code == 201
    session_id: str = response.json()["sessionId"]
    return session_id


async def test_a_listed_model_runs_the_main_agent_and_none_runs_the_default(
    serve: ServeFactory, llm: OpenAIDouble
) -> None:
    llm.add_steps("From small.", "From the default.", "Small streams.", "Default again.")
    user = Ed25519Signer.generate()
    async with (
        serve(**ROLE_MODELS) as (app, base_url),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        listed = (await client.get("/models")).json()
        assert [m["id"] for m in listed["models"]] == ["double-model", "small-model"]
        assert listed["default"] == "double-model"
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await new_session(client, headers)

        response, _ = await send(
            client, session_id, headers, {"message": "Hi", "model": "small-model"}
        )
        assert response.status_code == 200
        assert response.json()["message"]["content"] == "From small."
        assert [r.model for r in llm.requests] == ["small-model"]

        response, _ = await send(client, session_id, headers, {"message": "Hi again"})
        assert response.json()["message"]["content"] == "From the default."
        assert llm.requests[-1].model == "double-model"

        response, events = await send(
            client,
            session_id,
            headers,
            {"message": "Stream it", "stream": True, "model": "small-model"},
        )
        assert response.status_code == 200
        assert events[-1].event == "done"
        assert events[-1].data["status"] == "finished"
        text = "".join(e.data["content"] for e in events if e.event == "message")
        assert text == "Small streams."
        assert llm.requests[-1].model == "small-model"
        assert llm.requests[-1].stream is True

        # Naming the default is the same as naming none; null too.
        response, _ = await send(
            client, session_id, headers, {"message": "Default?", "model": None}
        )
        assert response.json()["message"]["content"] == "Default again."
        assert [r.model for r in llm.requests] == [
            "small-model",
            "double-model",
            "small-model",
            "double-model",
        ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_unknown_model_is_refused_before_anything_is_queued(
    serve: ServeFactory, llm: OpenAIDouble, stream: bool
) -> None:
    llm.add_steps("First reply.")
    user = Ed25519Signer.generate()
    async with (
        serve(**ROLE_MODELS) as (app, base_url),
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        headers = auth_headers(user, app.state.oracle_did)
        session_id = await new_session(client, headers)
        response, _ = await send(client, session_id, headers, {"message": "Hi"})
        assert response.status_code == 200
        before = (await client.get(f"/messages/{session_id}", headers=headers)).json()
        assert len(before["messages"]) == 2

        response, events = await send(
            client,
            session_id,
            headers,
            {"message": "Use another model", "stream": stream, "model": "gpt-nope"},
        )

        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/json")
        assert events == []
        body = response.json()
        assert body["statusCode"] == 400
        assert body["error"] == "Bad Request"
        assert body["code"] == "message.model_unknown"
        assert "'gpt-nope'" in body["message"]
        assert "double-model, small-model" in body["message"]
        # Nothing reached the model, nothing was queued, run or stored.
        assert len(llm.requests) == 1
        assert app.state.runner.active == {}
        run = (await client.get(f"/sessions/{session_id}/run", headers=headers)).json()
        assert run == {"run": None}
        after = (await client.get(f"/messages/{session_id}", headers=headers)).json()
        assert after == before
