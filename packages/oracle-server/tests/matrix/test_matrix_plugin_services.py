"""``rt_ctx.matrix`` on a real Synapse: the scenario the local store passes, here over the
oracle's matrix-nio client with end-to-end encryption, and a plugin using it in a turn.

The human is the user's own matrix-nio client (``@did-ixo-…``); another user's accessor
must be refused every room the oracle made for the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nio

from oracle_core import UserInfo
from oracle_core.testing import check_matrix_accessor
from oracle_server._matrix.layer import MatrixLayer
from oracle_server.testing import (
    BlocksyncDouble,
    NewUser,
    OpenAIDouble,
    OracleAccount,
    Synapse,
    matrix_user,
    node_env,
    oracle_node,
)
from oracle_ucan import Ed25519Signer


class NioPeer:
    """The user in person, on their own E2EE client."""

    def __init__(self, client: nio.AsyncClient) -> None:
        self.client = client

    @property
    def user_id(self) -> str:
        return str(self.client.user_id)

    async def join(self, room_id: str) -> None:
        joined = await self.client.join(room_id)
        assert isinstance(joined, nio.JoinResponse), joined
        await self.client.sync(timeout=0, full_state=True)

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        await self.client.sync(timeout=0)
        if self.client.should_query_keys:
            await self.client.keys_query()
        sent = await self.client.room_send(
            room_id, event_type, content, ignore_unverified_devices=True
        )
        assert isinstance(sent, nio.RoomSendResponse), sent
        return str(sent.event_id)


async def test_the_matrix_layer_passes_the_matrix_scenario(
    synapse: Synapse,
    oracle_account: OracleAccount,
    llm: OpenAIDouble,
    blocksync: BlocksyncDouble,
    new_user: NewUser,
    tmp_path: Path,
) -> None:
    user = blocksync.add_user(Ed25519Signer.generate())
    other = blocksync.add_user(Ed25519Signer.generate())
    invitee = new_user("invitee")
    env = node_env(synapse, oracle_account, tmp_path / "node", llm=llm, blocksync=blocksync)
    async with (
        matrix_user(synapse, user.did(), tmp_path / "user-store") as client,
        oracle_node(env) as (app, _base_url),
    ):
        layer = app.state.matrix
        assert isinstance(layer, MatrixLayer)
        service = layer.service()
        await check_matrix_accessor(
            service.for_user(UserInfo(did=user.did())),
            NioPeer(client),
            outsider=service.for_user(UserInfo(did=other.did())),
            invitee=invitee.user_id,
        )
