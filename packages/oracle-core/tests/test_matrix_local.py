"""The local Matrix store: what plugins reach with ``ORACLE_BACKEND=local``.

The same scenario the server's Matrix layer passes against Synapse, then what only a
local store needs: power levels enforced for humans too, persistence across restarts,
the recording kit's stand-in rooms next to real ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    LocalMatrixService,
    MatrixRequestError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    UserInfo,
    local_matrix_user_id,
    plugin_tool,
)
from oracle_core.testing import (
    LocalMatrixPeer,
    ScriptedChatModel,
    call_tool,
    check_matrix_accessor,
    create_test_runtime,
    reply,
)

ALICE = UserInfo(did="did:key:z6MkAlice")
BOB = UserInfo(did="did:key:z6MkBob")


async def test_the_local_store_passes_the_matrix_scenario() -> None:
    store = LocalMatrixService()
    try:
        await check_matrix_accessor(
            store.for_user(ALICE),
            LocalMatrixPeer(store, local_matrix_user_id(ALICE.did)),
            outsider=store.for_user(BOB),
            invitee="@carol:localhost",
        )
    finally:
        await store.aclose()


async def test_power_levels_bind_humans_as_a_homeserver_would() -> None:
    store = LocalMatrixService()
    alice = local_matrix_user_id(ALICE.did)
    try:
        room = await store.for_user(ALICE).create_room(name="Group")
        with pytest.raises(MatrixRequestError) as not_joined:
            await store.send_as(alice, room, "m.room.message", {"body": "early"})
        assert not_joined.value.code == "matrix.forbidden"
        await store.join(room, alice)
        await store.send_as(alice, room, "m.room.message", {"body": "hello"})
        with pytest.raises(MatrixRequestError) as state:  # state needs 50; Alice has 0
            await store.send_as(alice, room, "m.room.topic", {"topic": "x"}, state_key="")
        assert state.value.code == "matrix.forbidden"
        with pytest.raises(MatrixRequestError) as uninvited:
            await store.join(room, "@mallory:localhost")
        assert uninvited.value.code == "matrix.forbidden"
        levels = await store.for_user(ALICE).get_power_levels(room)
        assert levels.can_send(alice, "m.room.message")
        assert not levels.can_send(alice, "m.room.name", state=True)
        assert levels.can(alice, "invite")
        assert not levels.can(alice, "kick")
    finally:
        await store.aclose()


async def test_rooms_outlive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "matrix.db"
    store = LocalMatrixService(path)
    room = await store.for_user(ALICE).create_room(name="Kept")
    event_id = await store.for_user(ALICE).send_event(room, "org.example.note", {"n": 1})
    mxc = await store.for_user(ALICE).upload(b"bytes", content_type="text/plain", filename="a")
    await store.aclose()

    reopened = LocalMatrixService(path)
    try:
        accessor = reopened.for_user(ALICE)
        page = await accessor.get_timeline(room)
        assert page.events[-1].event_id == event_id
        assert page.events[-1].content == {"n": 1}
        assert page.before is None
        assert await accessor.download(mxc) == b"bytes"
    finally:
        await reopened.aclose()


async def test_bad_tokens_and_media_uris_are_clear_errors() -> None:
    store = LocalMatrixService()
    try:
        accessor = store.for_user(ALICE)
        room = await accessor.create_room(name="R")
        with pytest.raises(MatrixRequestError) as token:
            await accessor.get_timeline(room, before="not-a-token")
        assert token.value.code == "matrix.failed"
        with pytest.raises(MatrixRequestError) as media:
            await accessor.download("https://example.org/x")
        assert media.value.code == "matrix.not_found"
        with pytest.raises(MatrixRequestError) as missing:
            await accessor.get_timeline("!nowhere:localhost")
        assert missing.value.code == "matrix.room_forbidden"
    finally:
        await store.aclose()


class Named(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


class RoomsPlugin(OraclePlugin):
    """Opens a room for the user and reads it back, as editor and tasks will."""

    name = "rooms"
    version = "1"
    manifest = PluginManifest(
        title="Rooms", summary="Opens rooms.", when_to_use=["rooms"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="open_room", description="Open a room.", args_schema=Named)
        async def open_room(args: Named, rt_ctx: RuntimeContext[Any]) -> str:
            assert rt_ctx.matrix is not None
            room = await rt_ctx.matrix.create_room(name=args.name, user_power_level=50)
            await rt_ctx.matrix.post_to_room(room, {"msgtype": "m.text", "body": "welcome"})
            page = await rt_ctx.matrix.get_timeline(room, limit=1)
            return f"{room} {page.events[-1].content['body']}"

        return [open_room]


async def test_a_plugin_opens_a_room_in_the_test_runtime() -> None:
    model = ScriptedChatModel([call_tool("open_room", {"name": "Tasks"}), reply("Done.")])
    async with await create_test_runtime(plugins=[RoomsPlugin()], model=model) as rt:
        result = await rt.run_turn("open a room")
        [message] = result.tool_messages("open_room")
        room, body = str(message.content).split()
        assert body == "welcome"
        assert rt.matrix.posts == [(room, {"msgtype": "m.text", "body": "welcome"})]
        members = await rt.matrix.for_user(rt.user).members(room)
        assert {m.user_id for m in members} == {
            rt.matrix.oracle_user_id,
            local_matrix_user_id(rt.user.did),
        }
