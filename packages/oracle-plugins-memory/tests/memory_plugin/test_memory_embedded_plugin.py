"""The embedded backend through the real boot pipeline: the conformance suite, the tools,
the two spaces, confirmation flags, the prompt section and sub-agents."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from oracle_core import (
    EnvValidationError,
    OracleBootError,
    OraclePlugin,
    PluginSubAgent,
    RuntimeContext,
    UserInfo,
    create_runtime,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_plugins.memory import MEMORY_DATABASE_NAME, MemoryPlugin, plugin

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]
ADA = UserInfo(did="did:key:z6MkAdaOfTheMemoryTests", timezone="UTC")
BOB = UserInfo(did="did:key:z6MkBobOfTheMemoryTests", timezone="UTC")


def data(result: Any) -> Any:
    return json.loads(result)


async def test_the_conformance_suite_passes_for_both_backends(tmp_path: Path) -> None:
    embedded = await validate_plugin(
        plugin,
        config={"MEMORY_BACKEND": "embedded", "SQLITE_DATABASE_PATH": str(tmp_path)},
        entry_point=True,
    )
    assert embedded.ok, str(embedded)
    remote = await validate_plugin(
        MemoryPlugin(),
        config={
            "MEMORY_MCP_URL": "http://127.0.0.1:9/mcp/",
            "MEMORY_ENGINE_URL": "http://127.0.0.1:9",
        },
    )
    assert remote.ok, str(remote)
    assert (tmp_path / MEMORY_DATABASE_NAME).is_file()


async def test_the_tools_remember_and_recall(embedded_runtime: RuntimeFactory) -> None:
    async with embedded_runtime(user=ADA) as rt:
        tools = [n for n in await rt.list_tools() if n.startswith("memory-engine__")]
        added = data(
            await rt.invoke_tool(
                "memory-engine__add_memory",
                {"name": "Home", "content": "I live in Lisbon. I cycle to work."},
            )
        )
        found = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "Lisbon"})
        )
    assert tools == [
        "memory-engine__search_memory_engine",
        "memory-engine__add_memory",
        "memory-engine__delete_episode",
        "memory-engine__clear",
    ]
    assert added["ok"] is True
    assert added["facts"] == 2
    assert found["facts"][0]["fact"] == "I live in Lisbon."
    assert found["facts"][0]["episode_uuid"] == added["episode_uuid"]
    assert found["episodes"] == [{"uuid": added["episode_uuid"], "name": "Home", "space": "user"}]
    assert found["entities"] == [{"name": "Lisbon"}]


async def test_users_never_see_each_other(embedded_runtime: RuntimeFactory) -> None:
    async with embedded_runtime(user=ADA) as rt:
        await rt.invoke_tool("memory-engine__add_memory", {"name": "x", "content": "I love jazz."})
    async with embedded_runtime(user=BOB) as rt:
        found = data(await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "jazz"}))
        built = await rt.build("hello")
    assert found["facts"] == []
    assert set(built.input["user_context"].values()) == {None}


async def test_destructive_tools_need_the_users_confirmation(
    embedded_runtime: RuntimeFactory,
) -> None:
    async with embedded_runtime(user=ADA) as rt:
        added = data(
            await rt.invoke_tool("memory-engine__add_memory", {"name": "x", "content": "I ski."})
        )
        refused = data(
            await rt.invoke_tool(
                "memory-engine__delete_episode",
                {"episode_uuid": added["episode_uuid"], "confirmed_deletion_from_user": False},
            )
        )
        still = data(await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "ski"}))
        cleared = data(
            await rt.invoke_tool("memory-engine__clear", {"confirmed_deletion_from_user": True})
        )
        gone = data(await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "ski"}))
        missing = data(
            await rt.invoke_tool(
                "memory-engine__delete_episode",
                {"episode_uuid": added["episode_uuid"], "confirmed_deletion_from_user": True},
            )
        )
    assert refused == {
        "ok": False,
        "error": "Not done: ask the user to confirm, then call again with the flag set to true.",
    }
    assert len(still["facts"]) == 1
    assert cleared == {"ok": True, "deleted_episodes": 1}
    assert gone["facts"] == []
    assert missing == {"ok": False, "error": "No such memory of yours."}


async def test_bad_arguments_are_refused_by_the_schema(embedded_runtime: RuntimeFactory) -> None:
    async with embedded_runtime(user=ADA) as rt:
        with pytest.raises(ValidationError, match="confirmed_deletion_from_user"):
            await rt.invoke_tool("memory-engine__clear", {})
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            await rt.invoke_tool(
                "memory-engine__search_memory_engine", {"query": "x", "user_did": BOB.did}
            )


async def test_oracle_knowledge_is_written_by_owners_only(embedded_runtime: RuntimeFactory) -> None:
    tools = ["search_memory_engine", "add_oracle_knowledge", "delete_edge"]
    owners = {"MEMORY_ORACLE_OWNER_DIDS": f"{ADA.did}, did:key:z6MkSomeoneElse"}
    async with embedded_runtime(MemoryPlugin(selected_tools=tools), user=ADA, config=owners) as rt:
        for kind, content in (
            ("public", "Opening hours are 9 to 5."),
            ("private", "Opening margin 40%."),
        ):
            added = data(
                await rt.invoke_tool(
                    "memory-engine__add_oracle_knowledge",
                    {
                        "name": kind,
                        "content": content,
                        "confirmed_insertion_from_user": True,
                        "knowledge_space_type": kind,
                    },
                )
            )
            assert added["ok"] is True
        mine = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "opening"})
        )
    async with embedded_runtime(MemoryPlugin(selected_tools=tools), user=BOB, config=owners) as rt:
        theirs = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "opening"})
        )
        refused = data(
            await rt.invoke_tool(
                "memory-engine__add_oracle_knowledge",
                {"name": "x", "content": "y", "confirmed_insertion_from_user": True},
            )
        )
        edge = theirs["facts"][0]["uuid"]
        not_theirs = data(
            await rt.invoke_tool(
                "memory-engine__delete_edge",
                {"edge_uuid": edge, "confirmed_deletion_from_user": True},
            )
        )
    assert sorted(f["fact"] for f in mine["facts"]) == [
        "Opening hours are 9 to 5.",
        "Opening margin 40%.",
    ]
    assert [f["fact"] for f in theirs["facts"]] == ["Opening hours are 9 to 5."]
    assert {f["space"] for f in theirs["facts"]} == {"oracle"}
    assert refused == {
        "ok": False,
        "error": "Only the owners of this oracle can add its knowledge.",
    }
    assert not_theirs == {"ok": False, "error": "No such fact of yours."}


async def test_the_prompt_section_comes_from_the_store_and_is_cached(
    embedded_runtime: RuntimeFactory,
) -> None:
    model = ScriptedChatModel(
        [
            call_tool(
                "memory-engine__add_memory",
                {"name": "Intro", "content": "My name is Ada. I work as an analyst."},
            ),
            reply("Nice to meet you, Ada."),
            reply("Hello again, Ada."),
        ]
    )
    async with embedded_runtime(user=ADA, model=model) as rt:
        first = await rt.run_turn("I'm Ada and I work as an analyst.")
        same_session = await rt.build("and again")
        new_session = await rt.build("hello", thread_id="next-day")
        later = await rt.run_turn("Hi!", thread_id="next-day")
    assert first.tool_messages("memory-engine__add_memory")[0].status != "error"
    assert set(same_session.input["user_context"].values()) == {None}  # cached 5 min
    assert new_session.input["user_context"]["identity"] == "My name is Ada.\n  - **Related:** Ada"
    assert new_session.input["user_context"]["work"] == "I work as an analyst."
    section = "- Who they are: My name is Ada.\n  - **Related:** Ada\n- Work: I work as an analyst."
    assert section in new_session.prompt.text
    assert later.state["user_context"]["identity"].startswith("My name is Ada.")
    assert "- Who they are: My name is Ada." in (model.calls[-1].system_prompt or "")


class HelperPlugin(OraclePlugin):
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


async def test_sub_agents_get_every_memory_tool_but_clear(
    embedded_runtime: RuntimeFactory,
) -> None:
    main = ScriptedChatModel(
        [call_tool("call_helper_agent", {"task": "Erase the user's memories."}), reply("Done.")]
    )
    # The sub-agent tries clear anyway: strict mode fails the call it cannot see.
    sub = ScriptedChatModel(
        [call_tool("memory-engine__clear", {"confirmed_deletion_from_user": True})], strict=True
    )
    async with embedded_runtime(
        user=ADA, extra_plugins=(HelperPlugin(),), model=main, models={"subagent": sub}
    ) as rt:
        await rt.invoke_tool("memory-engine__add_memory", {"name": "x", "content": "I ski."})
        result = await rt.run_turn("Forget everything")
        left = data(await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "ski"}))
    [answer] = result.tool_messages("call_helper_agent")
    assert "memory-engine__clear" in str(answer.content)  # the refused call, named
    assert "memory-engine__clear" not in sub.calls[0].tool_names
    assert [n for n in sub.calls[0].tool_names if n.startswith("memory-engine__")] == [
        "memory-engine__search_memory_engine",
        "memory-engine__add_memory",
        "memory-engine__delete_episode",
    ]
    assert len(left["facts"]) == 1


async def test_without_the_model_recall_is_bm25_only(
    embedded_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with embedded_runtime(MemoryPlugin(semantic=False), user=ADA) as rt:
        await rt.invoke_tool(
            "memory-engine__add_memory", {"name": "x", "content": "Rex is my dog."}
        )
        semantic = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "pets I own"})
        )
        lexical = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "dog"})
        )
    assert "embedded SQLite backend (BM25 recall)" in caplog.text
    assert semantic["facts"] == []
    assert [f["fact"] for f in lexical["facts"]] == ["Rex is my dog."]


async def test_with_the_model_recall_is_semantic(
    embedded_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with embedded_runtime(user=ADA) as rt:
        await rt.invoke_tool(
            "memory-engine__add_memory", {"name": "x", "content": "Rex is my dog."}
        )
        found = data(
            await rt.invoke_tool("memory-engine__search_memory_engine", {"query": "pets I own"})
        )
    assert "semantic recall with all-MiniLM-L6-v2-onnx-int8" in caplog.text
    assert [f["fact"] for f in found["facts"]] == ["Rex is my dog."]


async def test_one_instance_serves_one_runtime_at_a_time(tmp_path: Path) -> None:
    shared = MemoryPlugin(semantic=False)
    config = {"MEMORY_BACKEND": "embedded", "SQLITE_DATABASE_PATH": str(tmp_path)}
    async with await create_test_runtime(plugins=[shared], config=config):
        with pytest.raises(OracleBootError, match="already runs in another runtime"):
            await create_test_runtime(plugins=[shared], config=config)
    async with await create_test_runtime(plugins=[shared], config=config) as again:
        assert "memory" in again.status().loaded


async def test_the_conformance_suite_boots_memory_with_no_backend_variable(
    tmp_path: Path,
) -> None:
    # Forced on by the suite with no MEMORY_MCP_URL: the embedded backend, unasked.
    report = await validate_plugin(MemoryPlugin(), config={"SQLITE_DATABASE_PATH": str(tmp_path)})
    assert report.ok, str(report)
    assert (tmp_path / MEMORY_DATABASE_NAME).is_file()


async def test_forced_on_without_a_url_memory_runs_embedded(tmp_path: Path) -> None:
    # Outside local mode nothing turns memory on by default; forcing it selects embedded.
    env = ixo_env(tmp_path)
    runtime = await create_runtime(
        {"name": "Forced"},
        plugins=[MemoryPlugin(semantic=False)],
        env=env,
        discover_entry_points=False,
        require_llm=False,
    )
    async with runtime:
        [excluded] = runtime.plugins.status().excluded
        assert (excluded.plugin, excluded.code) == ("memory", "auto_detect_failed")
        assert "MEMORY_MCP_URL is set" in excluded.reason
    forced = await create_runtime(
        {"name": "Forced"},
        plugins=[MemoryPlugin(semantic=False)],
        features={"memory": True},
        env=env,
        discover_entry_points=False,
        require_llm=False,
    )
    async with forced:
        status = forced.plugins.status()
        assert "memory" in status.loaded
        assert status.backends == {"memory": "embedded"}
        assert forced.plugin_configs["memory"].backend == "embedded"  # type: ignore[union-attr]
    assert (tmp_path / MEMORY_DATABASE_NAME).is_file()


async def test_in_local_mode_memory_is_on_by_default_and_embedded(tmp_path: Path) -> None:
    config = {"SQLITE_DATABASE_PATH": str(tmp_path)}
    async with await create_test_runtime(
        plugins=[MemoryPlugin(semantic=False)], config=config
    ) as rt:
        status = rt.status()
        assert "memory" in status.loaded
        assert status.backends == {"memory": "embedded"}
        assert "memory-engine__add_memory" in await rt.list_tools()


async def test_a_memory_engine_url_selects_the_remote_backend(tmp_path: Path) -> None:
    config = {
        "SQLITE_DATABASE_PATH": str(tmp_path),
        "MEMORY_MCP_URL": "http://127.0.0.1:9/mcp/",
        "MEMORY_ENGINE_URL": "http://127.0.0.1:9",
    }
    async with await create_test_runtime(plugins=[MemoryPlugin()], config=config) as rt:
        assert rt.status().backends == {"memory": "remote"}
    assert not (tmp_path / MEMORY_DATABASE_NAME).exists()


def ixo_env(tmp_path: Path) -> dict[str, str]:
    """An IXO-mode environment for the core runtime alone (nothing here is contacted)."""
    names = (
        "ORACLE_NAME MATRIX_BASE_URL MATRIX_RECOVERY_PHRASE MATRIX_ORACLE_ADMIN_USER_ID "
        "MATRIX_ORACLE_ADMIN_PASSWORD MATRIX_ORACLE_ADMIN_ACCESS_TOKEN MATRIX_ACCOUNT_ROOM_ID "
        "MATRIX_VALUE_PIN BLOCKSYNC_GRAPHQL_URL ORACLE_DID SECP_MNEMONIC RPC_URL"
    )
    env = dict.fromkeys(names.split(), "x")
    env.update(
        {
            "ORACLE_BACKEND": "ixo",
            "NETWORK": "devnet",
            "SQLITE_DATABASE_PATH": str(tmp_path),
            "ORACLE_ENTITY_DID": "did:ixo:entity:forced",
        }
    )
    return env


async def test_a_remote_backend_needs_both_urls(tmp_path: Path) -> None:
    with pytest.raises(EnvValidationError) as failed:
        await create_test_runtime(
            plugins=[MemoryPlugin()], config={"MEMORY_MCP_URL": "ftp://engine.test/mcp"}
        )
    message = str(failed.value)
    assert "'MEMORY_MCP_URL': Value error, must be an http:// or https:// URL" in message
    with pytest.raises(EnvValidationError, match="MEMORY_ENGINE_URL': Value error, required"):
        await create_test_runtime(
            plugins=[MemoryPlugin()], config={"MEMORY_MCP_URL": "https://engine.test/mcp"}
        )


async def test_a_store_failure_is_an_error_object_not_an_exception(
    embedded_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    memory = MemoryPlugin(semantic=False)
    async with embedded_runtime(memory, user=ADA) as rt:
        running = memory._running
        assert running is not None
        assert running.store is not None
        running.store.close()  # the database goes away under the plugin
        result = data(
            await rt.invoke_tool("memory-engine__add_memory", {"name": "x", "content": "secret"})
        )
    assert result == {
        "ok": False,
        "error": "The memory store failed (ProgrammingError); try again later.",
    }
    assert "memory tool add_memory failed: ProgrammingError" in caplog.text
    assert "secret" not in caplog.text


async def test_the_tool_policys_data_scope_narrows_every_search(
    embedded_runtime: RuntimeFactory,
) -> None:
    oracle_only = json.dumps({"dataScopes": {"memory": {"knowledge_level": "oracle"}}})
    query = {"query": "Lisbon", "knowledge_level": "both"}
    async with embedded_runtime(user=ADA) as rt:
        await rt.invoke_tool(
            "memory-engine__add_memory", {"name": "Home", "content": "I live in Lisbon."}
        )
        unscoped = data(await rt.invoke_tool("memory-engine__search_memory_engine", query))
    async with embedded_runtime(user=ADA, config={"ORACLE_TOOL_POLICY": oracle_only}) as rt:
        scoped = data(await rt.invoke_tool("memory-engine__search_memory_engine", query))

    assert [f["fact"] for f in unscoped["facts"]] == ["I live in Lisbon."]
    # The scope reads the oracle's knowledge only, whatever the model asked for.
    assert scoped["facts"] == []
