"""The Synapse test harness (`oracle_server.testing.Synapse`) against a real homeserver."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import nio
import pytest
from nio.client.async_client import (
    AsyncClient,
    AsyncClientConfig,
)

from oracle_server.testing import NewUser, RegisteredUser, Synapse, SynapseError

# Enough timeline for a fresh room's state events and a few messages in one sync.
WIDE_SYNC = {"room": {"timeline": {"limit": 50}}}


def bearer(user: RegisteredUser) -> dict[str, str]:
    return {"Authorization": f"Bearer {user.access_token}"}


@asynccontextmanager
async def logged_in(server: Synapse, user: RegisteredUser, store: Path) -> AsyncIterator[Any]:
    """A matrix-nio client (encryption on) logged in with the user's password, then closed.

    ``store`` must exist; nio names its crypto store after the user and device, so
    clients can share one directory.
    """
    # max_limit_exceeded=0: a 429 comes back as an error instead of being waited out.
    config = AsyncClientConfig(max_limit_exceeded=0, request_timeout=30)
    client: Any = AsyncClient(server.base_url, user.user_id, store_path=str(store), config=config)
    try:
        login = await client.login(user.password, device_name="harness-test")
        assert isinstance(login, nio.LoginResponse), login
        yield client
    finally:
        await client.close()


def text_bodies(events: list[Any]) -> list[str]:
    return [event.body for event in events if isinstance(event, nio.RoomMessageText)]


async def refuses_connections(server: Synapse) -> bool:
    async with httpx.AsyncClient() as http:
        try:
            await http.get(f"{server.base_url}/health")
        except httpx.ConnectError:
            return True
    return False


async def send_text(client: Any, room_id: str, body: str) -> None:
    sent = await client.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": body})
    assert isinstance(sent, nio.RoomSendResponse), sent


async def test_register_returns_a_logged_in_device(synapse: Synapse, new_user: NewUser) -> None:
    alice = new_user("alice")
    admin = synapse.register(f"admin-{uuid.uuid4().hex[:8]}", "admin-password", admin=True)

    assert alice.user_id.endswith(":localhost")
    async with httpx.AsyncClient(base_url=synapse.base_url) as http:
        whoami = await http.get("/_matrix/client/v3/account/whoami", headers=bearer(alice))
        assert whoami.status_code == 200
        assert whoami.json()["user_id"] == alice.user_id
        assert whoami.json()["device_id"] == alice.device_id
        # admin=True makes a server admin, and only that user
        admin_path = f"/_synapse/admin/v2/users/{alice.user_id}"
        assert (await http.get(admin_path, headers=bearer(admin))).status_code == 200
        assert (await http.get(admin_path, headers=bearer(alice))).status_code == 403


async def test_two_nio_clients_exchange_a_message(
    synapse: Synapse, new_user: NewUser, tmp_path: Path
) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    body = f"hello bob {uuid.uuid4().hex}"

    async with (
        logged_in(synapse, alice, tmp_path) as alice_client,
        logged_in(synapse, bob, tmp_path) as bob_client,
    ):
        created = await alice_client.room_create(name="harness", invite=[bob.user_id])
        assert isinstance(created, nio.RoomCreateResponse), created
        # nio with encryption sends only to rooms a sync has shown it
        assert isinstance(await alice_client.sync(timeout=0), nio.SyncResponse)
        await send_text(alice_client, created.room_id, body)

        joined = await bob_client.join(created.room_id)
        assert isinstance(joined, nio.JoinResponse), joined
        synced = await bob_client.sync(timeout=0, sync_filter=WIDE_SYNC)
        assert isinstance(synced, nio.SyncResponse), synced
        assert text_bodies(synced.rooms.join[created.room_id].timeline.events) == [body]

    # An unencrypted room: the homeserver stores the body as sent (the positive control
    # of "plaintext is not stored" checks of encrypted rooms).
    assert synapse.database_path.is_file()
    assert body.encode() in synapse.stored_bytes()


async def test_rate_limits_are_out_of_the_way(synapse: Synapse, new_user: NewUser) -> None:
    user = new_user("busy")
    login = {
        "type": "m.login.password",
        "identifier": {"type": "m.id.user", "user": user.user_id},
        "password": user.password,
    }
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=bearer(user)) as http:
        # Synapse's defaults allow bursts of 5 logins, 10 rooms and 10 messages.
        for _ in range(8):
            response = await http.post("/_matrix/client/v3/login", json=login)
            assert response.status_code == 200, response.text
        room_ids = []
        for _ in range(12):
            response = await http.post("/_matrix/client/v3/createRoom", json={})
            assert response.status_code == 200, response.text
            room_ids.append(response.json()["room_id"])
        for txn in range(25):
            response = await http.put(
                f"/_matrix/client/v3/rooms/{room_ids[0]}/send/m.room.message/txn{txn}",
                json={"msgtype": "m.text", "body": f"message {txn}"},
            )
            assert response.status_code == 200, response.text


def test_registering_an_existing_user_raises(synapse: Synapse, new_user: NewUser) -> None:
    carol = new_user("carol")
    localpart = carol.user_id[1:].split(":", 1)[0]

    with pytest.raises(SynapseError, match=r"refused to register .*M_USER_IN_USE") as caught:
        synapse.register(localpart, "another-password")

    assert caught.value.code == "synapse.register_rejected"
    assert caught.value.errcode == "M_USER_IN_USE"


async def test_client_reconnects_after_a_kill_and_restart(tmp_path: Path) -> None:
    with Synapse(data_dir=tmp_path / "server") as server:
        dave = server.register("dave", "dave-password")
        async with logged_in(server, dave, tmp_path) as client:
            created = await client.room_create(name="crash test")
            assert isinstance(created, nio.RoomCreateResponse), created
            assert isinstance(await client.sync(timeout=0), nio.SyncResponse)
            await send_text(client, created.room_id, "before the crash")
            assert isinstance(await client.sync(timeout=0), nio.SyncResponse)
            crashed_pid = server.pid

            server.kill()
            assert server.pid is None
            assert await refuses_connections(server)

            server.restart()
            assert server.running
            assert server.pid != crashed_pid
            # the same client, token and sync position carry on against the new process
            await send_text(client, created.room_id, "after the restart")
            synced = await client.sync(timeout=0)
            assert isinstance(synced, nio.SyncResponse), synced
            timeline = synced.rooms.join[created.room_id].timeline.events
            assert text_bodies(timeline) == ["after the restart"]
            history = await client.room_messages(created.room_id, limit=20)
            assert isinstance(history, nio.RoomMessagesResponse), history
            assert text_bodies(history.chunk) == ["after the restart", "before the crash"]

    assert await refuses_connections(server)
    assert server.database_path.is_file()  # a given data_dir is left in place


def test_a_failed_start_raises_with_the_log_tail(tmp_path: Path) -> None:
    server = Synapse(data_dir=tmp_path, extra_config={"database": {"name": "no-such-engine"}})

    with pytest.raises(SynapseError, match=r"(?s)synapse\.start_failed: .*no-such-engine"):
        server.start()

    assert not server.running
    with pytest.raises(SynapseError, match=r"synapse\.not_running"):
        server.register("nobody", "password")
