"""Tests of the tool policy (plugins spec §20.1): what it decides, where it comes from, and
that a denied tool is neither bound nor run, in the main agent and in sub-agents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    CoreEnv,
    EnvValidationError,
    OracleConfigError,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    ToolPolicy,
    ToolVerdict,
    parse_tool_policy,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime

RUNS: list[str] = []


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str


def recorded(name: str, effect: Any = "read") -> PluginTool:
    @plugin_tool(name=name, description=f"The {name} tool.", args_schema=Query, effect=effect)
    def handler(args: Query, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS.append(name)
        return json.dumps({"tool": name, "scope": dict(rt_ctx.data_scope)})

    return handler


class NotesPlugin(OraclePlugin):
    name = "notes"
    version = "1"
    manifest = PluginManifest(
        title="Notes", summary="Keeps notes.", when_to_use=["notes"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            recorded("notes_search"),
            recorded("notes_write", "write"),
            recorded("notes_clear", "destructive"),
        ]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [
            PluginSubAgent(
                name="archivist",
                description="Archives notes.",
                system_prompt="You archive.",
                tools=[recorded("archive_search"), recorded("archive_purge", "destructive")],
            ),
            PluginSubAgent(
                name="shredder", description="Shreds.", system_prompt="You shred.", tools=[]
            ),
        ]


def policy(**fields: Any) -> dict[str, Any]:
    return {"name": "Policy Oracle", "toolPolicy": fields}


# --- what the policy decides ------------------------------------------------------------


def test_deny_wins_over_allow_and_names_its_rule() -> None:
    rules = ToolPolicy(allow=("notes_*",), deny=("notes_clear",))

    assert rules.verdict("notes_search") == ToolVerdict("allow")
    assert rules.verdict("notes_clear") == ToolVerdict("deny", "deny 'notes_clear'")
    assert rules.verdict("weather_now") == ToolVerdict("deny", "not in allow")


def test_destructive_tools_need_approval_unless_turned_off() -> None:
    rules = ToolPolicy(approval_required=("notes_write",))

    assert rules.verdict("notes_clear", "destructive") == ToolVerdict(
        "approve", "effect destructive"
    )
    assert rules.verdict("notes_write", "write") == ToolVerdict(
        "approve", "approval_required 'notes_write'"
    )
    assert rules.verdict("notes_search", "read") == ToolVerdict("allow")
    relaxed = ToolPolicy(approve_destructive=False)
    assert relaxed.verdict("notes_clear", "destructive") == ToolVerdict("allow")


def test_globs_are_shell_style_and_case_sensitive() -> None:
    rules = ToolPolicy(deny=("memory-engine__*", "vfs_[dr]*", "Secret?"))

    assert rules.denies("memory-engine__clear")
    assert rules.denies("vfs_delete")
    assert rules.denies("vfs_rename")
    assert rules.denies("vfs_read_file")
    assert not rules.denies("vfs_write")
    assert rules.denies("Secret1")
    assert not rules.denies("secret1")


def test_policy_text_is_json_or_toml() -> None:
    from_json = parse_tool_policy('{"deny": ["a*"], "approvalRequired": ["b"]}')
    from_toml = parse_tool_policy('deny = ["a*"]\napproval_required = ["b"]\n')

    assert from_json == from_toml == ToolPolicy(deny=("a*",), approval_required=("b",))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"deny": ["a*"', "not valid JSON"),
        ("deny = [", "neither a JSON object nor valid TOML"),
        ('{"deny": "a*"}', "deny: Input should be a valid tuple"),
        ('{"deny": [""]}', "a pattern must not be empty"),
        ('{"refuse": ["a"]}', "refuse: Extra inputs are not permitted"),
        ('{"approvalTtlSeconds": 0}', "approvalTtlSeconds: Input should be greater than 0"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_tool_policy(text)


def test_a_bad_policy_variable_stops_the_boot_naming_it() -> None:
    with pytest.raises(EnvValidationError) as caught:
        CoreEnv.from_env({"ORACLE_BACKEND": "local", "ORACLE_TOOL_POLICY": '{"deny": 3}'})

    assert caught.value.code == "boot.config.invalid"
    assert "ORACLE_TOOL_POLICY" in str(caught.value)


async def test_a_bad_host_policy_stops_the_boot() -> None:
    with pytest.raises(OracleConfigError) as caught:
        await create_test_runtime(plugins=[], oracle=policy(deny=[""]))

    assert "toolPolicy" in str(caught.value) or "tool_policy" in str(caught.value)


async def test_the_variable_replaces_the_host_policy() -> None:
    async with await create_test_runtime(
        plugins=[NotesPlugin()],
        oracle=policy(deny=["notes_search"]),
        config={"ORACLE_TOOL_POLICY": 'deny = ["notes_write"]'},
    ) as rt:
        tools = await rt.list_tools()

    assert "notes_search" in tools
    assert "notes_write" not in tools


# --- enforcement -------------------------------------------------------------------------


async def test_denied_tools_and_sub_agents_are_never_bound() -> None:
    async with await create_test_runtime(
        plugins=[NotesPlugin()],
        oracle=policy(deny=["notes_clear", "call_shredder_agent"]),
    ) as rt:
        built = await rt.build("hi")
        report = rt.runtime.tool_policy_report()

    names = [t.name for t in built.tools]
    assert "notes_search" in names
    assert "call_archivist_agent" in names
    assert "notes_clear" not in names
    assert "call_shredder_agent" not in names
    assert "notes_clear" not in built.tool_infos
    assert report["denied"] == {
        "notes_clear": "deny 'notes_clear'",
        "call_shredder_agent": "deny 'call_shredder_agent'",
    }
    # Every destructive tool needs approval by default; denied ones are only denied.
    assert report["approval_required"] == {}
    assert report["rules"]["deny"] == ["notes_clear", "call_shredder_agent"]


async def test_a_call_to_a_denied_tool_is_refused_and_never_runs() -> None:
    model = ScriptedChatModel(
        # The model calls the tool although it was never offered (not strict).
        [call_tool("notes_clear", {"query": "all"}, id="c1"), "It is disabled."]
    )
    async with await create_test_runtime(
        plugins=[NotesPlugin()], model=model, oracle=policy(deny=["notes_c*"])
    ) as rt:
        RUNS.clear()
        result = await rt.run_turn("Clear my notes")

    [refusal] = result.tool_messages("notes_clear")
    assert refusal.status == "error"
    assert "not allowed by this oracle's tool policy (deny 'notes_c*')" in refusal.text
    assert RUNS == []
    assert "notes_clear" not in model.calls[0].tool_names


async def test_an_allow_list_hides_every_other_tool_but_the_meta_tools() -> None:
    model = ScriptedChatModel(["hello"])
    async with await create_test_runtime(
        plugins=[NotesPlugin()], model=model, oracle=policy(allow=["notes_search"])
    ) as rt:
        await rt.run_turn("hi")

    visible = model.calls[0].tool_names
    assert "notes_search" in visible
    assert "notes_write" not in visible
    assert "call_archivist_agent" not in visible
    assert "list_capabilities" in visible


async def test_the_policy_holds_inside_a_sub_agent() -> None:
    sub_model = ScriptedChatModel(
        [
            call_tool("archive_search", {"query": "old"}, id="s1"),
            call_tool("archive_purge", {"query": "old"}, id="s2"),
            "Searched; purging is disabled.",
        ],
    )
    model = ScriptedChatModel(
        [call_tool("call_archivist_agent", {"task": "Archive old notes."}, id="p1"), "Done."],
        strict=True,
    )
    async with await create_test_runtime(
        plugins=[NotesPlugin()],
        model=model,
        models={"subagent": sub_model},
        oracle=policy(deny=["archive_purge"]),
    ) as rt:
        RUNS.clear()
        result = await rt.run_turn("Archive my old notes")

    assert sub_model.calls[0].tool_names == ("archive_search",)
    assert RUNS == ["archive_search"]
    refusal = sub_model.calls[2].messages[-1]
    assert "not allowed by this oracle's tool policy (deny 'archive_purge')" in refusal.text
    [answer] = result.tool_messages("call_archivist_agent")
    assert answer.text == "Searched; purging is disabled."


async def test_a_sub_agent_never_runs_a_call_that_needs_approval() -> None:
    sub_model = ScriptedChatModel(
        [call_tool("archive_purge", {"query": "old"}, id="s1"), "I could not purge."],
    )
    model = ScriptedChatModel(
        [call_tool("call_archivist_agent", {"task": "Purge old notes."}, id="p1"), "Done."],
        strict=True,
    )
    async with await create_test_runtime(
        plugins=[NotesPlugin()], model=model, models={"subagent": sub_model}, oracle=policy()
    ) as rt:
        RUNS.clear()
        result = await rt.run_turn("Purge my old notes")

    # Bound (it is allowed) but refused: a sub-agent cannot pause the turn for approval.
    assert "archive_purge" in sub_model.calls[0].tool_names
    assert RUNS == []
    refusal = sub_model.calls[1].messages[-1]
    assert "needs the user's approval (effect destructive)" in refusal.text
    assert result.approvals == []
    [answer] = result.tool_messages("call_archivist_agent")
    assert answer.text == "I could not purge."


async def test_each_plugin_reads_only_its_own_data_scope() -> None:
    model = ScriptedChatModel(
        [call_tool("notes_search", {"query": "x"}, id="c1"), "ok"], strict=True
    )
    scopes = {"notes": {"knowledge_level": "private"}, "other": {"root": "/tmp"}}
    async with await create_test_runtime(
        plugins=[NotesPlugin()], model=model, oracle=policy(data_scopes=scopes)
    ) as rt:
        result = await rt.run_turn("search")

    [answer] = result.tool_messages("notes_search")
    assert json.loads(answer.text)["scope"] == {"knowledge_level": "private"}
