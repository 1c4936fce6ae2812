"""The Matrix layer against a real Synapse: login, readiness, user rooms, the chat log.

The oracle logs in with its access token, reads its signing mnemonic from the oracle_account
room, and becomes ready; a ``did:ixo`` user talks to it over HTTP; the oracle creates the
user's encrypted room, invites their Matrix oracle_account and logs the conversation there. The
user's own matrix-nio client reads it, and the homeserver's storage never holds it in
plain text.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import nio
import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_server._matrix.rooms import user_room_alias
from oracle_server.testing import (
    ENTITY_DID,
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    SessionListener,
    Synapse,
    ToolCalls,
    eventually,
    matrix_user,
    node_env,
    open_user_room,
    oracle_node,
    user_headers,
)
from oracle_ucan import Ed25519Signer


async def decrypted_texts(client: nio.AsyncClient, room_id: str) -> list[dict[str, Any]]:
    """The room's ``m.text`` messages the client can decrypt, oldest first."""
    await client.sync(timeout=0)
    history = await client.room_messages(room_id, limit=100)
    assert isinstance(history, nio.RoomMessagesResponse), history
    texts = []
    for event in reversed(history.chunk):
        if isinstance(event, nio.MegolmEvent):
            try:
                event = client.decrypt_event(event)  # noqa: PLW2901 - the decrypted form
            except nio.EncryptionError:
                continue  # the room key has not arrived (yet)
        if isinstance(event, nio.RoomMessageText):
            texts.append(event.source["content"])
    return texts


