"""The remote backend's tools: fetched per request over MCP, prefixed, schemas verbatim,
authorised per request with a UCAN invocation, degrading when that is not possible."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from oracle_core import (
    OraclePlugin,
    PluginSubAgent,
    RuntimeContext,
    SessionEvent,
    UcanAccessor,
    UserInfo,
)
from oracle_core.testing import ScriptedChatModel, TestRuntime, call_tool, reply
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_ucan import Ed25519Signer, invoke

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]
MinterFactory = Callable[..., UcanAccessor]

DEFAULT_TOOLS = [
    "memory-engine__search_memory_engine",
    "memory-engine__add_memory",
    "memory-engine__delete_episode",
    "memory-engine__clear",
]


def memory_tools(names: Sequence[str]) -> list[str]:
    return [n for n in names if n.startswith("memory-engine__")]


async def test_default_tools_are_prefixed_and_bound_verbatim(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    assert memory_tools(list(built.tool_infos)) == DEFAULT_TOOLS
    upstream = {t.name: t for t in await engine.mcp.list_tools()}
    bound = {t.name: t.plugin_tool for t in built.tools if hasattr(t, "plugin_tool")}
    for name in DEFAULT_TOOLS:
        wire = upstream[name.removeprefix("memory-engine__")]
        assert bound[name].args_schema == wire.input_schema
        assert bound[name].description == wire.description
    assert built.tool_infos["memory-engine__search_memory_engine"].effect == "read"
    assert built.tool_infos["memory-engine__clear"].effect == "destructive"


async def test_the_double_names_the_tools_it_serves(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    served = await engine.tool_names()
    assert sorted(served) == [
        "add_memory",
        "add_oracle_knowledge",
        "clear",
        "delete_edge",
        "delete_episode",
        "search_memory_engine",
    ]
    bound = [n.removeprefix("memory-engine__") for n in memory_tools(list(built.tool_infos))]
    assert set(bound) <= set(served)
    assert built.tool_infos["memory-engine__add_memory"].effect == "write"
    assert built.degraded == []


async def test_opt_in_tools_follow_the_selection(remote_runtime: RuntimeFactory) -> None:
    plugin = MemoryPlugin(
        selected_tools=["memory-engine__add_oracle_knowledge", "delete_edge", "delete_edge"]
    )
    async with remote_runtime(plugin) as rt:
        names = memory_tools(await rt.list_tools())
    assert names == ["memory-engine__add_oracle_knowledge", "memory-engine__delete_edge"]


def test_an_unknown_tool_name_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown memory tools \\['forget'\\]; choose from"):
        MemoryPlugin(selected_tools=["forget"])


async def test_calls_reach_the_engine_as_the_user_and_the_oracle(
    engine: MemoryEngineDouble,
    remote_runtime: RuntimeFactory,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    async with remote_runtime() as rt:
        added = await rt.invoke_tool(
            "memory-engine__add_memory", {"name": "Diet", "content": "Ada is vegetarian"}
        )
        found = await rt.invoke_tool(
            "memory-engine__search_memory_engine", {"query": "vegetarian", "strategy": "precise"}
        )
    assert "episode_uuid" in json.loads(added)
    [stored] = engine.user_memories(user_key.did())
    assert (stored.name, stored.content) == ("Diet", "Ada is vegetarian")
    assert json.loads(found)["facts"] == [{"uuid": stored.fact_uuid, "fact": "Ada is vegetarian"}]
    callers = {r.caller for r in engine.requests}
    assert {(c.user, c.oracle) for c in callers} == {(user_key.did(), oracle_key.did())}


async def test_the_room_header_names_the_users_room_when_there_is_one(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    async with remote_runtime() as rt:
        await rt.build("no room yet")
    assert engine.requests
    assert {r.room_id for r in engine.requests} == {None}

    engine.requests.clear()
    async with remote_runtime() as rt:
        rt.matrix.user_rooms[user_key.did()] = "!room:memory.test"
        await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "anything"})
    assert engine.requests
    assert {r.room_id for r in engine.requests} == {"!room:memory.test"}


@pytest.mark.parametrize("case", ["no minter", "no delegation", "delegation without memory"])
async def test_no_invocation_means_no_memory_tools_and_a_warning(
    case: str,
    engine: MemoryEngineDouble,
    remote_runtime: RuntimeFactory,
    make_minter: MinterFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ucan = {
        "no minter": None,
        "no delegation": make_minter(delegation=None),
        "delegation without memory": make_minter(grant={"with": "ixo:vfs", "can": "vfs/*"}),
    }[case]
    caplog.set_level(logging.WARNING)
    async with remote_runtime(ucan=ucan) as rt:
        built = await rt.build("hello")
    assert memory_tools(list(built.tool_infos)) == []
    assert built.degraded == []  # a missing authorisation is not an outage
    assert "memory tools unavailable this turn" in caplog.text
    assert engine.requests == []  # nothing was sent without an invocation


async def test_a_request_without_a_user_did_gets_no_tools_and_no_context(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The runtime refuses turns without a DID; the hooks still guard against one.
    plugin = MemoryPlugin()
    async with remote_runtime(plugin) as rt:
        built = await rt.build("hello")
        engine.requests.clear()
        engine.batch_bodies.clear()
        base = built.context.runtime_context
        assert base is not None
        anonymous = dataclasses.replace(base.for_plugin("memory"), user=UserInfo(did=""))
        caplog.set_level(logging.WARNING)
        assert await plugin.get_request_tools(anonymous) == []
        assert await plugin.get_turn_state(anonymous) == {}
    assert "no user DID" in caplog.text
    assert engine.requests == []
    assert engine.batch_bodies == []


async def test_engine_refusals_come_back_as_errors_not_exceptions(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    engine.seed(user_key.did(), "kept")
    async with remote_runtime() as rt:
        refused = await rt.invoke_tool(
            "memory-engine__clear", {"confirmed_deletion_from_user": False}
        )
        assert engine.user_memories(user_key.did())
        done = await rt.invoke_tool("memory-engine__clear", {"confirmed_deletion_from_user": True})
    result = json.loads(refused)
    assert result["ok"] is False
    assert "confirmed_deletion_from_user must be true" in result["error"]
    assert done == "cleared 1 memories"
    assert engine.user_memories(user_key.did()) == []


async def test_the_engine_refuses_requests_without_a_valid_invocation(
    engine: MemoryEngineDouble, user_key: Ed25519Signer, oracle_key: Ed25519Signer
) -> None:
    elsewhere = invoke(
        oracle_key,
        audience="did:web:other-engine.test",
        capability={"with": "ixo:memory", "can": "memory/*"},
        expiration=int(time.time()) + 60,
    ).to_base64()
    async with httpx.AsyncClient(base_url=engine.engine_url) as http:
        bare = await http.post("/search-enhanced-batch", json={"queries": []})
        wrong = await http.post(
            "/messages",
            json={"messages": []},
            headers={"Authorization": f"Bearer {elsewhere}", "X-Auth-Type": "ucan"},
        )
        mcp = await http.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        did = await http.get("/.well-known/did.json")
    assert (bare.status_code, wrong.status_code, mcp.status_code) == (401, 401, 401)
    assert did.json()["id"] == engine.did
    assert engine.rejected == ["missing invocation", "UNAUTHORIZED", "missing invocation"]


class HelperPlugin(OraclePlugin):
    """A plugin whose sub-agent takes the memory tools the memory plugin shares."""

    name = "helper"
    version = "1.0.0"
    manifest = {
        "title": "Helper",
        "summary": "Delegates to a helper agent.",
        "when_to_use": ["Testing sub-agents"],
        "visibility": "always",
    }

    def get_request_sub_agents(self, rt_ctx: RuntimeContext[Any]) -> list[PluginSubAgent]:
        def tools(ctx: RuntimeContext[Any]) -> list[Any]:
            assert ctx.shared is not None
            return list(ctx.shared.get("memoryTools") or ())

        return [
            PluginSubAgent(name="helper", description="Helps.", system_prompt="Help.", tools=tools)
        ]


async def test_clear_is_never_handed_to_sub_agents(remote_runtime: RuntimeFactory) -> None:
    main = ScriptedChatModel(
        [call_tool("call_helper_agent", {"task": "Look up the user's diet."}), reply("Done.")],
        strict=True,
    )
    sub = ScriptedChatModel(["Vegetarian."])
    async with remote_runtime(
        extra_plugins=(HelperPlugin(),), model=main, models={"subagent": sub}
    ) as rt:
        result = await rt.run_turn("What do I eat?")
    assert result.text == "Done."
    assert memory_tools(main.calls[0].tool_names) == DEFAULT_TOOLS
    assert memory_tools(sub.calls[0].tool_names) == DEFAULT_TOOLS[:3]


async def test_each_finished_turn_is_ingested_in_the_background(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    model = ScriptedChatModel([reply("Noted, Lisbon it is.")])
    async with remote_runtime(model=model) as rt:
        await rt.run_turn("I moved to Lisbon")
        await asyncio.wait_for(engine.ingested_event.wait(), timeout=5)
    [posted] = engine.ingested
    assert posted["caller"].user == user_key.did()
    assert posted["messages"] == [
        {"content": "I moved to Lisbon", "role_type": "user", "name": user_key.did()},
        {"content": "Noted, Lisbon it is.", "role_type": "assistant", "name": "Test Oracle"},
    ]


async def test_ingestion_can_be_turned_off(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    plugin = MemoryPlugin(ingest_history=False)
    async with remote_runtime(plugin, model=ScriptedChatModel(["ok"])) as rt:
        [booted] = [b for b in rt.runtime.booted if b.name == "memory"]
        assert booted.middlewares == []
        await rt.run_turn("I moved to Lisbon")
    assert engine.ingested == []
    async with remote_runtime(model=ScriptedChatModel(["ok"])) as rt:
        [booted] = [b for b in rt.runtime.booted if b.name == "memory"]
        assert [m.name for m in booted.middlewares] == ["memory-history-ingestion"]


async def test_a_deleted_session_sends_only_the_turns_never_sent(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    plugin = MemoryPlugin()
    model = ScriptedChatModel([reply("Noted, Lisbon it is.")])
    async with remote_runtime(plugin, model=model) as rt:
        await rt.run_turn("I moved to Lisbon")
        await asyncio.wait_for(engine.ingested_event.wait(), timeout=5)
        await plugin._ingestion.drain()
        thread = await rt.runtime.thread_messages(rt.user.did, rt.session.id)
        # A turn the per-turn ingestion never sent (it failed, or was aborted).
        missed = (HumanMessage("I also speak Portuguese", id="h-missed"), AIMessage("Ótimo!"))
        event = SessionEvent(
            "session.deleted", rt.session.id, rt.user.did, messages=(*thread, *missed)
        )
        await rt.runtime.session_event(event)
        await plugin._ingestion.drain()

    assert [p["messages"] for p in engine.ingested] == [
        [
            {"content": "I moved to Lisbon", "role_type": "user", "name": rt.user.did},
            {"content": "Noted, Lisbon it is.", "role_type": "assistant", "name": "Test Oracle"},
        ],
        [
            {"content": "I also speak Portuguese", "role_type": "user", "name": rt.user.did},
            {"content": "Ótimo!", "role_type": "assistant", "name": "Test Oracle"},
        ],
    ]


async def test_without_per_turn_ingestion_a_deleted_session_sends_its_whole_history(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    plugin = MemoryPlugin(ingest_history=False)
    async with remote_runtime(plugin, model=ScriptedChatModel(["Hello!", "Bye!"])) as rt:
        await rt.run_turn("Hi")
        await rt.run_turn("Goodbye")
        thread = await rt.runtime.thread_messages(rt.user.did, rt.session.id)
        await rt.runtime.session_event(
            SessionEvent("session.deleted", rt.session.id, rt.user.did, messages=tuple(thread))
        )
        await plugin._ingestion.drain()

    [posted] = engine.ingested
    assert [(m["role_type"], m["content"]) for m in posted["messages"]] == [
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Goodbye"),
        ("assistant", "Bye!"),
    ]


async def test_the_tool_policys_data_scope_narrows_the_engines_searches(
    remote_runtime: RuntimeFactory,
) -> None:
    oracle_only = json.dumps({"dataScopes": {"memory": {"knowledge_level": "oracle"}}})
    query = {"query": "vegetarian", "knowledge_level": "both"}
    async with remote_runtime() as rt:
        await rt.invoke_tool(
            "memory-engine__add_memory", {"name": "Diet", "content": "Ada is vegetarian"}
        )
        unscoped = json.loads(await rt.invoke_tool("memory-engine__search_memory_engine", query))
    async with remote_runtime(config={"ORACLE_TOOL_POLICY": oracle_only}) as rt:
        scoped = json.loads(await rt.invoke_tool("memory-engine__search_memory_engine", query))

    assert [f["fact"] for f in unscoped["facts"]] == ["Ada is vegetarian"]
    assert scoped["facts"] == []
