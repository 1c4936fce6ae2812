"""Human approval of tool calls over HTTP (plugins spec §20.2): a destructive call pauses
the turn, ``tool_approval_request`` reaches the client, and a decision by the same user
(``POST /approvals/{id}`` or a plain yes / no) resumes it; the call runs at most once."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginTool,
    RuntimeContext,
    args_hash,
    plugin_tool,
)
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import (
    ChatRequest,
    OpenAIDouble,
    RunningOracle,
    ToolCalls,
    auth_headers,
    parse_stream,
    serving,
)
from oracle_ucan import Ed25519Signer

DATABASE_URL = os.environ.get("ORACLE_TEST_DATABASE_URL")


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    token: str = ""


class FilesPlugin(OraclePlugin):
    """Keeps files; deleting one is destructive (so needs the user's approval)."""

    name = "files"
    version = "1"
    manifest = PluginManifest(
        title="Files", summary="Keeps files.", when_to_use=["files"], visibility="always"
    )

    def __init__(self) -> None:
        self.deleted: list[dict[str, Any]] = []

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(
            name="files_delete",
            description="Delete a file.",
            args_schema=Target,
            effect="destructive",
            redact_args=lambda args: {**args, "token": "***"} if args.get("token") else args,
        )
        def files_delete(args: Target, rt_ctx: RuntimeContext[Any]) -> str:
            self.deleted.append(args.model_dump())
            return f"deleted {args.target}"

        return [files_delete]


def tool_results(chat: ChatRequest) -> list[str]:
    return [str(m.get("content")) for m in chat.messages if m.get("role") == "tool"]


def raw_frames(body: str) -> list[tuple[str, Any]]:
    """Every SSE frame's event name and JSON data, whatever a client would keep."""
    frames = []
    for frame in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in fields:
            frames.append((fields["event"], json.loads(fields["data"])))
    return frames


@dataclass
class Oracle:
    app: OracleApp
    base_url: str
    http: httpx.AsyncClient
    user: Ed25519Signer

    def headers(self, user: Ed25519Signer | None = None) -> dict[str, str]:
        return auth_headers(user or self.user, self.app.state.oracle_did)

    async def session(self) -> str:
        created = await self.http.post(f"{self.base_url}/sessions", headers=self.headers())
        return str(created.json()["sessionId"])

    async def send(self, session: str, message: str, **body: Any) -> httpx.Response:
        return await self.http.post(
            f"{self.base_url}/messages/{session}",
            headers=self.headers(),
            json={"message": message, **body},
        )

    async def approvals(self, **params: str) -> list[dict[str, Any]]:
        listed = await self.http.get(
            f"{self.base_url}/approvals", headers=self.headers(), params=params
        )
        assert listed.status_code == 200, listed.text
        return list(listed.json()["approvals"])

    async def decide(self, approval_id: str, user: Ed25519Signer | None = None, **body: Any) -> Any:
        return await self.http.post(
            f"{self.base_url}/approvals/{approval_id}", headers=self.headers(user), json=body
        )

    async def history(self, session: str) -> list[dict[str, Any]]:
        got = await self.http.get(f"{self.base_url}/messages/{session}", headers=self.headers())
        return list(got.json()["messages"])


@asynccontextmanager
async def oracle_on(
    data: Path,
    double: OpenAIDouble,
    plugin: FilesPlugin,
    user: Ed25519Signer,
    *,
    backend: str = "sqlite",
    config: dict[str, Any] | None = None,
) -> AsyncIterator[Oracle]:
    database = (
        {"DATABASE_URL": DATABASE_URL, "ALLOW_SINGLE_REPLICA_POSTGRES": "true"}
        if backend == "postgres" and DATABASE_URL
        else {}
    )
    app = await create_oracle_app(
        {"name": "Approval Oracle", **(config or {})},
        env={
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(data),
            "THROTTLE_LIMIT": "1000",
            "SHUTDOWN_DRAIN_SECONDS": "0",
            **double.env(),
            **database,
        },
        plugins=[plugin],
        discover_entry_points=False,
    )
    async with serving(app) as base_url, httpx.AsyncClient(timeout=30) as http:
        yield Oracle(app, base_url, http, user)


@pytest.fixture
def plugin() -> FilesPlugin:
    return FilesPlugin()


@pytest.fixture
def user() -> Ed25519Signer:
    return Ed25519Signer.generate()


def delete_then(answer: str, target: str = "report.txt") -> list[Any]:
    return [ToolCalls([("files_delete", {"target": target, "token": "s3cret"})]), answer]


backends = pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(DATABASE_URL is None, reason="ORACLE_TEST_DATABASE_URL unset"),
        ),
    ],
)


