"""Turns through the real server on the embedded sandbox: code the model writes runs in
bubblewrap; a skill found in the registry double runs through sandbox_run with its cid,
mounted read-only, with the user's secrets as variables."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from oracle_plugins.sandbox import SandboxPlugin
from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import SkillsRegistryDouble, capsule
from oracle_server import create_oracle_app
from oracle_server.testing import (
    ChatRequest,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    auth_headers,
    serving,
)
from oracle_ucan import Ed25519Signer

from .conftest import embedded_env

SCRIPT = """\
import os, sys
rows = [line.split(",") for line in sys.stdin.read().split()]
total = sum(int(r[1]) for r in rows)
key = os.environ.get("_USER_SECRET_LEDGER_KEY", "")
print(f"total={total} key_len={len(key)}")
"""


def last_tool_result(request: ChatRequest) -> dict[str, object]:
    message = request.messages[-1]
    assert message["role"] == "tool"
    loaded = json.loads(str(message["content"]))
    assert isinstance(loaded, dict)
    return loaded


async def test_a_turn_runs_the_models_code_in_the_embedded_sandbox(
    tmp_path: Path, sandbox_root: Path
) -> None:
    steps: list[Step] = [
        ToolCalls([("sandbox_run", {"code": "echo $((6 * 7)) > /workspace/data/a; cat a"})]),
        lambda request: f"The answer is {last_tool_result(request)['stdout']}".strip(),
    ]
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "Sandbox Oracle"},
            plugins=[SandboxPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                **embedded_env(sandbox_root),
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        user = Ed25519Signer.generate()
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            headers = auth_headers(user, app.state.oracle_did)
            session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
            answer = await client.post(
                f"/messages/{session}", headers=headers, json={"message": "What is 6 times 7?"}
            )
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"]["content"] == "The answer is 42"
    first = llm.requests[0]
    assert {"sandbox_run", "sandbox_write_file", "sandbox_write_blob"} <= set(first.tool_names)
    result = last_tool_result(llm.requests[1])
    assert (result["exitCode"], result["timedOut"]) == (0, False)


async def test_a_skill_from_the_registry_runs_through_sandbox_run_with_its_cid(
    tmp_path: Path, sandbox_root: Path
) -> None:
    ledger = capsule(
        "ledger-total",
        {"scripts/total.py": SCRIPT},
        description="Totals a ledger of name,amount lines.",
    )
    registry = SkillsRegistryDouble(capsules=[ledger])

    def run_the_skill(request: ChatRequest) -> ToolCalls:
        found = last_tool_result(request)["skills"]
        assert isinstance(found, list)
        skill = found[0]
        code = (
            f"cat {skill['path']}/SKILL.md | head -3; "
            f"printf 'a,2\\nb,40\\n' | python3 {skill['path']}/scripts/total.py; "
            f"touch {skill['path']}/scripts/changed"
        )
        return ToolCalls([("sandbox_run", {"code": code, "cid": skill["cid"]})])

    steps: list[Step] = [
        ToolCalls([("search_skills", {"q": "ledger"})]),
        run_the_skill,
        lambda request: str(last_tool_result(request)["stdout"]).splitlines()[-1],
    ]
    async with LoopbackServer(registry.routes) as served, OpenAIDouble(steps) as llm:
        registry.origin = served.origin
        app = await create_oracle_app(
            {"name": "Skills Oracle"},
            plugins=[SandboxPlugin(), SkillsPlugin()],
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
                "SKILLS_CAPSULES_BASE_URL": registry.base_url,
                **embedded_env(sandbox_root),
                **llm.env(),
            },
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        user = Ed25519Signer.generate()
        async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
            headers = auth_headers(user, app.state.oracle_did)
            stored = await client.put(
                "/secrets/LEDGER_KEY", headers=headers, json={"value": "k-12345"}
            )
            assert stored.status_code in (200, 201, 204), stored.text
            session = (await client.post("/sessions", headers=headers)).json()["sessionId"]
            answer = await client.post(
                f"/messages/{session}", headers=headers, json={"message": "Total my ledger"}
            )
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"]["content"] == "total=42 key_len=7"
    # The prompt named the secret as the run sees it, never its value.
    prompt = llm.requests[0].system_prompt or ""
    assert "_USER_SECRET_LEDGER_KEY" in prompt
    assert "k-12345" not in prompt
    run = last_tool_result(llm.requests[2])
    assert "name: ledger-total" in str(run["stdout"])
    # The skill is mounted read-only.
    assert "Read-only file system" in str(run["stderr"])
    assert [cid for cid, _ in registry.downloads] == [ledger.cid]
