"""One turn through the real server in ixo mode: the user's stored delegation lets the
oracle mint invocations for the composio-worker double; the model loads the capability,
discovers a tool with ``COMPOSIO_SEARCH_TOOLS`` and runs it through
``COMPOSIO_MULTI_EXECUTE_TOOL``."""

from __future__ import annotations

import json
from pathlib import Path

from oracle_core.testing import mark_sensitive
from oracle_plugins.composio import ComposioPlugin
from oracle_plugins.composio.testing import ComposioWorkerDouble
from oracle_server.testing import (
    IxoIdentity,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    serving_ixo_oracle,
)
from oracle_ucan import Ed25519Signer

IDENTITY = IxoIdentity("composio")
ORACLE_DID = IDENTITY.oracle_did
API_KEY = "composio-e2e-api-key-0123456789"
mark_sensitive(API_KEY)

ENVELOPE = {
    "tools": [{"tool_slug": "COMPOSIO_SEARCH_WEB", "arguments": {"query": "ixo impact"}}],
    "sync_response_to_workbench": False,
}


async def test_a_turn_discovers_and_runs_a_composio_tool(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    worker = ComposioWorkerDouble(
        trusted_users=[user.did()], api_key=API_KEY, verifier=IDENTITY.verifier()
    )
    steps: list[Step] = [
        ToolCalls([("load_capability", {"names": ["composio"]})]),
        ToolCalls([("COMPOSIO_SEARCH_TOOLS", {"queries": [{"use_case": "search the web"}]})]),
        ToolCalls([("COMPOSIO_MULTI_EXECUTE_TOOL", ENVELOPE)]),
        "Here is what the web says about ixo.",
    ]
    async with LoopbackServer(worker.routes) as worker_server, OpenAIDouble(steps) as llm:
        worker.origin = worker_server.origin
        env = {"COMPOSIO_API_KEY": API_KEY, "COMPOSIO_BASE_URL": worker.base_url, **llm.env()}
        async with serving_ixo_oracle(
            IDENTITY,
            [ComposioPlugin()],
            data_dir=tmp_path / "data",
            env=env,
            grants=[{"with": "ixo:sandbox", "can": "sandbox/*"}],
            user=user,
        ) as oracle:
            answer = await oracle.send(await oracle.new_session(), "Search ixo")
            assert answer.status_code == 200, answer.text

    first, second, third, fourth = llm.requests
    # On demand: no Composio section before the thread loads the capability (the
    # section joins the prompt from the next turn on, as an operating guide does).
    assert "## Composio Context" not in (first.system_prompt or "")
    # On demand: the meta-tools are shown once the capability is loaded.
    assert "COMPOSIO_SEARCH_TOOLS" not in first.tool_names
    assert {"COMPOSIO_SEARCH_TOOLS", "COMPOSIO_MULTI_EXECUTE_TOOL"} <= set(second.tool_names)
    assert "COMPOSIO_REMOTE_WORKBENCH" not in second.tool_names
    assert "COMPOSIO_SEARCH_WEB" in str(third.messages[-1]["content"])
    executed = json.loads(str(fourth.messages[-1]["content"]))
    assert executed["results"] == [
        {
            "tool_slug": "COMPOSIO_SEARCH_WEB",
            "successful": True,
            "response": {"echo": {"query": "ixo impact"}},
        }
    ]
    assert "Here is what the web says about ixo." in answer.text

    # What the worker received: a session for the user, its tools, two executions, each
    # request with the API key and its own invocation addressed to the worker's DID.
    assert worker.rejected == []
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in worker.requests] == [
        ("POST", "session"),
        ("GET", "tools"),
        ("POST", "execute_meta"),
        ("POST", "execute_meta"),
    ]
    assert worker.requests[0].body == {"user_id": user.did()}
    for request in worker.requests:
        assert request.audience == worker.did == "did:web:composio-worker.test"
        assert request.capability == {"with": "ixo:sandbox", "can": "sandbox/*"}
        assert (request.caller.user, request.caller.oracle) == (user.did(), ORACLE_DID)
        assert request.network == "devnet"
    search, execute = worker.executions
    assert (search.slug, search.arguments) == (
        "COMPOSIO_SEARCH_TOOLS",
        {"queries": [{"use_case": "search the web"}]},
    )
    assert (execute.slug, execute.arguments) == ("COMPOSIO_MULTI_EXECUTE_TOOL", ENVELOPE)
