"""Tests of the per-user checkpointers (CORE-54, 63)."""

from __future__ import annotations

import asyncio
import operator
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    InMemoryCheckpointers,
    MainAgentHooks,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    PrimedCheckpointer,
    RuntimeContext,
    SessionInfo,
    SqliteCheckpointers,
    TurnRequest,
    UserInfo,
    create_runtime,
    plugin_tool,
)
from oracle_core._checkpoint import read_thread_state, user_database_name
from oracle_core.testing import ScriptedChatModel, TestRuntime, call_tool, create_test_runtime

# --- fixtures -------------------------------------------------------------------------

ALICE = "did:ixo:ixo1alice"
BOB = "did:ixo:ixo1bob"
THREAD: RunnableConfig = {"configurable": {"thread_id": "test-thread"}}


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WeatherPlugin(OraclePlugin):
    name = "weather"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Weather",
        summary="Forecasts.",
        when_to_use=["forecast questions"],
        visibility="on-demand",
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="get_forecast", description="Today's forecast.", args_schema=NoArgs)
        def forecast(args: NoArgs, rt_ctx: RuntimeContext[Any]) -> str:
            return "sunny"

        return [forecast]


@pytest.fixture
async def sqlite_checkpointers(tmp_path: Path) -> AsyncIterator[SqliteCheckpointers]:
    savers = SqliteCheckpointers(tmp_path / "checkpoints")
    yield savers
    await savers.aclose()


async def runtime_on(
    checkpointers: Any, model: ScriptedChatModel, user: UserInfo | None = None
) -> TestRuntime:
    return await create_test_runtime(
        plugins=[WeatherPlugin()],
        model=model,
        user=user,
        hooks=MainAgentHooks(checkpointer_for_user=checkpointers),
    )


def sqlite_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.sqlite"))


