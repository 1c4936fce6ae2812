"""A hosted sandbox: its tools passed through per request, with the user's invocation, the
skills invocation and, on runs only, the secrets; the write rules; sandbox_write_blob."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel

from oracle_core import LocalSecretsService, OraclePlugin, PluginTool, RuntimeContext
from oracle_core.testing import TestRuntime
from oracle_plugins.sandbox import SandboxFileError, SandboxFiles, SandboxPlugin
from oracle_plugins.sandbox._plugin import WriteBlobArgs
from oracle_plugins.sandbox.testing import SandboxDouble
from oracle_ucan import Ed25519Signer

from .conftest import SANDBOX_GRANT, SKILLS_GRANT, RuntimeFactory, minter_for

PASSED_THROUGH = [
    "sandbox_run",
    "sandbox_write_file",
    "load_skill",
    "read_skill",
    "artifact_get_presigned_url",
]


async def request_tools(rt: TestRuntime) -> tuple[dict[str, PluginTool], RuntimeContext[Any]]:
    """The sandbox's tools of one build, and the context its calls get."""
    built = await rt.build("hello")
    ctx = built.context.runtime_context
    assert ctx is not None
    bound = {t.name: t.plugin_tool for t in built.tools if hasattr(t, "plugin_tool")}
    return bound, ctx.for_plugin("sandbox")


async def call(tool: PluginTool, args: dict[str, Any] | BaseModel, ctx: RuntimeContext[Any]) -> Any:
    result = await tool.handler(args, ctx)
    return json.loads(result) if isinstance(result, str) else result


async def test_upstream_tools_pass_through_verbatim_without_the_operator_tools(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory
) -> None:
    async with remote_runtime() as rt:
        bound, _ = await request_tools(rt)
    assert [n for n in bound if n not in ("list_capabilities", "load_capability")] == [
        *PASSED_THROUGH,
        "sandbox_write_blob",
    ]
    assert "oracle_list" not in bound
    upstream = {t.name: t for t in await hosted.mcp.list_tools()}
    for name in PASSED_THROUGH:
        assert bound[name].args_schema == upstream[name].input_schema
        assert bound[name].description == upstream[name].description
    assert bound["sandbox_run"].effect == "write"
    assert bound["load_skill"].effect == "read"


async def test_the_operator_tools_are_bound_when_opted_in(remote_runtime: RuntimeFactory) -> None:
    plugin = SandboxPlugin(include_oracle_management_tools=True, reconnect_delay=0.01)
    async with remote_runtime(plugin) as rt:
        bound, _ = await request_tools(rt)
    assert "oracle_list" in bound


