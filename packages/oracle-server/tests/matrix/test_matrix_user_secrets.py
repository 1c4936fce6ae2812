"""Users' secrets in their Matrix room, on a real Synapse, written as the IXO client
writes them and read by the oracle with its P-256 key.

The user's matrix-nio client plays the portal: it encrypts a value to the oracle's public
key (compact JWE, ECDH-ES+A256KW / A256GCM), sends it as an ``ixo.room.secret`` event in
their end-to-end encrypted room and points the ``ixo.room.secret.index`` state at it. A
plugin tool then gets the value; the system prompt names it and no request to the model
holds it. The
other way, a secret set over HTTP lands in the room in the client's format.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import nio
from joserfc import jwe
from joserfc.jwk import ECKey

from oracle_core import (
    UserInfo,
)
from oracle_server.testing import (
    BlocksyncDouble,
    OpenAIDouble,
    OracleAccount,
    SecretProbePlugin,
    Synapse,
    ToolCalls,
    eventually,
    matrix_user,
    node_env,
    open_user_room,
    oracle_node,
    provision_secrets_key,
    user_headers,
)
from oracle_ucan import Ed25519Signer

VALUE = "sk-portal-5f4e3d2c1b"


async def write_like_the_client(
    client: nio.AsyncClient, room_id: str, name: str, value: str, public: ECKey
) -> str:
    token = jwe.encrypt_compact({"alg": "ECDH-ES+A256KW", "enc": "A256GCM"}, value, public)
    await client.sync(timeout=0)
    if client.should_query_keys:
        await client.keys_query()
    sent = await client.room_send(
        room_id, "ixo.room.secret", {"value": token}, ignore_unverified_devices=True
    )
    assert isinstance(sent, nio.RoomSendResponse), sent
    indexed = await client.room_put_state(
        room_id, "ixo.room.secret.index", {"eventId": sent.event_id, "publicKeyId": "pk1"}, name
    )
    assert isinstance(indexed, nio.RoomPutStateResponse), indexed
    return str(sent.event_id)


async def let_the_oracle_manage(client: nio.AsyncClient, room_id: str, oracle: str) -> None:
    levels = await client.room_get_state_event(room_id, "m.room.power_levels")
    assert isinstance(levels, nio.RoomGetStateEventResponse), levels
    users = {**levels.content.get("users", {}), oracle: 50}
    raised = await client.room_put_state(
        room_id, "m.room.power_levels", {**levels.content, "users": users}
    )
    assert isinstance(raised, nio.RoomPutStateResponse), raised


async def secrets_set_over_http(
    http: httpx.AsyncClient,
    client: nio.AsyncClient,
    synapse: Synapse,
    oracle_account: OracleAccount,
    room_id: str,
    private: ECKey,
) -> None:
    # Set over HTTP: refused cleanly while the room does not let the oracle set state;
    # once the user lets it, the room gets the client's format.
    refused = await http.put("/secrets/GITHUB_TOKEN", json={"value": "ghp-from-http"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "secrets.forbidden"
    await let_the_oracle_manage(client, room_id, oracle_account.bot.user_id)
    saved = await http.put("/secrets/GITHUB_TOKEN", json={"value": "ghp-from-http"})
    assert saved.status_code == 200, saved.text
    await client.sync(timeout=0)
    index = await client.room_get_state_event(room_id, "ixo.room.secret.index", "GITHUB_TOKEN")
    assert isinstance(index, nio.RoomGetStateEventResponse), index
    assert index.content["publicKeyId"] == "p256_encryption"
    event = await client.room_get_event(room_id, index.content["eventId"])
    assert isinstance(event, nio.RoomGetEventResponse), event
    async with httpx.AsyncClient(base_url=synapse.base_url) as hs:
        raw = await hs.get(
            f"/_matrix/client/v3/rooms/{room_id}/event/{index.content['eventId']}",
            headers={"Authorization": f"Bearer {client.access_token}"},
        )
    assert raw.json()["type"] == "m.room.encrypted"  # sent in the room's encryption
    # nio hands the event back decrypted when it holds the room key.
    decrypted = event.event
    if isinstance(decrypted, nio.MegolmEvent):
        decrypted = client.decrypt_event(decrypted)
    assert decrypted.source["type"] == "ixo.room.secret"
    token = decrypted.source["content"]["value"]
    assert jwe.decrypt_compact(token, private).plaintext == b"ghp-from-http"
    names = {s["name"] for s in (await http.get("/secrets")).json()["secrets"]}
    assert names == {"OPENAI_KEY", "GITHUB_TOKEN"}

    deleted = await http.delete("/secrets/GITHUB_TOKEN")
    assert deleted.status_code == 200, deleted.text
    gone = await client.room_get_state_event(room_id, "ixo.room.secret.index", "GITHUB_TOKEN")
    assert isinstance(gone, nio.RoomGetStateEventResponse)
    assert gone.content == {}
    assert (await http.delete("/secrets/GITHUB_TOKEN")).status_code == 404


async def test_a_secret_written_by_the_client_reaches_a_tool_and_never_the_model(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    jwk = await provision_secrets_key(synapse, oracle_account)
    private = ECKey.import_key(jwk)
    public = ECKey.import_key(private.as_dict(private=False))
    user = blocksync.add_user(Ed25519Signer.generate())
    probe = SecretProbePlugin()
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env, [probe]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        room_id = await open_user_room(client, synapse, oracle_account, app, user.did())
        await write_like_the_client(client, room_id, "OPENAI_KEY", VALUE, public)
        listed = await http.get("/secrets")
        assert listed.json() == {"secrets": [{"name": "OPENAI_KEY"}]}

        session = (await http.post("/sessions")).json()["sessionId"]
        llm.add_steps(ToolCalls([("probe_secrets", {"names": ["OPENAI_KEY", "NOPE"]})]), "Ok.")

        async def read() -> dict[str, str] | None:
            answer = await http.post(f"/messages/{session}", json={"message": "use my key"})
            assert answer.status_code == 200, answer.text
            return probe.read[-1] or None  # the room key may not have reached the oracle yet

        assert await eventually(read) == {"OPENAI_KEY": VALUE}
        system = str(llm.requests[-1].messages[0]["content"])
        assert "## Available User Secrets" in system
        assert "- OPENAI_KEY" in system
        assert VALUE not in json.dumps([r.messages for r in llm.requests])

        await secrets_set_over_http(http, client, synapse, oracle_account, room_id, private)

    # The homeserver never held a value in the clear.
    assert VALUE.encode() not in synapse.stored_bytes()
    assert b"ghp-from-http" not in synapse.stored_bytes()


async def test_without_the_oracles_key_names_are_listed_and_values_absent(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    public = ECKey.import_key(ECKey.generate_key("P-256").as_dict(private=False))
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        room_id = await open_user_room(client, synapse, oracle_account, app, user.did())
        await write_like_the_client(client, room_id, "OPENAI_KEY", VALUE, public)
        accessor = app.state.runtime.ambient.secrets.for_user(UserInfo(did=user.did()))
        assert [e.name for e in await accessor.get_index()] == ["OPENAI_KEY"]
        assert await accessor.get_values(["OPENAI_KEY"]) == {}
        refused = await http.put("/secrets/OTHER", json={"value": "v"})
        assert refused.status_code == 409
        assert refused.json()["code"] == "secrets.unavailable"