@backends
async def test_a_paused_call_is_approved_over_http_after_a_restart_and_runs_once(
    tmp_path: Path, plugin: FilesPlugin, user: Ed25519Signer, backend: str
) -> None:
    async with OpenAIDouble(delete_then("Deleted report.txt.")) as double:
        async with oracle_on(tmp_path, double, plugin, user, backend=backend) as oracle:
            session = await oracle.session()
            paused = await oracle.send(session, "Delete report.txt", stream=True)
            events = parse_stream([paused.text], "persistent")
            raw_names = [name for name, _ in raw_frames(paused.text)]
            [listed] = await oracle.approvals(status="pending")

        assert plugin.deleted == []
        # The SDK's parser drops the event it does not know, and nothing else.
        assert "tool_approval_request" in raw_names
        assert "tool_approval_request" not in [e.event for e in events]
        [request] = [
            data for name, data in raw_frames(paused.text) if name == "tool_approval_request"
        ]
        assert request["approvalId"] == listed["approvalId"]
        assert request["toolName"] == "files_delete"
        assert request["args"] == {"target": "report.txt", "token": "***"}
        assert request["reason"] == "effect destructive"
        assert request["expiresAt"] > request["requestedAt"]
        assert request["sessionId"] == session
        text = "".join(e.data["content"] for e in events if e.event == "message")
        assert "Approval needed" in text
        assert "files_delete" in text
        assert events[-1].event == "done"
        assert events[-1].data["status"] == "finished"

        # Restarted on the same database: the request is still there and decides the turn.
        async with oracle_on(tmp_path, double, plugin, user, backend=backend) as oracle:
            [still] = await oracle.approvals(sessionId=session)
            assert still["status"] == "pending"
            stranger = Ed25519Signer.generate()
            refused = await oracle.decide(still["approvalId"], stranger, decision="approved")
            assert refused.status_code == 404
            assert refused.json()["code"] == "approval.not_found"

            decided = await oracle.decide(still["approvalId"], decision="approved")
            assert decided.status_code == 200, decided.text
            body = decided.json()
            assert body["decision"] == "approved"
            assert body["message"]["content"] == "Deleted report.txt."
            assert plugin.deleted == [{"target": "report.txt", "token": "s3cret"}]

            again = await oracle.decide(still["approvalId"], decision="approved")
            assert again.status_code == 409
            assert again.json()["code"] == "approval.decided"
            assert plugin.deleted == [{"target": "report.txt", "token": "s3cret"}]
            [done] = await oracle.approvals(sessionId=session)
            assert done["status"] == "approved"
            assert done["decidedVia"] == "api"
            history = await oracle.history(session)
            assert history[-1]["content"] == "Deleted report.txt."
            # A later turn of the session runs as usual.
            double.add_steps("Anything else?")
            follow_up = await oracle.send(session, "thanks")
            assert follow_up.json()["message"]["content"] == "Anything else?"
        assert tool_results(double.requests[-2]) == ["deleted report.txt"]


async def test_a_plain_no_declines_and_the_model_is_told(
    tmp_path: Path, plugin: FilesPlugin, user: Ed25519Signer, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        OpenAIDouble(delete_then("Okay, I kept it.")) as double,
        oracle_on(tmp_path, double, plugin, user) as oracle,
    ):
        session = await oracle.session()
        paused = (await oracle.send(session, "Delete report.txt")).json()
        [approval] = paused["approvals"]
        assert "Reply yes" in paused["message"]["content"]
        with caplog.at_level(logging.INFO, logger="oracle.server.approvals"):
            answered = await oracle.send(session, "no, cancel")
        assert answered.json()["message"]["content"] == "Okay, I kept it."
        [decided] = await oracle.approvals(sessionId=session)
    assert plugin.deleted == []
    assert decided["status"] == "declined"
    assert decided["decidedVia"] == "message"
    [refusal] = tool_results(double.requests[-1])
    assert refusal.startswith("Declined by user: 'files_delete' was not run")
    # The audit line: the decision and a hash of the arguments, never them or the user.
    [audit] = [r.getMessage() for r in caplog.records if "approvals.decided" in r.getMessage()]
    assert approval["approvalId"] in audit
    assert "declined" in audit
    assert args_hash({"target": "report.txt", "token": "s3cret"}) in audit
    assert "s3cret" not in audit
    assert user.did() not in audit


