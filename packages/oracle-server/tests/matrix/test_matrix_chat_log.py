"""The Matrix layer against a real Synapse: login, readiness, user rooms, the chat log.

The oracle logs in with its access token, reads its signing mnemonic from the account
room, and becomes ready; a ``did:ixo`` user talks to it over HTTP; the oracle creates the
user's encrypted room, invites their Matrix account and logs the conversation there. The
user's own matrix-nio client reads it, and the homeserver's storage never holds it in
plain text.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import nio
import pytest

from oracle_server.matrix.rooms import user_room_alias
from oracle_server.testing import BlocksyncDouble, ChatRequest, OpenAIDouble
from oracle_server.testing.matrix import (
    ENTITY_DID,
    OracleAccount,
    eventually,
    matrix_user,
    node_env,
    oracle_node,
    provision_oracle,
    user_headers,
)
from oracle_server.testing.synapse import RegisteredUser, Synapse
from oracle_ucan import Ed25519Signer


def echo(chat: ChatRequest) -> str:
    """The model's answer: the user's last message, echoed."""
    return f"Echo: {chat.last_user_text}"


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble(auto_reply=echo) as double:
        yield double


@pytest.fixture
async def blocksync() -> AsyncIterator[BlocksyncDouble]:
    async with BlocksyncDouble() as double:
        yield double
    assert double.violations == []


@pytest.fixture
async def account(synapse: Synapse, new_user: Callable[[str], RegisteredUser]) -> OracleAccount:
    return await provision_oracle(synapse, new_user("oracle"))


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
    account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    secret = f"secret-{uuid.uuid4().hex}"
    env = node_env(synapse, account, tmp_path / "node", llm=llm, blocksync=blocksync)
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
        joined = await reader.join(room_id)
        assert isinstance(joined, nio.JoinResponse), joined

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
