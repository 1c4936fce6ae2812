"""Oracle nodes against a real homeserver: account provisioning, environment, users.

For tests of the Matrix layer (and of oracles that use it): provision the oracle's
account room with its signing mnemonic as the provisioning CLI does, build the
environment of a node whose local data lives in one directory (wipe it to get a fresh
node), serve it until ready, and log in as a ``did:ixo`` user's own Matrix account.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from oracle_core import OraclePlugin
from oracle_core.testing import mark_sensitive
from oracle_server import OracleApp, create_oracle_app
from oracle_server._matrix.values import MNEMONIC_STATE_KEY, SECURE_STATE_TYPE, encrypt_value
from oracle_server.testing._blocksync import BlocksyncDouble
from oracle_server.testing._openai_double import OpenAIDouble
from oracle_server.testing._server import serving
from oracle_server.testing._synapse import RegisteredUser, Synapse
from oracle_ucan import Ed25519Signer, invoke

if TYPE_CHECKING:
    import nio  # imported where a Matrix user is made: matrix-nio is heavy to load

__all__ = [
    "ENTITY_DID",
    "ORACLE_DID",
    "PIN",
    "NewUser",
    "OracleAccount",
    "eventually",
    "fresh_localpart",
    "matrix_user",
    "node_env",
    "open_user_room",
    "oracle_node",
    "provision_oracle",
    "random_mnemonic",
    "user_headers",
    "wait_ready",
]

PIN = "4321"
ORACLE_DID = "did:ixo:ixo1matrixoracle"
ENTITY_DID = "did:ixo:entity:matrixtests"


NewUser = Callable[[str], RegisteredUser]
"""``new_user(prefix)``: registers a user with a fresh localpart (the `new_user` fixture)."""


def fresh_localpart(prefix: str) -> str:
    """A localpart no other caller gets, e.g. ``alice-1f3a9c0e``: tests share a homeserver."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class OracleAccount:
    """The oracle's Matrix account and its account room with the signing mnemonic."""

    bot: RegisteredUser
    account_room_id: str
    mnemonic: str


def random_mnemonic(words: int = 12) -> str:
    """A fresh mnemonic-shaped secret: ``words`` random lowercase words of 6 to 9 letters
    (long enough that finding one in a log is no accident)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    mnemonic = " ".join(
        "".join(secrets.choice(letters) for _ in range(secrets.choice(range(6, 10))))
        for _ in range(words)
    )
    mark_sensitive(mnemonic)
    return mnemonic


async def provision_oracle(synapse: Synapse, bot: RegisteredUser | None = None) -> OracleAccount:
    """Create the account room and store the encrypted signing mnemonic in it (SRV-65),
    as the provisioning CLI does.

    Args:
        synapse: The homeserver.
        bot: The oracle's Matrix user. Default: a new one, ``oracle-<hex>``, whose
            password is ``<localpart>-password``.

    Returns:
        The account, its room and the mnemonic stored there.
    """
    if bot is None:
        localpart = fresh_localpart("oracle")
        bot = synapse.register(localpart, f"{localpart}-password")
    mnemonic = random_mnemonic()
    headers = {"Authorization": f"Bearer {bot.access_token}"}
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        created = await http.post(
            "/_matrix/client/v3/createRoom", json={"preset": "private_chat", "name": "Account"}
        )
        created.raise_for_status()
        room_id = str(created.json()["room_id"])
        stored = await http.put(
            f"/_matrix/client/v3/rooms/{room_id}/state/{SECURE_STATE_TYPE}/{MNEMONIC_STATE_KEY}",
            json={"encrypted_mnemonic": encrypt_value(mnemonic, PIN)},
        )
        stored.raise_for_status()
    return OracleAccount(bot, room_id, mnemonic)


async def provision_secrets_key(synapse: Synapse, account: OracleAccount) -> dict[str, Any]:
    """Give the oracle a P-256 key for users' secrets, as the provisioning CLI does: the
    private JWK under the PIN in a timeline event of the account room, and the state
    event naming it active. Returns the private JWK (a test plays the client with its
    public half and checks what the oracle wrote with the whole)."""
    from joserfc.jwk import ECKey

    from oracle_server._matrix.secrets import KEY_INDEX_STATE_KEY, KEY_INDEX_TYPE

    jwk = {**ECKey.generate_key("P-256").as_dict(private=True), "alg": "ECDH-ES+A256KW"}
    headers = {"Authorization": f"Bearer {account.bot.access_token}"}
    room = account.account_room_id
    async with httpx.AsyncClient(base_url=synapse.base_url, headers=headers) as http:
        sent = await http.put(
            f"/_matrix/client/v3/rooms/{room}/send/ixo.room.encryption_key/{uuid.uuid4().hex}",
            json={"encrypted_private_key": encrypt_value(json.dumps(jwk), PIN)},
        )
        sent.raise_for_status()
        entry = {
            "eventId": sent.json()["event_id"],
            "didVerificationMethodId": "did:ixo:entity:test#p256-enc-1",
            "algorithm": "ECDH-ES+A256KW",
            "curve": "P-256",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "active": True,
        }
        stored = await http.put(
            f"/_matrix/client/v3/rooms/{room}/state/{KEY_INDEX_TYPE}/{KEY_INDEX_STATE_KEY}",
            json={"keys": {str(uuid.uuid4()): entry}},
        )
        stored.raise_for_status()
    return jwk


def node_env(
    synapse: Synapse,
    account: OracleAccount,
    data_dir: Path,
    *,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    **extra: str,
) -> dict[str, str]:
    """The environment of one oracle node; its local data lives under ``data_dir``."""
    return {
        "ORACLE_BACKEND": "ixo",
        "ORACLE_NAME": "Matrix Test Oracle",
        "NETWORK": "devnet",
        "ORACLE_DID": ORACLE_DID,
        "ORACLE_ENTITY_DID": ENTITY_DID,
        "BLOCKSYNC_GRAPHQL_URL": blocksync.graphql_url,
        "SECP_MNEMONIC": "not used by these tests",
        "RPC_URL": "http://127.0.0.1:9",
        "SQLITE_DATABASE_PATH": str(data_dir / "sqlite"),
        "MATRIX_STORE_PATH": str(data_dir / "matrix-storage"),
        "MATRIX_BASE_URL": synapse.base_url,
        "MATRIX_ORACLE_ADMIN_USER_ID": account.bot.user_id,
        "MATRIX_ORACLE_ADMIN_PASSWORD": account.bot.password,
        "MATRIX_ORACLE_ADMIN_ACCESS_TOKEN": account.bot.access_token,
        "MATRIX_ACCOUNT_ROOM_ID": account.account_room_id,
        "MATRIX_VALUE_PIN": PIN,
        "MATRIX_RECOVERY_PHRASE": "not used by these tests",
        "MATRIX_BACKUP_DEBOUNCE_SECONDS": "0.2",
        "THROTTLE_LIMIT": "1000",
        **llm.env(),
        **extra,
    }


async def wait_ready(base_url: str, timeout: float = 60.0) -> dict[str, Any]:  # noqa: ASYNC109
    """Poll ``/ready`` until it answers 200; its body."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=base_url) as http:
        while True:
            answer = await http.get("/ready")
            if answer.status_code == 200:
                body: dict[str, Any] = answer.json()
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"the oracle never got ready: {answer.json()}")
            await asyncio.sleep(0.1)


