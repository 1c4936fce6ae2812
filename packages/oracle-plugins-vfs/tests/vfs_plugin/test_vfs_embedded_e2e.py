"""One turn through the real server in local mode (what ``make run`` gives): the files
live on this machine (the embedded backend), a shared file is served at its link without
a login, and ``vfs_delete`` waits for the user's approval before it trashes anything."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from oracle_plugins.vfs import VfsPlugin
from oracle_server import create_oracle_app
from oracle_server.testing import (
    ChatRequest,
    OpenAIDouble,
    Step,
    ToolCalls,
    auth_headers,
    serving,
)
from oracle_ucan import Ed25519Signer

PLAN = "# Plan\n\n- ship the files plugin\n"


def tool_results(request: ChatRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


async def test_a_local_turn_shares_a_file_and_deletes_it_once_approved(tmp_path: Path) -> None:
    steps: list[Step] = [
        ToolCalls([("vfs_write", {"path": "/notes/plan.md", "content": PLAN})]),
        ToolCalls([("vfs_share", {"path": "/notes/plan.md"})]),
        ToolCalls([("vfs_delete", {"paths": ["/notes/plan.md", "/notes/none.md"]})]),
        "Done.",
    ]
    files = tmp_path / "files"
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "Local Files Oracle"},
            plugins=[VfsPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "VFS_LOCAL_ROOT": str(files),
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        user = Ed25519Signer.generate()
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
            headers = auth_headers(user, app.state.oracle_did)
            session = (await http.post("/sessions", headers=headers)).json()["sessionId"]
            paused = await http.post(
                f"/messages/{session}", headers=headers, json={"message": "Share my plan"}
            )
            assert paused.status_code == 200, paused.text
            [approval] = paused.json()["approvals"]
            shared = tool_results(llm.requests[2])[-1]
            link = re.search(r"(/vfs/public/[A-Za-z0-9._-]+)", shared)
            assert link is not None, shared
            # Anyone with the link, no login; the user's content cannot script the origin.
            opened = await http.get(link.group(1))
            unknown = await http.get("/vfs/public/not-a-token")
            before = sorted(p.name for p in files.rglob("*.md"))

            decided = await http.post(
                f"/approvals/{approval['approvalId']}",
                headers=headers,
                json={"decision": "approved"},
            )
            assert decided.status_code == 200, decided.text
            after_delete = await http.get(link.group(1))

    assert tool_results(llm.requests[1]) == [
        f"Wrote /notes/plan.md ({len(PLAN)} bytes, text/markdown, version 1)."
    ]
    assert shared.startswith("/notes/plan.md is public: http://")
    assert (opened.status_code, opened.text) == (200, PLAN)
    assert opened.headers["content-type"].startswith("text/markdown")
    assert opened.headers["content-security-policy"] == "sandbox"
    assert opened.headers["x-content-type-options"] == "nosniff"
    assert (unknown.status_code, unknown.json()["code"]) == (404, "vfs.share_not_found")
    assert approval["toolName"] == "vfs_delete"
    assert before == ["plan.md"]  # nothing was deleted while the approval waited
    assert tool_results(llm.requests[-1])[-1] == (
        "Moved to the trash (1): /notes/plan.md. Not found, skipped (1): /notes/none.md."
    )
    assert decided.json()["message"]["content"] == "Done."
    assert after_delete.status_code == 404  # a trashed file's link is dead
    # Recoverable: the bytes are in the user's trash on disk, out of the tools' sight.
    assert [p.read_text() for p in files.rglob("*") if p.is_file() and "trash" in p.parts] == [PLAN]
