"""``rt_ctx.kv``: each plugin's tools reach their own namespace of the user's store."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from oracle_core import (
    KvLimits,
    KvQuotaError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    UserInfo,
)
from oracle_core.testing import create_test_runtime


class Note(BaseModel):
    text: str = ""


class NotePlugin(OraclePlugin):
    """Keeps the user's last note in ``rt_ctx.kv``."""

    version = "1.0.0"

    def __init__(self, name: str) -> None:
        self.name = name
        self.manifest = PluginManifest(
            title=f"Notes {name}",
            summary="Keeps a note.",
            when_to_use=["The user leaves a note."],
            visibility="always",
        )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        async def keep(args: Note, rt_ctx: RuntimeContext[Any]) -> Any:
            assert rt_ctx.kv is not None
            previous = await rt_ctx.kv.get("last")
            await rt_ctx.kv.set("last", args.text)
            return {"previous": previous, "keys": await rt_ctx.kv.keys()}

        prefix = self.name.replace("-", "_")
        return [
            PluginTool(
                name=f"{prefix}_keep",
                description="Keep a note.",
                args_schema=Note,
                handler=keep,
            )
        ]


async def test_each_plugin_sees_its_own_namespace_of_the_users_store() -> None:
    async with await create_test_runtime(
        plugins=[NotePlugin("first"), NotePlugin("second")]
    ) as runtime:
        one = await runtime.invoke_tool("first_keep", {"text": "buy milk"})
        two = await runtime.invoke_tool("first_keep", {"text": "call Ana"})
        other = await runtime.invoke_tool("second_keep", {"text": "elsewhere"})
        kv = runtime.runtime.ambient.kv
        assert kv is not None
        stranger = kv.for_user(UserInfo(did="did:key:z6MkStranger"), "first")

        assert '"previous": null' in one
        assert '"previous": "buy milk"' in two
        assert '"previous": null' in other
        assert await kv.for_user(runtime.user, "first").get("last") == "call Ana"
        assert await kv.for_user(runtime.user, "second").get("last") == "elsewhere"
        assert await stranger.get("last") is None


async def test_the_caps_hold_for_plugin_writes() -> None:
    async with await create_test_runtime(
        plugins=[NotePlugin("first")], kv_limits=KvLimits(max_keys=2, max_bytes=2048)
    ) as runtime:
        kv = runtime.runtime.ambient.kv
        assert kv is not None
        store = kv.for_user(runtime.user, "first")
        await store.set("a", 1)
        await store.set("b", 2)

        with pytest.raises(KvQuotaError):
            await store.set("c", 3)
        # invoke_tool runs the handler alone: in a turn, tool-retry makes it a tool error.
        with pytest.raises(KvQuotaError, match="holds its 2 keys"):
            await runtime.invoke_tool("first_keep", {"text": "x"})
        assert await store.keys() == ["a", "b"]
