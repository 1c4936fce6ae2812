"""Tests of the human approval round trip in core (plugins spec §20.2): a call that needs
approval pauses the turn, and the answer the thread resumes with decides what runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from oracle_core import (
    ApprovalAnswer,
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    args_hash,
    classify_reply,
    plugin_tool,
)
from oracle_core.testing import ScriptedChatModel, call_tool, call_tools, create_test_runtime

RUNS: list[tuple[str, dict[str, Any]]] = []


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    token: str = ""


def hide_token(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "token": "***"} if args.get("token") else args


def recorded(name: str, effect: Any) -> PluginTool:
    @plugin_tool(
        name=name,
        description=f"The {name} tool.",
        args_schema=Target,
        effect=effect,
        redact_args=hide_token,
    )
    def handler(args: Target, rt_ctx: RuntimeContext[Any]) -> str:
        RUNS.append((name, args.model_dump()))
        return f"{name} done for {args.target}"

    return handler


class FilesPlugin(OraclePlugin):
    name = "files"
    version = "1"
    manifest = PluginManifest(
        title="Files", summary="Keeps files.", when_to_use=["files"], visibility="always"
    )

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            recorded("files_read", "read"),
            recorded("files_share", "write"),
            recorded("files_delete", "destructive"),
        ]


def oracle(**policy: Any) -> dict[str, Any]:
    return {"name": "Approval Oracle", "toolPolicy": policy}


async def paused(model: ScriptedChatModel, **policy: Any) -> Any:
    rt = await create_test_runtime(plugins=[FilesPlugin()], model=model, oracle=oracle(**policy))
    RUNS.clear()
    first = await rt.run_turn("Delete report.txt")
    return rt, first


# --- pausing -------------------------------------------------------------------------------


async def test_a_destructive_call_pauses_the_turn_and_does_not_run() -> None:
    model = ScriptedChatModel(
        [call_tool("files_delete", {"target": "report.txt", "token": "s3cret"}, id="c1"), "Done."]
    )
    rt, first = await paused(model)
    async with rt:
        assert RUNS == []
        assert len(model.calls) == 1  # the model was not called again
        [request] = first.approvals
        assert request.tool_name == "files_delete"
        assert request.tool_call_id == "c1"
        assert request.reason == "effect destructive"
        # Shown through the tool's redaction hook; the hash is of the real arguments.
        assert request.args == {"target": "report.txt", "token": "***"}
        assert request.args_hash == args_hash({"target": "report.txt", "token": "s3cret"})
        assert request.expires_at - request.requested_at == timedelta(seconds=900)
        assert not request.expired()
        assert first.tool_messages() == []


async def test_approval_required_globs_pause_write_tools_and_read_tools_run() -> None:
    model = ScriptedChatModel(
        [
            call_tool("files_read", {"target": "a"}, id="r1"),
            call_tool("files_share", {"target": "a"}, id="s1"),
            "Shared.",
        ]
    )
    rt, first = await paused(model, approvalRequired=["files_sh*"], approvalTtlSeconds=60)
    async with rt:
        assert RUNS == [("files_read", {"target": "a", "token": ""})]
        [request] = first.approvals
        assert request.tool_name == "files_share"
        assert request.reason == "approval_required 'files_sh*'"
        assert request.expires_at - request.requested_at == timedelta(seconds=60)


async def test_no_approval_when_the_policy_turns_destructive_approval_off() -> None:
    model = ScriptedChatModel([call_tool("files_delete", {"target": "x"}, id="c1"), "Done."])
    rt, first = await paused(model, approveDestructive=False)
    async with rt:
        assert first.approvals == []
        assert RUNS == [("files_delete", {"target": "x", "token": ""})]
        assert first.text == "Done."


# --- resuming --------------------------------------------------------------------------------


async def test_an_approved_call_runs_once_with_the_real_arguments() -> None:
    model = ScriptedChatModel(
        [call_tool("files_delete", {"target": "r.txt", "token": "s3cret"}, id="c1"), "Deleted."]
    )
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        second = await rt.resume_turn({request.interrupt_id: "approved"})
        assert RUNS == [("files_delete", {"target": "r.txt", "token": "s3cret"})]
        [result] = second.tool_messages("files_delete")
        assert result.text == "files_delete done for r.txt"
        assert second.text == "Deleted."
        assert second.approvals == []


async def test_edited_arguments_run_instead_and_the_model_is_told() -> None:
    model = ScriptedChatModel([call_tool("files_delete", {"target": "all"}, id="c1"), "Deleted."])
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        second = await rt.resume_turn(
            {request.interrupt_id: {"decision": "approved", "editedArgs": {"target": "old"}}}
        )
        assert RUNS == [("files_delete", {"target": "old", "token": ""})]
        [result] = second.tool_messages("files_delete")
        assert "edited this call's arguments" in result.text
        assert result.text.endswith("files_delete done for old")


async def test_edited_arguments_the_tool_refuses_do_not_run() -> None:
    model = ScriptedChatModel([call_tool("files_delete", {"target": "a"}, id="c1"), "Sorry."])
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        second = await rt.resume_turn(
            {request.interrupt_id: {"decision": "approved", "editedArgs": {"bogus": 1}}}
        )
        assert RUNS == []
        [result] = second.tool_messages("files_delete")
        assert result.status == "error"


@pytest.mark.parametrize(
    ("decision", "why"),
    [("declined", "the user declined it"), ("expired", "not answered within 15 minutes")],
)
async def test_a_declined_or_expired_call_does_not_run_and_a_retry_is_refused(
    decision: str, why: str
) -> None:
    model = ScriptedChatModel(
        [
            call_tool("files_delete", {"target": "a"}, id="c1"),
            # The model tries again with the same call, then gives up.
            call_tool("files_delete", {"target": "a"}, id="c2"),
            "I did not delete it.",
        ]
    )
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        second = await rt.resume_turn({request.interrupt_id: decision})
        assert RUNS == []
        declined, retry = second.tool_messages("files_delete")
        assert declined.status == "error"
        assert declined.text.startswith("Declined by user: 'files_delete' was not run")
        assert why in declined.text
        # The retry is refused without asking again: the turn did not pause a second time.
        assert retry.status == "error"
        assert "declined 'files_delete' with exactly these arguments" in retry.text
        assert second.approvals == []
        assert second.text == "I did not delete it."


async def test_a_superseded_approval_answers_the_call_then_the_new_message() -> None:
    model = ScriptedChatModel(
        [call_tool("files_delete", {"target": "a"}, id="c1"), "Sure, here is the list."]
    )
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        second = await rt.resume_turn(
            {request.interrupt_id: {"decision": "superseded", "message": "List them instead"}}
        )
        assert RUNS == []
        kinds = [type(m).__name__ for m in second.state["messages"][-4:]]
        assert kinds == ["AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
        assert second.state["messages"][-2].text == "List them instead"
        # The model saw the refusal and the new message.
        seen = [m.text for m in model.calls[-1].messages]
        assert "List them instead" in seen
        assert any("the user sent a new message instead" in text for text in seen)


async def test_an_answer_that_is_not_a_decision_is_refused_and_leaves_it_pending() -> None:
    model = ScriptedChatModel([call_tool("files_delete", {"target": "a"}, id="c1"), "Deleted."])
    rt, first = await paused(model)
    async with rt:
        [request] = first.approvals
        with pytest.raises(ValidationError):
            await rt.resume_turn({request.interrupt_id: {"decision": "maybe"}})
        assert RUNS == []
        third = await rt.resume_turn({request.interrupt_id: "approved"})
        assert RUNS == [("files_delete", {"target": "a", "token": ""})]
        assert third.text == "Deleted."


async def test_two_paused_calls_are_answered_one_by_one() -> None:
    model = ScriptedChatModel(
        [
            call_tools(
                [("files_delete", {"target": "a"}, "c1"), ("files_delete", {"target": "b"}, "c2")]
            ),
            "Deleted a, kept b.",
        ]
    )
    rt, first = await paused(model)
    async with rt:
        assert [r.tool_call_id for r in first.approvals] == ["c1", "c2"]
        by_call = {r.tool_call_id: r.interrupt_id for r in first.approvals}
        pending = rt.runtime.pending_approvals
        assert await pending(rt.user.did, rt.session.id) == first.approvals
        second = await rt.resume_turn({by_call["c1"]: "approved"})
        assert [r.tool_call_id for r in second.approvals] == ["c2"]
        assert RUNS == [("files_delete", {"target": "a", "token": ""})]
        assert [r.tool_call_id for r in await pending(rt.user.did, rt.session.id)] == ["c2"]
        assert await pending(rt.user.did, "another-session") == []
        third = await rt.resume_turn({by_call["c2"]: "declined"})
        assert await pending(rt.user.did, rt.session.id) == []
        assert RUNS == [("files_delete", {"target": "a", "token": ""})]
        assert third.text == "Deleted a, kept b."
        results = {m.tool_call_id: m.status for m in third.state["messages"] if m.type == "tool"}
        assert results == {"c1": "success", "c2": "error"}


# --- the answer and the reply ---------------------------------------------------------------


def test_an_answer_reads_camel_or_snake_case_and_refuses_other_fields() -> None:
    answer = ApprovalAnswer.model_validate({"decision": "approved", "editedArgs": {"a": 1}})
    assert answer.edited_args == {"a": 1}
    with pytest.raises(ValidationError):
        ApprovalAnswer.model_validate({"decision": "approved", "extra": 1})


def test_the_hash_is_canonical() -> None:
    assert args_hash({"b": 1, "a": [1, 2]}) == args_hash({"a": [1, 2], "b": 1})
    assert args_hash({"a": 1}) != args_hash({"a": 2})
    assert args_hash({}).startswith("sha256:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("yes", "approved"),
        ("Yes please!", "approved"),
        ("ok, go ahead", "approved"),
        ("approve", "approved"),
        ("no", "declined"),
        ("No, cancel it.", "declined"),
        ("don't", "declined"),
        ("yes no", None),
        ("delete the other file instead", None),
        ("", None),
        ("yes " * 7, None),
    ],
)
def test_a_plain_yes_or_no_is_classified(text: str, expected: str | None) -> None:
    assert classify_reply(text) == expected


def test_a_request_knows_when_it_expired() -> None:
    from oracle_core import ApprovalRequest

    now = datetime.now(UTC)
    request = ApprovalRequest(
        interrupt_id="i",
        tool_call_id="c",
        tool_name="t",
        args={},
        args_hash=args_hash({}),
        reason="effect destructive",
        requested_at=now - timedelta(minutes=20),
        expires_at=now - timedelta(minutes=5),
    )
    assert request.expired()
    assert json.loads(json.dumps(request.to_value()))["expiresAt"] == request.expires_at.isoformat()
