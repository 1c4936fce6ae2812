"""Paged history (``GET /sessions/{id}/messages``) and session titles, over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp, create_oracle_app
from oracle_server._http.routes.history import page
from oracle_server._turns.titles import fallback_title
from oracle_server.testing import ChatRequest, OpenAIDouble, auth_headers, serving
from oracle_ucan import Ed25519Signer


def answer(chat: ChatRequest) -> str:
    if chat.model == "title-model":
        return "Weather Talk"
    if chat.model == "broken-title-model":
        raise RuntimeError("the title model is down")
    return f"Echo: {chat.last_user_text}"


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble(auto_reply=answer, models=["title-model"]) as double:
        yield double


async def served(
    tmp_path: Path, llm: OpenAIDouble, **env: str
) -> tuple[OracleApp, httpx.AsyncClient, Any]:
    app = await create_oracle_app(
        {"name": "History Oracle"},
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
            "THROTTLE_LIMIT": "1000",
            **llm.env(),
            **env,
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    return app, httpx.AsyncClient(timeout=30), serving(app)


async def test_pages_walk_the_whole_thread_both_ways(tmp_path: Path, llm: OpenAIDouble) -> None:
    app, http, serve = await served(tmp_path, llm)
    user = Ed25519Signer.generate()
    async with serve as base_url, http:
        headers = auth_headers(user, app.state.oracle_did)
        base = f"{base_url}/sessions"
        session = (await http.post(base, headers=headers)).json()["sessionId"]
        for turn in range(4):
            await http.post(
                f"{base_url}/messages/{session}", headers=headers, json={"message": f"m{turn}"}
            )
        everything = (await http.get(f"{base_url}/messages/{session}", headers=headers)).json()
        url = f"{base}/{session}/messages"

        newest = (await http.get(url, headers=headers, params={"limit": 3})).json()
        assert [m["content"] for m in newest["messages"]] == ["Echo: m2", "m3", "Echo: m3"]
        assert newest["hasOlder"] is True
        assert newest["hasNewer"] is False

        older: list[dict[str, Any]] = []
        cursor = newest["prevCursor"]
        while True:
            got = (
                await http.get(url, headers=headers, params={"limit": 3, "before": cursor})
            ).json()
            older = got["messages"] + older
            cursor = got["prevCursor"]
            if not got["hasOlder"]:
                break
        assert older + newest["messages"] == everything["messages"]

        caught_up = (
            await http.get(url, headers=headers, params={"after": newest["nextCursor"]})
        ).json()
        assert caught_up["messages"] == []
        assert caught_up["hasNewer"] is False
        await http.post(f"{base_url}/messages/{session}", headers=headers, json={"message": "m4"})
        caught_up = (
            await http.get(url, headers=headers, params={"after": newest["nextCursor"]})
        ).json()
        assert [m["content"] for m in caught_up["messages"]] == ["m4", "Echo: m4"]

        for bad in (
            {"limit": 0},
            {"limit": 101},
            {"before": "x1"},
            {"before": "m1", "after": "m2"},
        ):
            refused = await http.get(url, headers=headers, params=bad)
            assert refused.status_code == 400, bad
        missing = await http.get(f"{base}/nope/messages", headers=headers)
        assert missing.status_code == 404
        stranger = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
        assert (await http.get(url, headers=stranger)).status_code == 404


def test_page_bounds() -> None:
    items: list[dict[str, object]] = [{"n": n} for n in range(5)]
    assert page(items, limit=2)["messages"] == [{"n": 3}, {"n": 4}]
    assert page(items, limit=2, before=1) == {
        "messages": [{"n": 0}],
        "prevCursor": "m0",
        "nextCursor": "m1",
        "hasOlder": False,
        "hasNewer": True,
    }
    assert page(items, limit=10, after=3)["messages"] == [{"n": 3}, {"n": 4}]
    assert page([], limit=20) == {
        "messages": [],
        "prevCursor": "m0",
        "nextCursor": "m0",
        "hasOlder": False,
        "hasNewer": False,
    }


def test_fallback_titles() -> None:
    assert fallback_title("  What is the   weather in Paris today, please?") == (
        "What is the weather in Paris"
    )
    assert fallback_title("Hi!") == "Hi"
    assert fallback_title("   ") == "Untitled"
    assert len(fallback_title("x" * 500)) == 80


async def _titles(http: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> list[str]:
    sessions = (await http.get(f"{base_url}/sessions", headers=headers)).json()["sessions"]
    return [s["title"] for s in sessions]


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ({}, "Will it rain in Lisbon tomorrow"),
        ({"OPENAI_COMPATIBLE_ROLE_MODELS": "session-title=title-model"}, "Weather Talk"),
        (
            {"OPENAI_COMPATIBLE_ROLE_MODELS": "session-title=broken-title-model"},
            "Will it rain in Lisbon tomorrow",
        ),
    ],
    ids=["first-words", "title-model", "title-model-fails"],
)
async def test_a_title_after_the_first_turn(
    tmp_path: Path, llm: OpenAIDouble, roles: dict[str, str], expected: str
) -> None:
    app, http, serve = await served(tmp_path, llm, **roles)
    user = Ed25519Signer.generate()
    async with serve as base_url, http:
        headers = auth_headers(user, app.state.oracle_did)
        session = (await http.post(f"{base_url}/sessions", headers=headers)).json()["sessionId"]
        assert await _titles(http, base_url, headers) == ["Untitled"]
        message = {"message": "Will it rain in Lisbon tomorrow afternoon?"}
        await http.post(f"{base_url}/messages/{session}", headers=headers, json=message)
        await app.state.bookkeeping.finish()
        assert await _titles(http, base_url, headers) == [expected]
        await http.post(f"{base_url}/messages/{session}", headers=headers, json={"message": "ok"})
        await asyncio.wait_for(app.state.bookkeeping.finish(), 10)
        assert await _titles(http, base_url, headers) == [expected]  # set once
    main_calls = [r for r in llm.requests if r.model == "double-model"]
    assert [r.last_user_text for r in main_calls] == [message["message"], "ok"]
