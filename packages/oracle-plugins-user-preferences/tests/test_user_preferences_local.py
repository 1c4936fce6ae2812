"""Without Matrix (``ORACLE_BACKEND=local``): the embedded SQLite store, end to end.

One runtime from ``create_runtime`` with a scripted model, and one served oracle from
``create_oracle_app`` over HTTP with the OpenAI-compatible model double.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_core import (
    MainAgentHooks,
    MatrixAccessor,
    OracleIdentity,
    OracleRuntime,
    RuntimeContext,
    ServiceUnavailableError,
    SessionInfo,
    TurnRequest,
    UnavailableMatrixService,
    UserInfo,
    create_runtime,
)
from oracle_core.testing import RecordingMatrixService, ScriptedChatModel, call_tool, reply
from oracle_plugins.user_preferences import (
    DATABASE_FILE,
    TOOL_NAME,
    MatrixRoomPreferences,
    RoomCache,
    SetUserPreferencesArgs,
    SqlitePreferences,
    UserPreferencesPlugin,
    decode_data,
    open_store,
)
from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, ToolCalls, auth_headers, serving
from oracle_ucan import Ed25519Signer

ALICE = UserInfo(did="did:key:z6MkAliceOfTheLocalPreferencesTests", timezone="UTC")
BOB = UserInfo(did="did:key:z6MkBobOfTheLocalPreferencesTests", timezone="UTC")
LOGGER = logging.getLogger("test.user_preferences")


def stored_rows(path: Path) -> dict[str, dict[str, Any]]:
    with closing(sqlite3.connect(path)) as connection:
        rows = connection.execute("SELECT key, data FROM user_preferences").fetchall()
    return {key: decode_data(data) for key, data in rows}


@pytest.fixture
async def local_runtime(tmp_path: Path) -> AsyncIterator[tuple[OracleRuntime, ScriptedChatModel]]:
    model = ScriptedChatModel(
        [
            call_tool(TOOL_NAME, {"agentName": "Nova", "language": "pt"}),
            reply("Combinado."),
            reply("Olá, aqui é a Nova."),
            reply("Hello Bob."),
        ]
    )
    runtime = await create_runtime(
        {"name": "Local Oracle", "org": "Example Org"},
        plugins=[UserPreferencesPlugin()],
        hooks=MainAgentHooks(resolve_model=lambda role, **_: model),
        env={
            "ORACLE_BACKEND": "local",
            "LLM_PROVIDER": "openai-compatible",
            "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
            "OPENAI_COMPATIBLE_MODEL": "scripted",
            "SQLITE_DATABASE_PATH": str(tmp_path / "sqlite"),
        },
        discover_entry_points=False,
    )
    try:
        yield runtime, model
    finally:
        await runtime.aclose()


async def turn(runtime: OracleRuntime, user: UserInfo, text: str) -> dict[str, Any]:
    session = SessionInfo(id=f"thread-{user.did[-6:]}")
    return await runtime.run_turn(TurnRequest(user=user, session=session, message=text))


async def test_a_local_turn_saves_to_sqlite_and_the_next_turn_applies_it(
    local_runtime: tuple[OracleRuntime, ScriptedChatModel], tmp_path: Path
) -> None:
    runtime, model = local_runtime
    database = tmp_path / "sqlite" / DATABASE_FILE
    await turn(runtime, ALICE, "Chama-te Nova e fala português")
    assert model.calls[0].system_prompt is not None
    assert model.calls[0].system_prompt.startswith("You are Local Oracle, an AI agent")
    assert TOOL_NAME in model.calls[0].tool_names

    rows = stored_rows(database)
    assert list(rows) == [ALICE.did]
    assert rows[ALICE.did] == {
        "agentName": "Nova",
        "language": "pt",
        "updatedAt": rows[ALICE.did]["updatedAt"],
    }

    state = await turn(runtime, ALICE, "Olá")
    assert state["user_preferences"]["agent_name"] == "Nova"
    prompt = model.calls[2].system_prompt
    assert prompt is not None
    assert prompt.startswith("You are Nova, an AI agent operated by Example Org.")
    assert "## User Preferences\n- Your name: Nova\n- Language: pt" in prompt

    # Preferences are per user.
    other = await turn(runtime, BOB, "Hi")
    assert other["user_preferences"] is None
    bob_prompt = model.calls[3].system_prompt
    assert bob_prompt is not None
    assert "## User Preferences" not in bob_prompt


async def test_reading_never_creates_the_database(tmp_path: Path) -> None:
    store = SqlitePreferences(tmp_path / "none" / DATABASE_FILE, ALICE.did, LOGGER)
    assert await store.read() is None
    assert not (tmp_path / "none").exists()
    await store.write({"tone": "calm", "updatedAt": "2025-01-01T00:00:00.000Z"})
    assert await store.read() == {"tone": "calm", "updatedAt": "2025-01-01T00:00:00.000Z"}
    await store.write({"tone": "warm", "updatedAt": "2025-01-02T00:00:00.000Z"})
    assert stored_rows(tmp_path / "none" / DATABASE_FILE) == {
        ALICE.did: {"tone": "warm", "updatedAt": "2025-01-02T00:00:00.000Z"}
    }


async def test_an_unreadable_row_reads_as_none(tmp_path: Path) -> None:
    store = SqlitePreferences(tmp_path / DATABASE_FILE, ALICE.did, LOGGER)
    await store.write({"tone": "calm"})
    with closing(sqlite3.connect(store.path)) as connection, connection:
        connection.execute("UPDATE user_preferences SET data = 'garbage'")
    assert await store.read() is None


class StartingMatrix:
    """A user's Matrix accessor while the server's Matrix layer is still starting: every
    operation raises ``ServiceUnavailableError``."""

    def __getattr__(self, name: str) -> Any:
        async def not_ready(*_args: Any, **_kwargs: Any) -> Any:
            raise ServiceUnavailableError("Matrix is not ready", hint="the layer is starting")

        return not_ready


IXO_CONFIG = {"ORACLE_BACKEND": "ixo", "MATRIX_BASE_URL": "http://127.0.0.1:9"}


def request_context(config: Mapping[str, Any], matrix: MatrixAccessor) -> RuntimeContext[Any]:
    return RuntimeContext(
        config=config,
        plugin_config=None,
        identity=OracleIdentity(name="Ixo Oracle"),
        available_plugins=frozenset({"user-preferences"}),
        logger=LOGGER,
        user=ALICE,
        matrix=matrix,
    )


async def test_the_store_follows_the_deployment(tmp_path: Path) -> None:
    cache = RoomCache()
    local = {"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path)}
    ixo = {"ORACLE_BACKEND": "ixo", "MATRIX_BASE_URL": "http://127.0.0.1:9"}
    unavailable = UnavailableMatrixService().for_user(ALICE)

    embedded = await open_store(
        config=local, matrix=unavailable, user_did=ALICE.did, cache=cache, logger=LOGGER
    )
    assert isinstance(embedded, SqlitePreferences)
    assert embedded.path == tmp_path / DATABASE_FILE

    recording = RecordingMatrixService(user_rooms={ALICE.did: "!room:x"})
    in_room = await open_store(
        config=local,
        matrix=recording.for_user(ALICE),
        user_did=ALICE.did,
        cache=cache,
        logger=LOGGER,
    )
    assert isinstance(in_room, MatrixRoomPreferences)
    assert in_room.room_id == "!room:x"
    no_room = await open_store(
        config=ixo, matrix=recording.for_user(BOB), user_did=BOB.did, cache=cache, logger=LOGGER
    )
    assert no_room is None

    # Matrix configured but not ready: an error, never a silent switch to SQLite, whatever
    # the configuration says (only NotConfiguredError means "no Matrix").
    for config in (ixo, local):
        with pytest.raises(ServiceUnavailableError):
            await open_store(
                config=config,
                matrix=StartingMatrix(),
                user_did=ALICE.did,
                cache=cache,
                logger=LOGGER,
            )
    # A context without a Matrix accessor has no Matrix either.
    without = await open_store(
        config=local, matrix=None, user_did=ALICE.did, cache=cache, logger=LOGGER
    )
    assert isinstance(without, SqlitePreferences)


async def test_a_starting_matrix_layer_degrades_without_breaking_the_turn() -> None:
    prefs = UserPreferencesPlugin()
    recording = RecordingMatrixService(user_rooms={ALICE.did: "!room:x"})
    (tool,) = await prefs.get_request_tools(request_context(IXO_CONFIG, recording.for_user(ALICE)))
    starting = request_context(IXO_CONFIG, StartingMatrix())
    # No state change (the checkpointed preferences stay), the tool is reported degraded,
    # and a call made anyway answers with the reason.
    assert await prefs.get_turn_state(starting) == {}
    with pytest.raises(ServiceUnavailableError):
        await prefs.get_request_tools(starting)
    answer = await tool.handler(SetUserPreferencesArgs(tone="calm"), starting)
    assert answer == (
        "[Error updating user preferences: Matrix is not ready; the layer is starting]"
    )


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


async def test_over_http_a_turn_saves_and_the_route_answers(
    tmp_path: Path, llm: OpenAIDouble
) -> None:
    llm.add_steps(
        ToolCalls([(TOOL_NAME, {"agentName": "Nova", "tone": "playful"})]),
        "Okay, I am Nova now.",
        "Hi, Nova here.",
    )
    app = await create_oracle_app(
        {"name": "Http Oracle"},
        plugins=[UserPreferencesPlugin()],
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
            "THROTTLE_LIMIT": "1000",
            **llm.env(),
        },
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    user, stranger = Ed25519Signer.generate(), Ed25519Signer.generate()
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        headers = auth_headers(user, app.state.oracle_did)
        assert (await http.get("/user-preferences")).status_code == 401
        empty = await http.get("/user-preferences", headers=headers)
        assert empty.status_code == 200
        assert empty.json() is None

        session = (await http.post("/sessions", headers=headers)).json()["sessionId"]
        answer = await http.post(
            f"/messages/{session}", headers=headers, json={"message": "Call yourself Nova"}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["message"]["content"] == "Okay, I am Nova now."
        assert TOOL_NAME in llm.requests[0].tool_names

        saved = (await http.get("/user-preferences", headers=headers)).json()
        assert saved == {"agentName": "Nova", "tone": "playful", "updatedAt": saved["updatedAt"]}
        assert stored_rows(tmp_path / "data" / DATABASE_FILE) == {user.did(): saved}

        await http.post(f"/messages/{session}", headers=headers, json={"message": "Hi"})
        prompt = llm.requests[-1].system_prompt
        assert prompt is not None
        assert prompt.startswith("You are Nova.")
        assert "- Your name: Nova\n- Tone: playful" in prompt

        theirs = await http.get(
            "/user-preferences", headers=auth_headers(stranger, app.state.oracle_did)
        )
        assert theirs.status_code == 200
        assert theirs.json() is None