def journal_mode(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        row = conn.execute("PRAGMA journal_mode").fetchone()
    conn.close()
    return str(row[0])


# --- database names -------------------------------------------------------------------


def test_database_name_is_a_readable_prefix_plus_a_hash() -> None:
    name = user_database_name("did:ixo:ixo1alice")

    assert re.fullmatch(r"did_ixo_ixo1alice-[0-9a-f]{12}\.sqlite", name)


def test_dids_that_sanitise_alike_get_different_names() -> None:
    first = user_database_name("did:ixo:a/b")
    second = user_database_name("did:ixo:a?b")

    assert first.split("-")[0] == second.split("-")[0] == "did_ixo_a_b"
    assert first != second


def test_database_name_is_stable_and_bounded() -> None:
    long_did = "did:key:" + "z" * 500

    name = user_database_name(long_did)

    assert name == user_database_name(long_did)
    assert len(name) == 80 + len("-") + 12 + len(".sqlite")
    assert "/" not in user_database_name("did:web:../../etc/passwd")


def test_database_name_needs_a_did() -> None:
    with pytest.raises(ValueError, match="DID"):
        user_database_name("")


# --- SqliteCheckpointers --------------------------------------------------------------


async def test_one_database_per_user(sqlite_checkpointers: SqliteCheckpointers) -> None:
    alice = await sqlite_checkpointers(ALICE)
    bob = await sqlite_checkpointers(BOB)

    alice_path = sqlite_checkpointers.path_for(ALICE)
    bob_path = sqlite_checkpointers.path_for(BOB)
    assert alice is not bob
    assert alice_path != bob_path
    assert alice_path.parent == bob_path.parent == sqlite_checkpointers.base_path
    assert alice_path.name == user_database_name(ALICE)
    assert alice_path.is_file()
    assert bob_path.is_file()
    assert sorted(p.name for p in sqlite_checkpointers.base_path.glob("*.sqlite")) == sorted(
        [alice_path.name, bob_path.name]
    )


async def test_databases_use_wal_journal_mode(sqlite_checkpointers: SqliteCheckpointers) -> None:
    await sqlite_checkpointers(ALICE)

    assert journal_mode(sqlite_checkpointers.path_for(ALICE)) == "wal"


async def test_savers_are_cached_per_user(sqlite_checkpointers: SqliteCheckpointers) -> None:
    first = await sqlite_checkpointers(ALICE)
    second = await sqlite_checkpointers(ALICE)
    concurrent = await asyncio.gather(*(sqlite_checkpointers(BOB) for _ in range(5)))

    assert first is second
    assert all(saver is concurrent[0] for saver in concurrent)


async def test_aclose_closes_connections_and_later_calls_reopen(tmp_path: Path) -> None:
    savers = SqliteCheckpointers(tmp_path)
    first = await savers(ALICE)

    await savers.aclose()
    reopened = await savers(ALICE)
    try:
        assert reopened is not first
        assert isinstance(first, AsyncSqliteSaver)
        with pytest.raises(ValueError, match="no active connection"):
            await first.conn.execute("SELECT 1")
        assert await reopened.aget_tuple(THREAD) is None
    finally:
        await savers.aclose()


async def test_base_directory_is_created(tmp_path: Path) -> None:
    savers = SqliteCheckpointers(tmp_path / "a" / "b")
    try:
        await savers(ALICE)
    finally:
        await savers.aclose()

    assert (tmp_path / "a" / "b" / user_database_name(ALICE)).is_file()


async def test_checkpoints_survive_closing_and_reopening(tmp_path: Path) -> None:
    base = tmp_path / "checkpoints"
    first_savers = SqliteCheckpointers(base)
    model = ScriptedChatModel(
        [call_tool("load_capability", {"names": ["weather"]}), "Weather loaded."]
    )
    try:
        async with await runtime_on(first_savers, model) as runtime:
            await runtime.run_turn("load the weather")
            user_did = runtime.user.did
    finally:
        await first_savers.aclose()

    second_savers = SqliteCheckpointers(base)
    try:
        saver = await second_savers(user_did)
        values = await read_thread_state(saver, "test-thread")
        assert values["loaded_plugins"] == ["weather"]
        assert isinstance(values["messages"][0], HumanMessage)
        assert values["messages"][0].text == "load the weather"
        assert values["messages"][-1].text == "Weather loaded."

        # A new runtime on the reopened databases continues the thread.
        strict = ScriptedChatModel([call_tool("get_forecast", {}), "Sunny."], strict=True)
        async with await runtime_on(second_savers, strict) as runtime:
            result = await runtime.run_turn("and the forecast?")
    finally:
        await second_savers.aclose()

    assert "get_forecast" in strict.calls[0].tool_names
    # The model sees the previous turn (after the system message) before the new one.
    seen = [m.text for m in strict.calls[0].conversation]
    assert seen[0] == "load the weather"
    assert seen[-2:] == ["Weather loaded.", "and the forecast?"]
    assert result.text == "Sunny."
    assert result.state["loaded_plugins"] == ["weather"]


async def test_threads_of_different_users_are_isolated(
    sqlite_checkpointers: SqliteCheckpointers,
) -> None:
    alice_model = ScriptedChatModel(["Hi Alice."])
    bob_model = ScriptedChatModel(["Hi Bob."])

    async with await runtime_on(sqlite_checkpointers, alice_model, UserInfo(did=ALICE)) as rt:
        await rt.run_turn("I am Alice")
    async with await runtime_on(sqlite_checkpointers, bob_model, UserInfo(did=BOB)) as rt:
        result = await rt.run_turn("I am Bob")

    # Same thread id, different users: Bob's model sees only his own message.
    assert [m.text for m in bob_model.calls[0].conversation] == ["I am Bob"]
    assert [m.text for m in result.state["messages"]] == ["I am Bob", "Hi Bob."]
    alice_saver = await sqlite_checkpointers(ALICE)
    alice_state = await read_thread_state(alice_saver, "test-thread")
    assert [m.text for m in alice_state["messages"]] == ["I am Alice", "Hi Alice."]


# --- reading threads: messages stored once --------------------------------------------


async def test_checkpoints_do_not_repeat_the_message_list(
    sqlite_checkpointers: SqliteCheckpointers,
) -> None:
    model = ScriptedChatModel(
        [call_tool("load_capability", {"names": ["weather"]}), "Loaded.", "One.", "Two."]
    )
    async with await runtime_on(sqlite_checkpointers, model, UserInfo(did=ALICE)) as runtime:
        for text in ("load the weather", "first", "second"):
            await runtime.run_turn(text)

    saver = await sqlite_checkpointers(ALICE)
    stored = [found.checkpoint["channel_values"] async for found in saver.alist(THREAD)]
    assert len(stored) > 3
    # Every checkpoint stores its step's new messages as writes, none the whole list.
    assert all("messages" not in values for values in stored)
    state = await read_thread_state(saver, "test-thread")
    assert [m.text for m in state["messages"]][-4:] == ["first", "One.", "second", "Two."]
    assert len(state["messages"]) == 8
    assert len({m.id for m in state["messages"]}) == 8
    assert state["loaded_plugins"] == ["weather"]


async def test_read_thread_state_of_an_unknown_thread_is_empty(
    sqlite_checkpointers: SqliteCheckpointers,
) -> None:
    saver = await sqlite_checkpointers(ALICE)

    assert await read_thread_state(saver, "never-used") == {}


async def test_threads_stored_with_whole_message_lists_carry_on(
    sqlite_checkpointers: SqliteCheckpointers,
) -> None:
    from langchain.agents import create_agent

    saver = await sqlite_checkpointers(ALICE)
    # A thread as LangChain's own AgentState stores it: the whole list in every checkpoint.
    plain = create_agent(ScriptedChatModel(["Hello."]), [], checkpointer=saver)
    await plain.ainvoke({"messages": [HumanMessage("hi")]}, THREAD)
    before = await saver.aget_tuple(THREAD)
    assert before is not None
    assert [m.text for m in before.checkpoint["channel_values"]["messages"]] == ["hi", "Hello."]

    model = ScriptedChatModel(["Still here."], strict=True)
    async with await runtime_on(sqlite_checkpointers, model, UserInfo(did=ALICE)) as runtime:
        result = await runtime.run_turn("still there?")
        history = await runtime.runtime.thread_messages(ALICE, "test-thread")

    assert [m.text for m in model.calls[0].conversation] == ["hi", "Hello.", "still there?"]
    expected = ["hi", "Hello.", "still there?", "Still here."]
    assert [m.text for m in result.state["messages"]] == expected
    assert [m.text for m in history] == expected
    after = await saver.aget_tuple(THREAD)
    assert after is not None
    assert "messages" not in after.checkpoint["channel_values"]


# --- InMemoryCheckpointers ------------------------------------------------------------


async def test_in_memory_savers_are_per_user_and_cached() -> None:
    savers = InMemoryCheckpointers()

    alice = await savers(ALICE)

    assert await savers(ALICE) is alice
    assert await savers(BOB) is not alice
    with pytest.raises(ValueError, match="DID"):
        await savers("")
    await savers.aclose()
    assert await savers(ALICE) is not alice


async def test_test_runtime_default_checkpointer_keeps_threads() -> None:
    model = ScriptedChatModel(["first", "second"])
    async with await create_test_runtime(plugins=[WeatherPlugin()], model=model) as runtime:
        await runtime.run_turn("one")
        result = await runtime.run_turn("two")

    assert [m.text for m in result.state["messages"]] == ["one", "first", "two", "second"]
    assert isinstance(result.state["messages"][1], AIMessage)


# --- the local backend default (CORE-54) ----------------------------------------------


async def test_local_runtime_defaults_to_per_user_sqlite(tmp_path: Path) -> None:
    model = ScriptedChatModel(["Stored."])
    env = {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "unused",
        "SQLITE_DATABASE_PATH": str(tmp_path),
    }
    runtime = await create_runtime(
        {"name": "Local Oracle"},
        plugins=[WeatherPlugin()],
        discover_entry_points=False,
        env=env,
        hooks=MainAgentHooks(resolve_model=lambda role, **params: model),
    )
    async with runtime:
        await runtime.run_turn(
            TurnRequest(user=UserInfo(did=ALICE), session=SessionInfo(id="t-1"), message="hi")
        )

    databases = sqlite_files(tmp_path)
    assert [p.name for p in databases] == [user_database_name(ALICE)]
    reopened = SqliteCheckpointers(databases[0].parent)
    try:
        saver = await reopened(ALICE)
        state = await read_thread_state(saver, "t-1")
    finally:
        await reopened.aclose()
    assert [m.text for m in state["messages"]] == ["hi", "Stored."]


# --- one read of the thread per turn (PrimedCheckpointer) -----------------------------


class CountingReads:
    """Counts the thread loads that reach a saver (its latest-checkpoint reads)."""

    def __init__(self, saver: Any) -> None:
        self.latest = 0
        self.histories = 0
        get_tuple, get_history = saver.aget_tuple, saver.aget_delta_channel_history

        async def aget_tuple(config: RunnableConfig) -> Any:
            if not config["configurable"].get("checkpoint_id"):
                self.latest += 1
            return await get_tuple(config)

        async def aget_delta_channel_history(**kwargs: Any) -> Any:
            self.histories += 1
            return await get_history(**kwargs)

        saver.aget_tuple = aget_tuple
        saver.aget_delta_channel_history = aget_delta_channel_history


def turn(runtime: TestRuntime, text: str, thread: str = "test-thread") -> TurnRequest:
    return TurnRequest(user=runtime.user, session=SessionInfo(id=thread), message=text)


@pytest.fixture(params=["sqlite", "memory"])
async def checkpointers(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    savers = SqliteCheckpointers(tmp_path) if request.param == "sqlite" else InMemoryCheckpointers()
    yield savers
    await savers.aclose()


async def test_a_turn_loads_its_thread_once(checkpointers: Any) -> None:
    model = ScriptedChatModel(["first", "second"])
    async with await runtime_on(checkpointers, model) as runtime:
        await runtime.runtime.run_turn(turn(runtime, "one"))
        reads = CountingReads(await checkpointers(runtime.user.did))

        result = await runtime.runtime.run_turn(turn(runtime, "two"))

    assert [m.text for m in result["messages"]] == ["one", "first", "two", "second"]
    # The build read the thread (checkpoint and message history); the agent's own load
    # was answered from that read.
    assert (reads.latest, reads.histories) == (1, 1)


async def test_a_new_thread_is_not_read_twice_either(checkpointers: Any) -> None:
    model = ScriptedChatModel(["hello"])
    async with await runtime_on(checkpointers, model) as runtime:
        reads = CountingReads(await checkpointers(runtime.user.did))

        result = await runtime.runtime.run_turn(turn(runtime, "hi", thread="fresh"))

    assert [m.text for m in result["messages"]] == ["hi", "hello"]
    assert (reads.latest, reads.histories) == (1, 0)


async def test_a_turn_written_between_build_and_run_is_not_lost(checkpointers: Any) -> None:
    """The agent's load is answered from the build's read only if the thread has not moved."""
    model = ScriptedChatModel(["first", "between", "last"])
    async with await runtime_on(checkpointers, model) as runtime:
        await runtime.runtime.run_turn(turn(runtime, "one"))
        built = await runtime.runtime.build_agent(turn(runtime, "three"))
        await runtime.runtime.run_turn(turn(runtime, "two"))

        result = await built.agent.ainvoke(built.input, config=built.config, context=built.context)

    assert [m.text for m in result["messages"]] == [
        "one",
        "first",
        "two",
        "between",
        "three",
        "last",
    ]


async def test_pending_writes_added_after_the_build_are_seen(tmp_path: Path) -> None:
    """Same checkpoint, more writes on it (a run that stopped mid-step): not served stale."""
    savers = SqliteCheckpointers(tmp_path)
    model = ScriptedChatModel(["first", "second"])
    try:
        async with await runtime_on(savers, model) as runtime:
            await runtime.runtime.run_turn(turn(runtime, "one"))
            saver = await savers(runtime.user.did)
            primed = PrimedCheckpointer(saver)
            latest = await primed.aget_tuple(THREAD)
            assert latest is not None
            await saver.aput_writes(latest.config, [("note", "written later")], "task-1")

            again = await primed.aget_tuple(THREAD)
    finally:
        await savers.aclose()

    assert again is not None
    assert again.checkpoint["id"] == latest.checkpoint["id"]
    assert [w[1:] for w in again.pending_writes or []] == [("note", "written later")]


async def test_savers_it_cannot_check_are_passed_through() -> None:
    """A saver with no cheap way to tell whether a thread moved is never answered for."""
    from langgraph.checkpoint.memory import InMemorySaver

    # A saver of a kind it does not know: a forwarding one (itself) over a memory saver.
    inner = PrimedCheckpointer(InMemorySaver())
    reads = CountingReads(inner)
    model = ScriptedChatModel(["first", "second"])
    async with await runtime_on(lambda did: _returning(inner), model) as runtime:
        await runtime.runtime.run_turn(turn(runtime, "one"))
        reads.latest = 0
        result = await runtime.runtime.run_turn(turn(runtime, "two"))

    assert [m.text for m in result["messages"]] == ["one", "first", "two", "second"]
    assert reads.latest == 2


async def _returning(saver: Any) -> Any:
    return saver


class Steps(TypedDict):
    done: Annotated[list[str], operator.add]


async def test_a_resumed_run_keeps_the_writes_of_tasks_that_finished(checkpointers: Any) -> None:
    """A read that applies pending writes (``aget_state``) leaves the served copy intact."""
    failures = [RuntimeError("b failed once")]

    def a(state: Steps) -> dict[str, list[str]]:
        return {"done": ["a"]}

    def b(state: Steps) -> dict[str, list[str]]:
        if failures:
            raise failures.pop()
        return {"done": ["b"]}

    graph = StateGraph(Steps)
    graph.add_node("a", a)
    graph.add_node("b", b)
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    saver = await checkpointers(ALICE)
    with pytest.raises(RuntimeError, match="b failed once"):
        await graph.compile(checkpointer=saver).ainvoke({"done": ["x"]}, THREAD)
    primed = PrimedCheckpointer(saver)
    agent = graph.compile(checkpointer=primed)

    before = await agent.aget_state(THREAD)  # the build's read: a's write is pending
    resumed = await agent.ainvoke(None, THREAD)

    assert before.values["done"] == ["x", "a"]
    assert sorted(resumed["done"]) == ["a", "b", "x"]