@asynccontextmanager
async def oracle_node(
    env: dict[str, str], plugins: list[OraclePlugin] | None = None
) -> AsyncIterator[tuple[OracleApp, str]]:
    """A served node, ready (Matrix loaded and the signing key read)."""
    app = await create_oracle_app(
        {"name": "Matrix Test Oracle"},
        plugins=plugins or [],
        env=env,
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    async with serving(app) as base_url:
        await wait_ready(base_url)
        yield app, base_url


def user_headers(user: Ed25519Signer) -> dict[str, str]:
    """Auth headers of a ``did:ixo`` user for this oracle."""
    token = invoke(
        user,
        audience=ORACLE_DID,
        capability={"with": user.did(), "can": "*"},
        expiration=int(time.time()) + 600,
    ).to_base64()
    return {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}


async def eventually(check: Any, timeout: float = 30.0, interval: float = 0.1) -> Any:  # noqa: ASYNC109
    """Await ``check()`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met in {timeout} s")
        await asyncio.sleep(interval)


@asynccontextmanager
async def matrix_user(synapse: Synapse, did: str, store: Path) -> AsyncIterator[nio.AsyncClient]:
    """The user's own Matrix account (``@did-ixo-…``), logged in with E2EE keys uploaded."""
    import nio

    localpart = did.replace(":", "-")
    registered = synapse.register(localpart, f"{localpart}-pw")
    await asyncio.to_thread(store.mkdir, parents=True, exist_ok=True)
    client = nio.AsyncClient(
        synapse.base_url,
        registered.user_id,
        store_path=str(store),
        config=nio.AsyncClientConfig(encryption_enabled=True, store_sync_tokens=False),
    )
    try:
        login = await client.login(registered.password, device_name="user-device")
        assert isinstance(login, nio.LoginResponse), login
        if client.should_upload_keys:
            await client.keys_upload()
        yield client
    finally:
        await client.close()


async def open_user_room(
    client: Any,
    synapse: Synapse,
    oracle_account: OracleAccount,
    app: OracleApp,
    user_did: str,
) -> str:
    """The user's client creates their encrypted room with the oracle under the alias and
    invites the oracle (SRV-67), as the IXO client does; the room's id once the oracle has
    joined it."""
    import nio

    from oracle_server._matrix.rooms import user_room_alias

    created = await client.room_create(
        alias=user_room_alias(user_did, ENTITY_DID, synapse.server_name)[1:].split(":")[0],
        invite=[oracle_account.bot.user_id],
        initial_state=[
            {
                "type": "m.room.encryption",
                "state_key": "",
                "content": {"algorithm": "m.megolm.v1.aes-sha2"},
            }
        ],
    )
    assert isinstance(created, nio.RoomCreateResponse), created
    room_id = created.room_id
    matrix = app.state.matrix
    assert matrix is not None
    assert matrix.client is not None
    client_of_oracle = matrix.client

    async def oracle_joined() -> bool:
        return bool(
            await client_of_oracle.is_member(room_id, oracle_account.bot.user_id)
            and room_id in client_of_oracle.nio.rooms
        )

    await eventually(oracle_joined)
    await client.sync(timeout=0)
    return str(room_id)