async def test_conversation_is_logged_to_the_users_encrypted_room(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    secret = f"secret-{uuid.uuid4().hex}"
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as reader,
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        ready = (await http.get("/ready")).json()
        assert ready["matrix"] == "loaded"
        assert ready["signingKey"] is True
        session = (await http.post("/sessions")).json()["sessionId"]
        answer = await http.post(f"/messages/{session}", json={"message": f"hello {secret}"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["message"]["content"] == f"Echo: hello {secret}"

        # The chat log runs after the reply: the oracle creates the room under the user's
        # alias, invites the user, then posts.
        alias = user_room_alias(user.did(), ENTITY_DID, synapse.server_name)

        async def resolved() -> str | None:
            answer = await reader.room_resolve_alias(alias)
            return answer.room_id if isinstance(answer, nio.RoomResolveAliasResponse) else None

        room_id = await eventually(resolved)

        async def joined() -> bool:  # once the invite, sent after the room exists, is there
            return isinstance(await reader.join(room_id), nio.JoinResponse)

        await eventually(joined)

        async def logged() -> list[dict[str, Any]] | None:
            texts = await decrypted_texts(reader, room_id)
            return texts if len(texts) >= 3 else None

        root, said, replied = await eventually(logged)
        assert root["ixo.session_id"] == session
        assert said["body"] == f"hello {secret}"
        assert said["ixo.role"] == "user"
        assert replied["body"] == f"Echo: hello {secret}"
        assert replied["ixo.role"] == "assistant"
        for message in (said, replied):
            relation = message["m.relates_to"]
            assert relation["rel_type"] == "m.thread"
            assert relation["event_id"] == relation["m.in_reply_to"]["event_id"]
            assert message["format"] == "org.matrix.custom.html"
        stored = await app.state.sessions.get(user.did(), session)
        assert stored is not None
        assert stored.room_id == room_id

    # Encrypted on the homeserver: the secret is nowhere in its database or media.
    assert secret.encode() not in synapse.stored_bytes()


async def assistant_texts(client: nio.AsyncClient, room_id: str) -> list[dict[str, Any]]:
    """The oracle's answers in the room, oldest first."""
    return [m for m in await decrypted_texts(client, room_id) if m.get("ixo.role") == "assistant"]


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: str


class FilesPlugin(OraclePlugin):
    """Deleting a file is destructive: it waits for the user's approval."""

    name = "files"
    version = "1"
    manifest = PluginManifest(
        title="Files", summary="Keeps files.", when_to_use=["files"], visibility="always"
    )

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(
            name="files_delete",
            description="Delete a file.",
            args_schema=Target,
            effect="destructive",
        )
        def files_delete(args: Target, rt_ctx: RuntimeContext[Any]) -> str:
            self.deleted.append(args.target)
            return f"deleted {args.target}"

        return [files_delete]


async def test_a_message_in_the_users_room_runs_a_turn_answered_in_its_thread(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    listener = SessionListener()
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env, [listener]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        room_id = await open_user_room(client, synapse, oracle_account, app, user.did())
        matrix = app.state.matrix
        assert matrix is not None
        sent = await client.room_send(
            room_id,
            "m.room.message",
            {"msgtype": "m.text", "body": "ping over matrix"},
            ignore_unverified_devices=True,
        )
        assert isinstance(sent, nio.RoomSendResponse), sent

        async def answered() -> dict[str, Any] | None:
            for message in await decrypted_texts(client, room_id):
                if message.get("ixo.role") == "assistant":
                    return message
            return None

        reply = await eventually(answered)
        assert reply["body"] == "Echo: ping over matrix"
        assert reply["m.relates_to"]["event_id"] == sent.event_id
        # The thread is the session, and the user sees it over HTTP too.
        listed = (await http.get("/sessions")).json()["sessions"]
        assert [s["sessionId"] for s in listed] == [sent.event_id]
        # The session Matrix made was announced, as one made over HTTP is.
        assert ("session.created", sent.event_id, user.did(), "Untitled", []) in listener.heard
        # The user's own message was not posted again by the chat log.
        await matrix.flush()
        bodies = [m["body"] for m in await decrypted_texts(client, room_id)]
        assert bodies.count("ping over matrix") == 1


async def test_shared_mode_keeps_matrix_for_the_chat_log_only(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    url = os.environ.get("ORACLE_TEST_DATABASE_URL")
    if not url:
        pytest.skip("set ORACLE_TEST_DATABASE_URL to run the PostgreSQL tests")
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(
        synapse,
        oracle_account,
        tmp_path / "node",
        llm=llm,
        blocksync=blocksync,
        DATABASE_URL=url,
        ALLOW_SINGLE_REPLICA_POSTGRES="true",  # one node: no message queue needed (SRV-54)
    )
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as reader,
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        assert app.state.storage.kind == "postgresql"
        matrix = app.state.matrix
        assert matrix is not None
        assert matrix.backup is None  # checkpoints live in PostgreSQL
        session = (await http.post("/sessions")).json()["sessionId"]
        assert (await http.post(f"/messages/{session}", json={"message": "shared"})).is_success
        await matrix.flush()
        alias = user_room_alias(user.did(), ENTITY_DID, synapse.server_name)
        resolved = await reader.room_resolve_alias(alias)
        assert isinstance(resolved, nio.RoomResolveAliasResponse), resolved
        stored = await app.state.sessions.get(user.did(), session)
        assert stored is not None
        assert stored.room_id == resolved.room_id
        assert stored.matrix_thread_id is not None


async def test_an_approval_is_asked_and_answered_in_the_matrix_thread(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    plugin = FilesPlugin()
    llm.add_steps(ToolCalls([("files_delete", {"target": "report.txt"})]), "Deleted report.txt.")
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env, plugins=[plugin]) as (app, _base_url),
    ):
        room_id = await open_user_room(client, synapse, oracle_account, app, user.did())
        sent = await client.room_send(
            room_id,
            "m.room.message",
            {"msgtype": "m.text", "body": "delete report.txt"},
            ignore_unverified_devices=True,
        )
        assert isinstance(sent, nio.RoomSendResponse), sent

        async def asked() -> list[dict[str, Any]]:
            return await assistant_texts(client, room_id)

        [question] = await eventually(asked)
        assert "Approval needed" in question["body"]
        assert "files_delete" in question["body"]
        assert question["m.relates_to"]["event_id"] == sent.event_id
        assert plugin.deleted == []

        # A plain yes in the thread approves the call; it runs once.
        await client.room_send(
            room_id,
            "m.room.message",
            {
                "msgtype": "m.text",
                "body": "yes",
                "m.relates_to": {"rel_type": "m.thread", "event_id": sent.event_id},
            },
            ignore_unverified_devices=True,
        )

        async def answered() -> list[dict[str, Any]]:
            texts = await assistant_texts(client, room_id)
            return texts if len(texts) > 1 else []

        [_, answer] = await eventually(answered)
        assert answer["body"] == "Deleted report.txt."
        assert plugin.deleted == ["report.txt"]
        [approval] = await app.state.storage.approvals.find(user.did())
        assert (approval.status, approval.decided_via) == ("approved", "message")