async def test_a_plain_yes_approves_and_another_message_supersedes(
    tmp_path: Path, plugin: FilesPlugin, user: Ed25519Signer
) -> None:
    steps = [
        *delete_then("Deleted a.", "a"),
        *delete_then("Sure, what about the weather?", "b"),
    ]
    async with OpenAIDouble(steps) as double, oracle_on(tmp_path, double, plugin, user) as oracle:
        session = await oracle.session()
        await oracle.send(session, "Delete a")
        yes = await oracle.send(session, "yes please")
        assert yes.json()["message"]["content"] == "Deleted a."
        assert plugin.deleted == [{"target": "a", "token": "s3cret"}]

        await oracle.send(session, "Delete b")
        moved_on = await oracle.send(session, "Actually, tell me about the weather first")
        statuses = [a["status"] for a in await oracle.approvals(sessionId=session)]
    assert moved_on.json()["message"]["content"] == "Sure, what about the weather?"
    assert plugin.deleted == [{"target": "a", "token": "s3cret"}]
    assert statuses == ["superseded", "approved"]
    last = double.requests[-1].messages
    # The refusal answers the call, then the model gets the new message (after the
    # current-time note).
    roles = [m["role"] for m in last]
    assert roles[-4:] == ["assistant", "tool", "system", "user"]
    assert "sent a new message" in str(last[-3]["content"])
    assert last[-1]["content"] == "Actually, tell me about the weather first"
    # A yes that answered is not a message of the thread; the new message is.
    assert [m["content"] for m in last if m["role"] == "user"] == [
        "Delete a",
        "Delete b",
        "Actually, tell me about the weather first",
    ]


async def test_edited_arguments_run_instead_and_bad_decisions_are_refused(
    tmp_path: Path, plugin: FilesPlugin, user: Ed25519Signer
) -> None:
    async with (
        OpenAIDouble(delete_then("Deleted the draft instead.")) as double,
        oracle_on(tmp_path, double, plugin, user) as oracle,
    ):
        session = await oracle.session()
        [approval] = (await oracle.send(session, "Delete report.txt")).json()["approvals"]
        approval_id = approval["approvalId"]
        for bad in (
            {"decision": "maybe"},
            {"decision": "declined", "editedArgs": {"target": "x"}},
            {"decision": "approved", "editedArgs": "x"},
            {},
        ):
            refused = await oracle.decide(approval_id, **bad)
            assert refused.status_code == 400, bad
        missing = await oracle.decide("apr_unknown", decision="approved")
        assert missing.status_code == 404
        bad_filter = await oracle.http.get(
            f"{oracle.base_url}/approvals", headers=oracle.headers(), params={"status": "x"}
        )
        assert bad_filter.status_code == 400
        assert bad_filter.json()["code"] == "approval.bad_status"
        assert plugin.deleted == []

        edited = await oracle.decide(
            approval_id, decision="approved", editedArgs={"target": "draft.txt"}
        )
        assert edited.status_code == 200, edited.text
    assert plugin.deleted == [{"target": "draft.txt", "token": ""}]
    [result] = tool_results(double.requests[-1])
    assert "edited this call's arguments" in result
    assert "deleted draft.txt" in result


async def test_an_expired_approval_is_not_run(
    tmp_path: Path, plugin: FilesPlugin, user: Ed25519Signer
) -> None:
    config = {"toolPolicy": {"approvalTtlSeconds": 1}}
    async with (
        OpenAIDouble(delete_then("It expired, so I did nothing.")) as double,
        oracle_on(tmp_path, double, plugin, user, config=config) as oracle,
    ):
        session = await oracle.session()
        [approval] = (await oracle.send(session, "Delete report.txt")).json()["approvals"]
        await asyncio.sleep(1.1)
        [listed] = await oracle.approvals(sessionId=session)
        assert listed["status"] == "expired"
        late = await oracle.decide(approval["approvalId"], decision="approved")
        assert late.status_code == 410
        assert late.json()["code"] == "approval.expired"
        resumed = await oracle.http.get(
            f"{oracle.base_url}/runs/{late.json()['runId']}", headers=oracle.headers()
        )
        events = parse_stream([resumed.text], "persistent")
        [stored] = await oracle.approvals(sessionId=session)
    assert plugin.deleted == []
    assert "".join(e.data["content"] for e in events if e.event == "message") == (
        "It expired, so I did nothing."
    )
    assert stored["status"] == "expired"
    [refusal] = tool_results(double.requests[-1])
    assert "was not answered" in refusal


async def test_the_request_reaches_the_sessions_sockets(tmp_path: Path) -> None:
    plugin = FilesPlugin()
    oracle = await RunningOracle.start(delete_then("Done."), data_dir=tmp_path, plugins=[plugin])
    try:
        user = oracle.new_user()
        session = await oracle.create_session(user)
        client = await oracle.connect(user, session)
        paused = (await oracle.send_message(user, session, "Delete report.txt")).json()
        [event] = await client.records.wait_for("tool_approval_request")
        assert event["eventName"] == "tool_approval_request"
        event = event["payload"]
        assert event["sessionId"] == session
        assert event["approvalId"] == paused["approvals"][0]["approvalId"]
        assert event["args"] == {"target": "report.txt", "token": "***"}
        deleted = await oracle.http.delete(f"/sessions/{session}", headers=user.headers())
        assert deleted.status_code == 200
        listed = await oracle.http.get("/approvals", headers=user.headers())
        assert listed.json() == {"approvals": []}
    finally:
        await oracle.aclose()
    assert plugin.deleted == []