async def test_each_call_carries_the_users_invocation_for_the_sandbox(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    async with remote_runtime() as rt:
        bound, ctx = await request_tools(rt)
        result = await call(bound["sandbox_run"], {"code": "echo hello"}, ctx)
    assert result["output"] == "hello"
    (run,) = hosted.calls_of("sandbox_run")
    assert run.user == user_key.did()
    assert run.audience == hosted.did
    assert run.skills_invocation is None  # no skills registry in this oracle


async def test_secrets_travel_only_with_runs_read_once_per_request(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory
) -> None:
    config = {"ORACLE_SECRETS": "OPENAI_KEY=sk-oracle, EMPTY=,=orphan"}
    secrets = {"GITHUB_TOKEN": "ghp-user", "Multi_Line": "one\ntwo"}
    async with remote_runtime(secrets=secrets, config=config) as rt:
        bound, ctx = await request_tools(rt)
        await call(bound["sandbox_write_file"], {"path": "/workspace/data/a", "content": "x"}, ctx)
        await call(bound["sandbox_run"], {"code": "cat /workspace/data/a"}, ctx)
        # Secrets stored mid-request reach the next request's runs, not this one's.
        changed = dataclasses.replace(
            ctx,
            secrets=LocalSecretsService(
                values_by_user={rt.user.did: {**secrets, "LATE": "late-value"}}
            ).for_user(rt.user),
        )
        await call(bound["sandbox_run"], {"code": "ls"}, changed)
        later, _ = await request_tools(rt)
        await call(later["sandbox_run"], {"code": "ls"}, changed)
    write, first, second, third = hosted.calls
    assert write.tool == "sandbox_write_file"
    assert write.oracle_secrets == {}
    assert write.user_secrets == {}
    assert first.oracle_secrets == {"openai_key": "sk-oracle"}
    # Lower-cased names; a value that cannot be a header value is left out.
    assert first.user_secrets == {"github_token": "ghp-user"}
    assert second.user_secrets == first.user_secrets
    assert third.user_secrets == {"github_token": "ghp-user", "late": "late-value"}


async def test_the_skills_invocation_is_sent_when_the_oracle_has_a_registry(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory
) -> None:
    class SkillsConfig(BaseModel):
        SKILLS_CAPSULES_BASE_URL: str

    class StandInSkills(OraclePlugin):
        name = "skills"
        version = "0.0.1"
        config_schema = SkillsConfig
        manifest = {"title": "Skills", "summary": "Stand-in.", "visibility": "silent"}

    assert hosted.origin is not None
    async with remote_runtime(
        grants=[SANDBOX_GRANT, SKILLS_GRANT],
        config={"SKILLS_CAPSULES_BASE_URL": hosted.origin},
        extra_plugins=(StandInSkills(),),
    ) as rt:
        bound, ctx = await request_tools(rt)
        await call(bound["load_skill"], {"cid": "bafkunknown"}, ctx)
    (load,) = hosted.calls_of("load_skill")
    assert load.skills_invocation
    assert load.user_secrets == {}


async def test_a_failed_mint_leaves_the_header_out_and_the_401_is_the_tools_error(
    hosted: SandboxDouble,
    remote_runtime: RuntimeFactory,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    minter = minter_for(user_key, oracle_key, [SANDBOX_GRANT])
    async with remote_runtime(minter=minter) as rt:
        bound, ctx = await request_tools(rt)
        minter.minting = False
        result = await call(bound["sandbox_run"], {"code": "echo hi"}, ctx)
    assert result["ok"] is False
    assert "401" in result["error"]
    assert hosted.calls_of("sandbox_run") == []
    assert "missing invocation" in hosted.rejected


async def test_without_a_delegation_there_are_no_tools_and_the_sandbox_is_degraded(
    remote_runtime: RuntimeFactory,
) -> None:
    async with remote_runtime(grants=None) as rt:
        built = await rt.build("hello")
    assert "sandbox_run" not in built.tool_infos
    assert "Sandbox" in built.prompt.text


async def test_an_unreachable_sandbox_contributes_nothing_and_is_named_degraded() -> None:
    from oracle_core.testing import create_test_runtime

    plugin = SandboxPlugin(reconnect_attempts=1, reconnect_delay=0.01)
    runtime = await create_test_runtime(
        plugins=[plugin], config={"SANDBOX_MCP_URL": "http://127.0.0.1:9/mcp/"}
    )
    async with runtime as rt:
        built = await rt.build("hello")
    assert not [n for n in built.tool_infos if n.startswith("sandbox_")]
    assert "Sandbox" in built.prompt.text


async def test_sandbox_write_file_refuses_paths_outside_the_data_folder_locally(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory
) -> None:
    async with remote_runtime() as rt:
        bound, ctx = await request_tools(rt)
        write = bound["sandbox_write_file"]
        for path in ("/tmp/x", "/workspace/output/x", "/workspace/data/../etc/x", "relative"):
            refused = await call(write, {"path": path, "content": "x"}, ctx)
            assert refused["ok"] is False
            assert "/workspace/data/" in refused["error"] or "'..'" in refused["error"]
        written = await call(write, {"path": "/workspace/data/notes/a.md", "content": "# A"}, ctx)
    assert written["success"] is True
    assert [c.arguments["path"] for c in hosted.calls] == ["/workspace/data/notes/a.md"]


async def test_sandbox_write_blob_writes_the_stored_value_without_the_model_relaying_it(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    async with remote_runtime() as rt:
        bound, ctx = await request_tools(rt)
        store = ctx.blob_store
        assert store is not None
        value = "eyJhbGciOi" * 40
        blob = await store.put(user_did=user_key.did(), name="ucan_invocation", value=value)
        other = await store.put(user_did="did:key:someone-else", name="x", value="theirs")
        tool = bound["sandbox_write_blob"]
        ok = await call(tool, WriteBlobArgs(blobId=blob, path="/workspace/data/skill/tok"), ctx)
        bad_id = await call(tool, WriteBlobArgs(blobId="blob_xyz", path="/workspace/data/a"), ctx)
        bad_path = await call(tool, WriteBlobArgs(blobId=blob, path="/tmp/tok"), ctx)
        theirs = await call(tool, WriteBlobArgs(blobId=other, path="/workspace/data/b"), ctx)
    assert ok == {
        "success": True,
        "path": "/workspace/data/skill/tok",
        "bytesWritten": len(value),
        "blobName": "ucan_invocation",
    }
    assert (hosted.folder(user_key.did()) / "skill/tok").read_text() == value
    assert bad_id["success"] is False
    assert "blobId" in bad_id["error"]
    assert bad_path["success"] is False
    assert "/workspace/data/" in bad_path["error"]
    assert theirs["success"] is False
    assert "not found" in theirs["error"]
    assert [c.tool for c in hosted.calls] == ["sandbox_write_file"]


async def test_the_prompt_names_the_users_secrets_as_runs_see_them_never_the_values(
    remote_runtime: RuntimeFactory,
) -> None:
    async with remote_runtime(secrets={"github_token": "ghp-secret-value"}) as rt:
        built = await rt.build("hello")
    prompt = built.prompt.text
    assert "## Available User Secrets" in prompt
    assert "- _USER_SECRET_GITHUB_TOKEN" in prompt
    assert "ghp-secret-value" not in prompt


async def test_other_plugins_move_bytes_through_sandbox_files(
    hosted: SandboxDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    payload = bytes(range(256)) * 8
    async with remote_runtime() as rt:
        _, ctx = await request_tools(rt)
        files = ctx.shared.get("sandboxFiles") if ctx.shared is not None else None
        assert isinstance(files, SandboxFiles)
        written = await files.write("/workspace/data/in/blob.bin", payload)
        back = await files.read("/workspace/data/in/blob.bin", max_bytes=1 << 20)
        with pytest.raises(SandboxFileError, match="only under /workspace/data/"):
            await files.write("/workspace/tmp/x", b"x")
        with pytest.raises(SandboxFileError, match="quotes"):
            await files.read("/workspace/data/it's", max_bytes=10)
        with pytest.raises(SandboxFileError, match="larger than"):
            await files.read("/workspace/data/in/blob.bin", max_bytes=10)
    assert written == len(payload)
    assert back == payload
    assert (hosted.folder(user_key.did()) / "in/blob.bin").read_bytes() == payload
