"""The Matrix layer's life against a real Synapse (SRV-6, 9, 10, 64 … 66, 68).

A node whose homeserver is down keeps serving public routes, reports ``matrix``
pending → failed, and becomes loaded and ready once the homeserver is back. An account
room without the mnemonic, or a wrong ``MATRIX_VALUE_PIN``, leaves the layer loaded but
the oracle not ready, and no secret reaches the logs. ``ORACLE_SIGNING_MNEMONIC`` wins
over the account room. ``SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX=true`` stops the chat log
but not backups. A plugin reaches its user's room through ``RuntimeContext.matrix`` and
no other. A lost crypto store makes the token's device unusable: the node logs in with
the password as a new device.
"""

from __future__ import annotations

import asyncio
import json
import logging
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
    PluginStatusChangeEvent,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_server import OracleApp, create_oracle_app
from oracle_server._matrix.backup import STATE_TYPE, UPLOAD_TYPE, CheckpointBackup
from oracle_server._matrix.client import MatrixError
from oracle_server._matrix.layer import SETUP_HINT, MatrixLayer
from oracle_server._matrix.values import (
    MNEMONIC_STATE_KEY,
    SECURE_STATE_TYPE,
    ValueDecryptionError,
    decrypt_value,
    encrypt_value,
)
from oracle_server.testing import (
    BlocksyncDouble,
    ChatRequest,
    NewUser,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    ToolCalls,
    eventually,
    node_env,
    oracle_node,
    provision_oracle,
    random_mnemonic,
    serving,
    user_headers,
    wait_ready,
)
from oracle_ucan import Ed25519Signer

NOT_READY = "Oracle not ready"


def layer_of(app: OracleApp) -> MatrixLayer:
    layer = app.state.matrix
    assert isinstance(layer, MatrixLayer)
    return layer


async def create_node(env: dict[str, str], plugins: list[OraclePlugin] | None = None) -> OracleApp:
    """A node, not served yet (``oracle_node`` would wait for readiness)."""
    return await create_oracle_app(
        {"name": "Matrix Test Oracle"},
        plugins=plugins or [],
        env=env,
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )


async def ready_body(base_url: str) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.get("/ready")
        return answer.status_code, answer.json()


async def refused_as_not_ready(base_url: str, user: Ed25519Signer) -> bool:
    """Whether a protected route answers 503 ``Oracle not ready…`` with ``Retry-After``
    (never 401, which would make the client renew its credentials)."""
    async with httpx.AsyncClient(base_url=base_url, headers=user_headers(user)) as http:
        answer = await http.get("/sessions")
    return (
        answer.status_code == 503
        and answer.json()["message"].startswith(NOT_READY)
        and "retry-after" in answer.headers
    )


async def until_loaded(base_url: str) -> dict[str, Any]:
    """The ``/ready`` body once the Matrix layer says ``loaded`` (ready or not)."""

    async def loaded() -> dict[str, Any] | None:
        _status, body = await ready_body(base_url)
        return body if body["matrix"] == "loaded" else None

    body: dict[str, Any] = await eventually(loaded, timeout=30)
    return body


async def create_room(synapse: Synapse, token: str, **body: Any) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        created = await http.post("/_matrix/client/v3/createRoom", json=body)
        created.raise_for_status()
        return str(created.json()["room_id"])


# --- status events: a homeserver down at boot ------------------------------------------


async def test_a_homeserver_down_at_boot_fails_then_loads_when_it_is_back(
    own_synapse: Synapse, llm: OpenAIDouble, blocksync: BlocksyncDouble, tmp_path: Path
) -> None:
    synapse = own_synapse
    account = await provision_oracle(synapse)
    user = blocksync.add_user(Ed25519Signer.generate())
    synapse.stop()

    events: list[PluginStatusChangeEvent] = []
    errors: list[tuple[BaseException, str]] = []
    app = await create_node(
        node_env(synapse, account, tmp_path / "node", llm=llm, blocksync=blocksync)
    )
    app.on_plugin_status_change(events.append)
    app.on_error(lambda exc, source: errors.append((exc, source)))
    assert layer_of(app).state == "pending"  # nothing tried before serving (SRV-6)

    async with serving(app) as base_url:
        async with httpx.AsyncClient(base_url=base_url) as http:
            assert (await http.get("/health")).status_code == 200

        async def failed() -> bool:
            return bool(events)

        await eventually(failed, timeout=30)
        assert [(e.plugin, e.from_, e.to) for e in events] == [("matrix", "pending", "failed")]
        assert events[0].reason is not None
        assert events[0].reason.startswith("MatrixError")
        assert len(errors) == 1
        error, source = errors[0]
        assert source == "matrix-init"
        assert isinstance(error, MatrixError)
        assert error.code == "network"
        assert error.transient

        status, body = await ready_body(base_url)
        assert (status, body["status"], body["matrix"]) == (503, "starting", "failed")
        assert body["signingKey"] is False
        assert await refused_as_not_ready(base_url, user)

        # The homeserver comes back; the next attempt (5 s after the first) succeeds.
        await asyncio.to_thread(synapse.start)
        body = await wait_ready(base_url, timeout=30)
        assert (body["matrix"], body["signingKey"]) == ("loaded", True)
        assert [(e.from_, e.to) for e in events] == [("pending", "failed"), ("failed", "loaded")]
        assert events[-1].reason is None
        assert all(source == "matrix-init" for _exc, source in errors)
        assert app.state.signer is not None
        assert app.state.signer.did() == Ed25519Signer.from_mnemonic(account.mnemonic).did()
        async with httpx.AsyncClient(base_url=base_url, headers=user_headers(user)) as http:
            assert (await http.get("/sessions")).status_code == 200


