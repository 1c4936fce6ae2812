"""Per-user checkpoint backup to Matrix, against a real Synapse (SRV-60 … 63).

A node backs each user's SQLite file up to their room; a fresh node (nothing local:
no SQLite data, no Matrix store) restores it before the user's first request and the
thread goes on with the same checkpoints and ``loaded_plugins``. A homeserver killed in
the middle of an upload costs nothing: the server keeps serving, the upload is retried,
and the backup stays consistent. A restore that cannot reach the homeserver answers 503
and writes no file (more in ``test_matrix_restore.py``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import httpx

from oracle_server import OracleApp
from oracle_server._matrix.backup import STATE_TYPE, CheckpointBackup
from oracle_server.testing import (
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    ToolCalls,
    WeatherPlugin,
    eventually,
    node_env,
    oracle_node,
    provision_oracle,
    user_headers,
)
from oracle_ucan import Ed25519Signer


def backup_of(app: OracleApp) -> CheckpointBackup:
    assert app.state.matrix is not None
    backup = app.state.matrix.backup
    assert isinstance(backup, CheckpointBackup)
    return backup


async def history(http: httpx.AsyncClient, session: str) -> list[tuple[str, str]]:
    answer = await http.get(f"/messages/{session}")
    assert answer.status_code == 200, answer.text
    return [(m["type"], m["content"]) for m in answer.json()["messages"] if m["content"]]


async def say(http: httpx.AsyncClient, session: str, text: str) -> str:
    answer = await http.post(f"/messages/{session}", json={"message": text})
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["message"]["content"]
    return content


async def loaded_plugins(app: OracleApp, user_did: str, session: str) -> list[str]:
    saver = await app.state.checkpointers(user_did)
    stored = await saver.aget_tuple({"configurable": {"thread_id": session}})
    assert stored is not None
    return list(stored.checkpoint["channel_values"].get("loaded_plugins", []))


async def test_a_fresh_node_restores_the_thread_and_its_loaded_plugins(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    first_node = tmp_path / "node-1"
    llm.add_steps(
        ToolCalls([("load_capability", {"names": ["weather"]})]),
        ToolCalls([("get_weather", {"city": "Paris"})]),
        "21 degrees in Paris.",
    )
    # A long debounce: this node uploads once, at shutdown (SRV-12 step 3).
    env = node_env(
        synapse, oracle_account, first_node, llm=llm, blocksync=blocksync,
        MATRIX_BACKUP_DEBOUNCE_SECONDS="3600",
    )  # fmt: skip
    async with (
        oracle_node(env, [WeatherPlugin()]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        session = (await http.post("/sessions")).json()["sessionId"]
        assert await say(http, session, "Weather in Paris?") == "21 degrees in Paris."
        assert await say(http, session, "thanks") == "Echo: thanks"
        before = await history(http, session)
        assert await loaded_plugins(app, user.did(), session) == ["weather"]
        assert backup_of(app).figures.uploads == 0
    # The node is gone with everything it had locally.
    shutil.rmtree(first_node)

    second_env = node_env(
        synapse, oracle_account, tmp_path / "node-2", llm=llm, blocksync=blocksync
    )
    async with (
        oracle_node(second_env, [WeatherPlugin()]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        listed = (await http.get("/sessions")).json()["sessions"]
        assert [s["sessionId"] for s in listed] == [session]
        assert await history(http, session) == before
        assert await loaded_plugins(app, user.did(), session) == ["weather"]
        assert backup_of(app).figures.restores == 1

        # The thread continues: the model sees the old turns and the loaded tool.
        assert await say(http, session, "and now?") == "Echo: and now?"
        request = llm.requests[-1]
        assert "get_weather" in request.tool_names
        said = [m["content"] for m in request.messages if m["role"] == "user"]
        assert said == ["Weather in Paris?", "thanks", "and now?"]


async def pointer(synapse: Synapse, account: OracleAccount, room_id: str, key: str) -> Any:
    headers = {"Authorization": f"Bearer {account.bot.access_token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        answer = await http.get(f"/_matrix/client/v3/rooms/{room_id}/state/{STATE_TYPE}/{key}")
        return answer.json()


async def test_homeserver_killed_mid_upload_loses_nothing(
    own_synapse: Synapse,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    synapse = own_synapse
    account = await provision_oracle(synapse)
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, account, tmp_path / "node-1", llm=llm, blocksync=blocksync)
    async with (
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        backup = backup_of(app)
        session = (await http.post("/sessions")).json()["sessionId"]
        await say(http, session, "one")
        await eventually(lambda: _at_least(backup.figures.uploads, 1))
        storage_key = app.state.checkpointers.storage_key(user.did())
        room_id = await backup.rooms.find(user.did())
        assert room_id is not None
        first = await pointer(synapse, account, room_id, storage_key)

        # Freeze the homeserver so the next upload hangs in flight, then kill it.
        assert synapse.pid is not None
        os.kill(synapse.pid, signal.SIGSTOP)
        await say(http, session, "two")
        await eventually(lambda: _is_true(user.did() in backup.pending_users()))
        await asyncio.sleep(1.0)  # past the debounce: the upload is waiting on the frozen server
        synapse.kill()
        await eventually(lambda: _at_least(backup.figures.failures, 1))

        # The server keeps serving without its homeserver.
        assert await say(http, session, "three") == "Echo: three"
        assert (await http.get("/ready")).status_code == 200

        synapse.restart()
        await eventually(lambda: _is_true(not backup.pending_users()), timeout=60)
        second = await pointer(synapse, account, room_id, storage_key)
        assert second["sha256"] != first["sha256"]
        assert second["eventId"] != first["eventId"]
        expected = await history(http, session)

    shutil.rmtree(tmp_path / "node-1")
    fresh = node_env(synapse, account, tmp_path / "node-2", llm=llm, blocksync=blocksync)
    async with (
        oracle_node(fresh) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        assert await history(http, session) == expected
        assert [text for kind, text in expected if kind == "human"] == ["one", "two", "three"]

        # An idle user is uploaded and leaves the disk; with the homeserver down their
        # next request cannot restore: 503, and no empty file takes the backup's place.
        backup = backup_of(app)
        backup.idle_seconds = 0
        backup.restore_retry_delay = 0.1  # shorter than the homeserver's restart
        assert await backup.retire_idle() == [user.did()]
        path = app.state.checkpointers.path_for(user.did())
        assert not path.exists()
        synapse.kill()
        refused = await http.get("/sessions")
        assert refused.status_code == 503
        assert refused.json()["message"] == "Conversation storage temporarily unavailable"
        assert refused.json()["code"] == "storage.restore_failed"
        assert refused.headers["retry-after"] == "1"
        assert not path.exists()
        synapse.restart()
        assert await history(http, session) == expected


async def _at_least(value: int, minimum: int) -> bool:
    return value >= minimum


async def _is_true(value: bool) -> bool:
    return value
