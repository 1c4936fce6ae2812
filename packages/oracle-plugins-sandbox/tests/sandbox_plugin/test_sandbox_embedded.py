"""SANDBOX_BACKEND=embedded: the oracle starts the oracle-sandbox server beside itself and
points the plugin at it; runs are isolated by bubblewrap, one workspace per user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_core import OracleBootError, TurnRequest, UserInfo
from oracle_core.testing import create_test_runtime, validate_plugin
from oracle_plugins.sandbox import SandboxPlugin

from .conftest import embedded_env
from .test_sandbox_remote import call, request_tools

EMBEDDED_TOOLS = [
    "sandbox_run",
    "sandbox_write_file",
    "load_skill",
    "artifact_get_presigned_url",
    "sandbox_write_blob",
]


async def test_the_embedded_sandbox_passes_the_conformance_suite(sandbox_root: Path) -> None:
    await validate_plugin(SandboxPlugin(), config=embedded_env(sandbox_root), entry_point=True)


async def test_the_oracle_starts_the_sandbox_and_its_tools_run_code(sandbox_root: Path) -> None:
    plugin = SandboxPlugin()
    runtime = await create_test_runtime(plugins=[plugin], config=embedded_env(sandbox_root))
    async with runtime as rt:
        embedded = plugin.embedded
        assert embedded is not None
        assert embedded.url.startswith("http://127.0.0.1:")
        bound, ctx = await request_tools(rt)
        assert sorted(n for n in bound if n not in ("list_capabilities", "load_capability")) == (
            sorted(EMBEDDED_TOOLS)
        )
        ran = await call(bound["sandbox_run"], {"code": "echo $((6 * 7)); id -u"}, ctx)
        written = await call(
            bound["sandbox_write_file"],
            {"path": "/workspace/data/output/report.md", "content": "# Report\n"},
            ctx,
        )
        read = await call(bound["sandbox_run"], {"code": "cat /workspace/output/report.md"}, ctx)
        python = await call(
            bound["sandbox_run"], {"code": "print(sum(range(10)))", "language": "python"}, ctx
        )
    assert ran["exitCode"] == 0
    assert ran["stdout"].split() == ["42", "65534"]
    assert written == {"success": True, "path": "/workspace/data/output/report.md",
                       "bytesWritten": 9}  # fmt: skip
    assert read["stdout"] == "# Report\n"
    assert python["stdout"] == "45\n"
    # Stopped with the oracle.
    assert plugin.embedded is None


async def test_each_user_has_a_workspace_of_their_own(sandbox_root: Path) -> None:
    runtime = await create_test_runtime(
        plugins=[SandboxPlugin()], config=embedded_env(sandbox_root)
    )
    async with runtime as rt:
        bound, ctx = await request_tools(rt)
        await call(bound["sandbox_run"], {"code": "echo mine > /workspace/data/secret"}, ctx)
        other = await rt.runtime.build_agent(
            TurnRequest(user=UserInfo(did="did:key:z6MkOtherUser"), session=rt.session)
        )
        other_ctx = other.context.runtime_context
        assert other_ctx is not None
        theirs = {t.name: t.plugin_tool for t in other.tools if hasattr(t, "plugin_tool")}
        looked = await call(
            theirs["sandbox_run"],
            {"code": "ls /workspace/data; cat /workspace/data/secret"},
            other_ctx.for_plugin("sandbox"),
        )
    assert looked["exitCode"] != 0
    assert "mine" not in looked["stdout"]


async def test_an_artifact_link_serves_the_file_and_expires_to_unknown(sandbox_root: Path) -> None:
    runtime = await create_test_runtime(
        plugins=[SandboxPlugin()], config=embedded_env(sandbox_root)
    )
    async with runtime as rt:
        bound, ctx = await request_tools(rt)
        await call(
            bound["sandbox_run"], {"code": "printf 'a,b\\n1,2\\n' > /workspace/data/output/t.csv"},
            ctx,
        )  # fmt: skip
        links = await call(
            bound["artifact_get_presigned_url"], {"path": "/workspace/output/t.csv"}, ctx
        )
        missing = await call(
            bound["artifact_get_presigned_url"], {"path": "/workspace/data/none.txt"}, ctx
        )
        async with httpx.AsyncClient() as http:
            preview = await http.get(links["previewUrl"])
            download = await http.get(links["downloadUrl"])
            forged = await http.get(links["previewUrl"] + "x")
    assert links["path"] == "/workspace/output/t.csv"
    assert links["expiresIn"] == 3600
    assert preview.status_code == 200
    assert preview.text == "a,b\n1,2\n"
    assert preview.headers["content-disposition"].startswith("inline")
    assert preview.headers["content-security-policy"] == "sandbox"
    assert download.headers["content-disposition"].startswith("attachment")
    assert forged.status_code == 404
    assert forged.json()["code"] == "sandbox.link_expired"
    assert missing["ok"] is False
    assert "no such file" in missing["error"]


async def test_without_bubblewrap_the_oracle_refuses_to_start_naming_the_package(
    sandbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(sandbox_root))  # no bwrap on it
    with pytest.raises(OracleBootError) as refused:
        await create_test_runtime(plugins=[SandboxPlugin()], config=embedded_env(sandbox_root))
    assert "bubblewrap" in str(refused.value)
    assert "apt-get install bubblewrap" in str(refused.value)


async def test_local_mode_alone_does_not_run_model_code_on_this_machine() -> None:
    runtime = await create_test_runtime(plugins=[SandboxPlugin()], config={})
    async with runtime as rt:
        report = rt.status()
        tools = await rt.list_tools()
    assert "sandbox" not in report.loaded
    assert not [n for n in tools if n.startswith("sandbox_")]


async def test_forced_on_without_a_hosted_sandbox_it_runs_embedded(sandbox_root: Path) -> None:
    plugin = SandboxPlugin()
    runtime = await create_test_runtime(
        plugins=[plugin], config={"SANDBOX_ROOT": str(sandbox_root)}, features={"sandbox": True}
    )
    async with runtime as rt:
        bound, ctx = await request_tools(rt)
        ran: dict[str, Any] = await call(bound["sandbox_run"], {"code": "echo up"}, ctx)
    assert ran["stdout"] == "up\n"
