"""Attachments on a real Synapse: a file the user's client sent into their encrypted room
(an ``m.file`` event whose media is encrypted) and media on the homeserver named by its
``mxc://`` URI both reach the model as text."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import nio

from oracle_core.testing import tiny_pdf
from oracle_server.testing import (
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    matrix_user,
    node_env,
    open_user_room,
    oracle_node,
    user_headers,
)
from oracle_ucan import Ed25519Signer


def texts_of(request: Any) -> list[str]:
    content = request.messages[-1]["content"]
    return [part["text"] for part in content if part["type"] == "text"]


async def test_files_of_the_users_room_and_homeserver_reach_the_model(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    pdf = tiny_pdf(["The launch is on the ninth"])
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        room_id = await open_user_room(client, synapse, oracle_account, app, user.did())
        # The client's way in an encrypted room: encrypted media, keys in the event.
        uploaded, keys = await client.upload(
            io.BytesIO(pdf),
            content_type="application/octet-stream",
            filename="plan.pdf",
            encrypt=True,
            filesize=len(pdf),
        )
        assert isinstance(uploaded, nio.UploadResponse), uploaded
        assert keys is not None
        file = {**keys, "url": uploaded.content_uri, "mimetype": "application/pdf"}
        await client.sync(timeout=0)
        sent = await client.room_send(
            room_id,
            "m.room.message",
            {"msgtype": "m.file", "body": "plan.pdf", "file": file},
            ignore_unverified_devices=True,
        )
        assert isinstance(sent, nio.RoomSendResponse), sent
        plain, _ = await client.upload(
            io.BytesIO(b"Budget: 40k"),
            content_type="text/plain",
            filename="budget.txt",
            filesize=len(b"Budget: 40k"),
        )
        assert isinstance(plain, nio.UploadResponse), plain

        session = (await http.post("/sessions")).json()["sessionId"]
        body = {
            "message": "When is the launch and what is the budget?",
            "attachments": [
                {"eventId": sent.event_id, "filename": "plan.pdf", "mimetype": "application/pdf"},
                {"mxcUri": plain.content_uri, "filename": "budget.txt", "mimetype": "text/plain"},
            ],
        }
        answer = await http.post(f"/messages/{session}", json=body)
        assert answer.status_code == 200, answer.text
        texts = texts_of(llm.requests[-1])
        assert "The launch is on the ninth" in texts[1]
        assert "Budget: 40k" in texts[2]

        # Media that does not match its event's hash is refused by name; nothing runs.
        before = len(llm.requests)
        bad = {**file, "hashes": {"sha256": file["hashes"]["sha256"][::-1]}}
        forged = await client.room_send(
            room_id,
            "m.room.message",
            {"msgtype": "m.file", "body": "plan.pdf", "file": bad},
            ignore_unverified_devices=True,
        )
        assert isinstance(forged, nio.RoomSendResponse), forged
        attachment = {
            "eventId": forged.event_id,
            "filename": "x.pdf",
            "mimetype": "application/pdf",
        }
        refused = await http.post(
            f"/messages/{session}", json={"message": "read", "attachments": [attachment]}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "attachment.not_found"
        assert len(llm.requests) == before