# --- the signing key ---------------------------------------------------------------------


async def test_an_account_room_without_the_mnemonic_keeps_the_oracle_not_ready(
    synapse: Synapse,
    new_user: NewUser,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bot = new_user("oracle")
    empty_room = await create_room(synapse, bot.access_token, preset="private_chat")
    account = OracleAccount(bot, empty_room, mnemonic="never provisioned")
    user = blocksync.add_user(Ed25519Signer.generate())
    caplog.set_level(logging.WARNING, logger="oracle.server.matrix")

    app = await create_node(
        node_env(synapse, account, tmp_path / "node", llm=llm, blocksync=blocksync)
    )
    async with serving(app) as base_url:
        body = await until_loaded(base_url)
        assert body["signingKey"] is False
        status, body = await ready_body(base_url)
        assert (status, body["status"]) == (503, "starting")
        assert app.state.signer is None
        assert not app.state.ready
        assert await refused_as_not_ready(base_url, user)
        # Shutdown flushes the layer: the periodic look for the mnemonic must not hold it.
        async with asyncio.timeout(5):
            await layer_of(app).flush()

    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "matrix.signing_key_missing" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert SETUP_HINT == "qiforge-cli setup-encryption-key"
    assert SETUP_HINT in warnings[0]


async def test_a_wrong_pin_keeps_the_oracle_not_ready_and_logs_no_secret(
    synapse: Synapse,
    new_user: NewUser,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    right_pin = f"right-{uuid.uuid4().hex[:12]}"
    wrong_pin = f"wrong-{uuid.uuid4().hex[:12]}"
    mnemonic = random_mnemonic()
    # A fixed IV makes the outcome certain: CBC without a MAC lets about 1 wrong key in
    # 256 pass the padding check, so check this one fails the way the node will see it.
    value = encrypt_value(mnemonic, right_pin, iv=bytes(range(16)))
    with pytest.raises(ValueDecryptionError):
        decrypt_value(value, wrong_pin)
    bot = new_user("oracle")
    room = await create_room(synapse, bot.access_token, preset="private_chat")
    headers = {"Authorization": f"Bearer {bot.access_token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        stored = await http.put(
            f"/_matrix/client/v3/rooms/{room}/state/{SECURE_STATE_TYPE}/{MNEMONIC_STATE_KEY}",
            json={"encrypted_mnemonic": value},
        )
        stored.raise_for_status()
    account = OracleAccount(bot, room, mnemonic)
    user = blocksync.add_user(Ed25519Signer.generate())
    caplog.set_level(logging.DEBUG)

    env = node_env(
        synapse, account, tmp_path / "node", llm=llm, blocksync=blocksync,
        MATRIX_VALUE_PIN=wrong_pin,
    )  # fmt: skip
    app = await create_node(env)
    async with serving(app) as base_url:
        body = await until_loaded(base_url)
        assert body["signingKey"] is False
        assert app.state.signer is None
        assert await refused_as_not_ready(base_url, user)

    unreadable = [r for r in caplog.records if "matrix.signing_key_unreadable" in r.getMessage()]
    assert len(unreadable) == 1
    assert unreadable[0].levelno == logging.ERROR
    logged = caplog.text + "".join(
        repr(record.args) + repr(record.__dict__.get("exc_info")) for record in caplog.records
    )
    for secret in (mnemonic, *mnemonic.split(), right_pin, wrong_pin):
        assert secret not in logged


async def test_oracle_signing_mnemonic_wins_over_the_account_room(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    env_mnemonic = f"env mnemonic {uuid.uuid4().hex}"
    expected = Ed25519Signer.from_mnemonic(env_mnemonic).did()
    from_room = Ed25519Signer.from_mnemonic(oracle_account.mnemonic).did()
    assert expected != from_room
    env = node_env(
        synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync,
        ORACLE_SIGNING_MNEMONIC=env_mnemonic,
    )  # fmt: skip
    async with oracle_node(env) as (app, base_url):
        _status, body = await ready_body(base_url)
        assert (body["matrix"], body["signingKey"]) == ("loaded", True)
        assert app.state.signer is not None
        assert app.state.signer.did() == expected
        layer = layer_of(app)
        assert layer.signer is not None
        assert layer.signer.did() == expected
        # Still the env key after the layer's own start has finished.
        await layer.flush()
        assert app.state.signer is not None
        assert app.state.signer.did() == expected


# --- chat log off, backups on -------------------------------------------------------------


async def oracle_timeline(app: OracleApp, room_id: str) -> list[dict[str, Any]]:
    """The room's events as the oracle's own client reads them (its messages decrypted)."""
    client = layer_of(app).client
    assert client is not None
    history = await client.nio.room_messages(room_id, limit=100)
    assert isinstance(history, nio.RoomMessagesResponse), history
    events = []
    for event in history.chunk:
        if isinstance(event, nio.MegolmEvent):
            decrypted = client.nio.decrypt_event(event)
            events.append({"type": decrypted.source["type"], **decrypted.source})
        else:
            events.append(event.source)
    return events


async def test_skipping_the_chat_log_still_backs_up(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(
        synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync,
        SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX="true",
    )  # fmt: skip
    async with (
        oracle_node(env) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        layer = layer_of(app)
        assert layer.settings.skip_logging_chat_history_to_matrix is True
        session = (await http.post("/sessions")).json()["sessionId"]
        answer = await http.post(f"/messages/{session}", json={"message": "not for the log"})
        assert answer.status_code == 200, answer.text
        await layer.flush()  # waits for chat-log tasks and uploads every pending backup

        backup = layer.backup
        assert isinstance(backup, CheckpointBackup)
        assert backup.figures.uploads >= 1
        record = await app.state.sessions.get(user.did(), session)
        assert record is not None
        assert record.matrix_thread_id is None  # no thread was started for the chat log
        room_id = await backup.rooms.find(user.did())
        assert room_id is not None  # the backup's room
        storage_key = app.state.checkpointers.storage_key(user.did())
        pointer = await backup.client.state_event(room_id, STATE_TYPE, storage_key)
        assert pointer is not None
        assert pointer["chain"]

        types = [event["type"] for event in await oracle_timeline(app, room_id)]
        assert UPLOAD_TYPE in types
        assert "m.room.message" not in types


# --- RuntimeContext.matrix -------------------------------------------------------------------


class RoomArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    room_id: str


class RoomProbePlugin(OraclePlugin):
    """Posts into a room through ``rt_ctx.matrix``, then reads the event and the state."""

    name = "room-probe"
    version = "1.0.0"
    manifest = {
        "title": "Room probe",
        "summary": "Posts a note into a Matrix room.",
        "when_to_use": ["The user asks to post a note"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="post_note", description="Post a note to a room.", args_schema=RoomArgs)
        async def post_note(args: RoomArgs, rt_ctx: RuntimeContext[Any]) -> str:
            assert rt_ctx.matrix is not None
            content = {"msgtype": "m.notice", "body": "note from a plugin"}
            event_id = await rt_ctx.matrix.post_to_room(args.room_id, content)
            event = await rt_ctx.matrix.get_event_by_id(args.room_id, event_id)
            state = await rt_ctx.matrix.get_room_state(args.room_id)
            return json.dumps(
                {
                    "event_id": event_id,
                    "event": event,
                    "state_types": sorted({e["type"] for e in state}),
                }
            )

        return [post_note]


def tool_results(chat: ChatRequest) -> list[str]:
    return [str(m["content"]) for m in chat.messages if m["role"] == "tool"]


async def test_a_plugin_reaches_its_users_room_and_no_other(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    other = blocksync.add_user(Ed25519Signer.generate())
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        oracle_node(env, [RoomProbePlugin()]) as (app, base_url),
        httpx.AsyncClient(base_url=base_url, headers=user_headers(user), timeout=30) as http,
    ):
        rooms = layer_of(app).rooms
        assert rooms is not None
        own_room = await rooms.ensure(user.did())
        other_room = await rooms.ensure(other.did())
        assert own_room != other_room
        session = (await http.post("/sessions")).json()["sessionId"]

        llm.add_steps(ToolCalls([("post_note", {"room_id": own_room})]), "Posted.")
        answer = await http.post(f"/messages/{session}", json={"message": "post a note"})
        assert answer.status_code == 200, answer.text
        [result] = tool_results(llm.requests[-1])
        posted = json.loads(result)
        # The oracle holds the room key of what it sent: the event comes back decrypted.
        assert posted["event"]["event_id"] == posted["event_id"]
        assert posted["event"]["type"] == "m.room.message"
        assert posted["event"]["content"]["body"] == "note from a plugin"
        assert posted["event"]["sender"] == oracle_account.bot.user_id
        assert {"m.room.create", "m.room.encryption", "m.room.member"} <= set(posted["state_types"])
        # The homeserver has the event in the user's room, sent by the oracle.
        headers = {"Authorization": f"Bearer {oracle_account.bot.access_token}"}
        async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as hs:
            stored = await hs.get(f"/_matrix/client/v3/rooms/{own_room}/event/{posted['event_id']}")
        assert stored.status_code == 200
        assert stored.json()["sender"] == oracle_account.bot.user_id
        assert stored.json()["type"] == "m.room.encrypted"  # the homeserver never saw the text

        before = await oracle_timeline(app, other_room)
        llm.add_steps(ToolCalls([("post_note", {"room_id": other_room})]), "Could not.")
        answer = await http.post(f"/messages/{session}", json={"message": "post elsewhere"})
        assert answer.status_code == 200, answer.text
        refused = tool_results(llm.requests[-1])[-1]
        assert "MatrixRequestError" in refused
        assert "matrix.room_forbidden" in refused
        assert len(await oracle_timeline(app, other_room)) == len(before)


# --- a lost crypto store ----------------------------------------------------------------------


async def test_a_lost_store_logs_in_with_the_password_as_a_new_device(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = node_env(synapse, oracle_account, tmp_path / "node-1", llm=llm, blocksync=blocksync)
    async with oracle_node(first) as (app, _base_url):
        client = layer_of(app).client
        assert client is not None
        assert client.nio.device_id == oracle_account.bot.device_id  # the token's own device
    assert not [r for r in caplog.records if "matrix.device_replaced" in r.getMessage()]

    # Same token, a new (empty) store: the device's keys on the homeserver are not ours.
    caplog.set_level(logging.WARNING, logger="oracle.server.matrix")
    second = node_env(
        synapse, oracle_account, tmp_path / "node-2", llm=llm, blocksync=blocksync,
        MATRIX_STORE_PATH=str(tmp_path / "lost-and-new-store"),
    )  # fmt: skip
    async with oracle_node(second) as (app, base_url):
        _status, body = await ready_body(base_url)
        assert (body["matrix"], body["signingKey"]) == ("loaded", True)
        client = layer_of(app).client
        assert client is not None
        assert client.nio.device_id != oracle_account.bot.device_id
        assert client.nio.olm is not None
        # The new device's keys are on the homeserver.
        headers = {"Authorization": f"Bearer {oracle_account.bot.access_token}"}
        async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as hs:
            query = await hs.post(
                "/_matrix/client/v3/keys/query",
                json={"device_keys": {oracle_account.bot.user_id: []}},
            )
        devices = query.json()["device_keys"][oracle_account.bot.user_id]
        assert client.nio.device_id in devices
        new_device = client.nio.device_id

    replaced = [r for r in caplog.records if "matrix.device_replaced" in r.getMessage()]
    assert len(replaced) == 1
    assert replaced[0].levelno == logging.WARNING
    credentials = tmp_path / "lost-and-new-store" / "nio" / "credentials.json"
    assert credentials.stat().st_mode & 0o777 == 0o600

    # The next start on that store reuses the saved device: no new identity each time.
    async with oracle_node(second) as (app, _base_url):
        client = layer_of(app).client
        assert client is not None
        assert client.nio.device_id == new_device
    replaced = [r for r in caplog.records if "matrix.device_replaced" in r.getMessage()]
    assert len(replaced) == 1


async def test_an_access_token_of_another_account_is_refused(
    synapse: Synapse,
    new_user: NewUser,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    tmp_path: Path,
) -> None:
    stranger = new_user("stranger")
    env = node_env(
        synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync,
        MATRIX_ORACLE_ADMIN_ACCESS_TOKEN=stranger.access_token,
    )  # fmt: skip
    app = await create_node(env)
    errors: list[BaseException] = []
    app.on_error(lambda exc, source: errors.append(exc))
    async with serving(app) as base_url:

        async def failed() -> bool:
            _status, body = await ready_body(base_url)
            return bool(body["matrix"] == "failed")

        await eventually(failed)
    assert errors
    assert "belongs to" in str(errors[0])
    assert stranger.user_id in str(errors[0])
