"""A backup that cannot be read is never thrown away, against a real Synapse (SRV-63).

A node restores a user's database before their first request. When the backup is there
but cannot be read (blobs sealed under another signing key, a homeserver that cannot be
reached), that user's requests answer 503 ``storage.restore_failed``, no local file is
written, the pointer in the room and the chain behind it stay as they were, and a later
request tries again. Only a backup that is positively absent lets a user start empty.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server._matrix.backup import STATE_TYPE, CheckpointBackup
from oracle_server.testing import (
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    TcpProxy,
    eventually,
    fresh_localpart,
    node_env,
    oracle_node,
    random_mnemonic,
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


async def pointer(synapse: Synapse, account: OracleAccount, room_id: str, key: str) -> Any:
    """The backup pointer as the homeserver holds it (read with the oracle's token)."""
    headers = {"Authorization": f"Bearer {account.bot.access_token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        answer = await http.get(f"/_matrix/client/v3/rooms/{room_id}/state/{STATE_TYPE}/{key}")
        assert answer.status_code == 200, answer.text
        return answer.json()


async def backed_up_conversation(
    env: dict[str, str], user: Ed25519Signer
) -> tuple[str, list[tuple[str, str]], str, str]:
    """Serve a node, hold a conversation, stop (uploading the file); what the room holds:
    the session, its history, the user's storage key and room id."""
    async with (
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        session = (await http.post("/sessions")).json()["sessionId"]
        answer = await http.post(f"/messages/{session}", json={"message": "remember this"})
        assert answer.status_code == 200, answer.text
        expected = await history(http, session)
        storage_key = app.state.checkpointers.storage_key(user.did())
        await backup_of(app).flush()
        assert backup_of(app).figures.uploads >= 1
        room_id = await backup_of(app).rooms.find(user.did())
        assert room_id is not None
    return session, expected, storage_key, room_id


def assert_restore_failed(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["code"] == "storage.restore_failed"
    assert body["message"] == "Conversation storage temporarily unavailable"
    assert body["statusCode"] == 503
    assert int(answer.headers["retry-after"]) >= 1


async def test_a_backup_under_another_key_is_kept_and_restores_with_the_right_one(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    newcomer = blocksync.add_user(Ed25519Signer.generate())
    first = node_env(synapse, oracle_account, tmp_path / "node-1", llm=llm, blocksync=blocksync)
    session, expected, storage_key, room_id = await backed_up_conversation(first, user)
    stored = await pointer(synapse, oracle_account, room_id, storage_key)
    assert stored["chain"]

    # A node whose signing key is not the one the blobs were sealed under.
    wrong_key = node_env(
        synapse, oracle_account, tmp_path / "node-2", llm=llm, blocksync=blocksync,
        ORACLE_SIGNING_MNEMONIC=random_mnemonic(),
    )  # fmt: skip
    async with (
        oracle_node(wrong_key) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        backup = backup_of(app)
        backup.restore_retry_delay = 600.0  # no retry within this block
        assert_restore_failed(await http.get("/sessions"))
        assert_restore_failed(await http.post(f"/messages/{session}", json={"message": "hi"}))
        assert backup.figures.restore_failures == 1  # the second request waited for the backoff
        assert not app.state.checkpointers.path_for(user.did()).exists()
        # Only that user is refused: one without a backup starts empty.
        fresh = await http.get("/sessions", headers=user_headers(newcomer))
        assert fresh.status_code == 200, fresh.text
        assert fresh.json()["sessions"] == []
    assert await pointer(synapse, oracle_account, room_id, storage_key) == stored

    # The chain is still there: the right key restores the conversation.
    right_key = node_env(synapse, oracle_account, tmp_path / "node-3", llm=llm, blocksync=blocksync)
    async with (
        oracle_node(right_key) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        listed = (await http.get("/sessions")).json()["sessions"]
        assert [s["sessionId"] for s in listed] == [session]
        assert await history(http, session) == expected
        assert backup_of(app).figures.restores == 1


async def test_a_restore_cut_off_from_the_homeserver_answers_503_then_recovers(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    first = node_env(synapse, oracle_account, tmp_path / "node-1", llm=llm, blocksync=blocksync)
    session, expected, storage_key, room_id = await backed_up_conversation(first, user)
    stored = await pointer(synapse, oracle_account, room_id, storage_key)
    shutil.rmtree(tmp_path / "node-1")

    async with TcpProxy("127.0.0.1", synapse.port) as proxy:
        env = node_env(
            synapse, oracle_account, tmp_path / "node-2", llm=llm, blocksync=blocksync,
            MATRIX_BASE_URL=proxy.url(synapse.base_url),
        )  # fmt: skip
        async with (
            oracle_node(env) as (app, base_url),
            httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=60) as http,
        ):
            backup = backup_of(app)
            backup.restore_retry_delay = 0.2
            async with proxy.down():
                assert_restore_failed(await http.get("/sessions"))
                assert not app.state.checkpointers.path_for(user.did()).exists()
            assert backup.figures.restore_failures >= 1

            async def restored() -> list[Any] | None:
                answer = await http.get("/sessions")
                if answer.status_code == 503:
                    assert answer.json()["code"] == "storage.restore_failed"
                    return None
                assert answer.status_code == 200, answer.text
                sessions: list[Any] = answer.json()["sessions"]
                return sessions

            listed = await eventually(restored, timeout=60)
            assert [s["sessionId"] for s in listed] == [session]
            assert await history(http, session) == expected
            assert backup.figures.restores == 1
    assert await pointer(synapse, oracle_account, room_id, storage_key) == stored


async def test_a_backup_whose_media_the_homeserver_no_longer_has_starts_empty(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    first = node_env(synapse, oracle_account, tmp_path / "node-1", llm=llm, blocksync=blocksync)
    _session, _expected, storage_key, room_id = await backed_up_conversation(first, user)
    stored = await pointer(synapse, oracle_account, room_id, storage_key)
    admin = synapse.register(fresh_localpart("admin"), "admin-password", admin=True)
    headers = {"Authorization": f"Bearer {admin.access_token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        for link in stored["chain"]:
            server, _, media_id = str(link["url"]).removeprefix("mxc://").partition("/")
            deleted = await http.delete(f"/_synapse/admin/v1/media/{server}/{media_id}")
            assert deleted.status_code == 200, deleted.text

    # The homeserver answers 404 for the media: positively gone, so the user starts empty.
    fresh = node_env(synapse, oracle_account, tmp_path / "node-2", llm=llm, blocksync=blocksync)
    async with (
        oracle_node(fresh) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        with caplog.at_level(logging.WARNING, logger="oracle.server.matrix.backup"):
            listed = await http.get("/sessions")
        assert listed.status_code == 200, listed.text
        assert listed.json()["sessions"] == []
        assert "matrix.restore_absent" in caplog.text
        assert backup_of(app).figures.restores == 0
        assert backup_of(app).figures.restore_failures == 0
