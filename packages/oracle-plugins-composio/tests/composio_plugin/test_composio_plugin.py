"""The plugin in a test runtime on the worker double: tools, auth, degradation, prompt,
the session cache and execution."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from oracle_core import BuiltAgent, UserInfo
from oracle_core.testing import TestRuntime
from oracle_plugins.composio import (
    DEGRADED_LABEL,
    ENVELOPE_ERROR_CODE,
    ENVELOPE_SCHEMA,
    ComposioPlugin,
)
from oracle_plugins.composio.testing import META_TOOL_DEFINITIONS, ComposioWorkerDouble
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer

from .conftest import MinterFactory, RuntimeFactory, minter_for

META = [
    "COMPOSIO_MANAGE_CONNECTIONS",
    "COMPOSIO_SEARCH_TOOLS",
    "COMPOSIO_GET_TOOL_SCHEMAS",
    "COMPOSIO_MULTI_EXECUTE_TOOL",
]
SESSION_PATH = "/api/v3/tool_router/session"


def _own(built: BuiltAgent) -> list[str]:
    return [name for name, info in built.tool_infos.items() if info.owner == "composio"]


def _plugin_tool(built: BuiltAgent, name: str) -> Any:
    [tool] = [t for t in built.tools if t.name == name]
    return tool.plugin_tool


def _section(built: BuiltAgent) -> str | None:
    text = built.prompt.text
    if "## Composio Context" not in text:
        return None
    return text.split("## Composio Context", 1)[1]


async def _invoke(rt: TestRuntime, name: str, args: Any) -> Any:
    result = await rt.invoke_tool(name, args)
    return json.loads(result) if isinstance(result, str) else result


async def test_the_session_gives_the_four_meta_tools(
    composio_runtime: RuntimeFactory,
    worker: ComposioWorkerDouble,
    user_key: Ed25519Signer,
    oracle_key: Ed25519Signer,
) -> None:
    async with composio_runtime() as rt:
        built = await rt.build("hi")
    assert _own(built) == META  # the remote workbench the session also lists is left out
    effects = {name: built.tool_infos[name].effect for name in META}
    assert effects == {
        "COMPOSIO_MANAGE_CONNECTIONS": "write",
        "COMPOSIO_SEARCH_TOOLS": "read",
        "COMPOSIO_GET_TOOL_SCHEMAS": "read",
        "COMPOSIO_MULTI_EXECUTE_TOOL": "write",
    }
    # The session's schemas and descriptions are bound, but for the execute envelope.
    search = _plugin_tool(built, "COMPOSIO_SEARCH_TOOLS")
    expected = META_TOOL_DEFINITIONS["COMPOSIO_SEARCH_TOOLS"]
    assert search.args_schema == expected["input_parameters"]
    assert search.description == expected["description"]
    execute = _plugin_tool(built, "COMPOSIO_MULTI_EXECUTE_TOOL")
    assert execute.args_schema == dict(ENVELOPE_SCHEMA)
    assert '"sync_response_to_workbench": false' in execute.description
    assert built.degraded == []
    # One session creation and one listing, each with its own invocation.
    create, listing = worker.requests
    assert (create.method, create.path) == ("POST", SESSION_PATH)
    assert create.body == {"user_id": user_key.did()}
    assert listing.path.endswith("/tools")
    for request in worker.requests:
        assert request.audience == worker.did
        assert request.capability == {"with": "ixo:sandbox", "can": "sandbox/*"}
        assert (request.caller.user, request.caller.oracle) == (user_key.did(), oracle_key.did())
        assert request.network == "devnet"
    assert worker.rejected == []


async def test_without_network_no_network_header(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime(config={"NETWORK": ""}) as rt:
        await rt.build("hi")
    assert {r.network for r in worker.requests} == {None}


async def test_the_prompt_section_comes_only_with_the_tools(
    composio_runtime: RuntimeFactory,
) -> None:
    async with composio_runtime() as rt:
        unloaded = await rt.build("hi")
        built = await rt.build("hi", state={"loaded_plugins": ["composio"]})
    # On demand: nothing of it in the prompt until the thread loads it.
    assert _section(unloaded) is None
    section = _section(built)
    assert section is not None
    steps = ["**Connect.**", "**Discover.**", "**Inspect.**", "**Execute.**"]
    assert [section.index(step) for step in steps] == sorted(section.index(s) for s in steps)
    assert "Only ever show the `redirect_url` it returned" in section
    assert "Never invent a slug" in section
    assert "explicit confirmation" in section
    assert "load_capability" not in section


async def test_no_minting_backend_no_tools_and_no_degradation(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime(ucan=None) as rt:
        built = await rt.build("hi")
    assert _own(built) == []
    assert _section(built) is None
    assert built.degraded == []
    assert worker.requests == []


async def test_no_delegation_no_tools(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble, make_minter: MinterFactory
) -> None:
    async with composio_runtime(ucan=make_minter(delegation=None)) as rt:
        built = await rt.build("hi")
    assert (_own(built), _section(built), built.degraded) == ([], None, [])
    assert worker.requests == []


async def test_a_delegation_without_the_sandbox_grant_no_tools(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble, make_minter: MinterFactory
) -> None:
    grant = {"with": "ixo:memory", "can": "memory/*"}
    async with composio_runtime(ucan=make_minter(grant=grant)) as rt:
        built = await rt.build("hi")
    assert (_own(built), _section(built), built.degraded) == ([], None, [])
    assert worker.requests == []


async def test_session_creation_failure_degrades(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    worker.session_status = 500
    async with composio_runtime() as rt:
        built = await rt.build("hi")
        assert (_own(built), _section(built)) == ([], None)
        assert built.degraded == [("composio", DEGRADED_LABEL)]
        assert "- **composio**: Composio" in built.prompt.text
        # A failure is not kept: the next turn tries again and gets the tools.
        worker.session_status = None
        again = await rt.build("hi")
    assert _own(again) == META
    assert again.degraded == []


async def test_a_wrong_api_key_degrades(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime(config={"COMPOSIO_API_KEY": "not-the-worker-key"}) as rt:
        built = await rt.build("hi")
    assert built.degraded == [("composio", DEGRADED_LABEL)]
    assert worker.rejected == ["api_key"]


async def test_the_session_is_kept_briefly(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime() as rt:
        await rt.build("hi")
        await rt.build("again")
    assert len(worker.sessions) == 1
    assert len(worker.requests) == 2  # one creation, one listing: the second turn reused it
    async with composio_runtime(ComposioPlugin(session_ttl=0)) as rt:
        await rt.build("hi")
        await rt.build("again")
    assert len(worker.sessions) == 3


async def test_the_tool_set_follows_the_users_session(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble, user_key: Ed25519Signer
) -> None:
    worker.tools_by_user[user_key.did()] = (
        "COMPOSIO_SEARCH_TOOLS",
        "COMPOSIO_MULTI_EXECUTE_TOOL",
        "GMAIL_SEND_EMAIL",  # an app tool a session lists is never bound
    )
    async with composio_runtime() as rt:
        built = await rt.build("hi", state={"loaded_plugins": ["composio"]})
    assert _own(built) == ["COMPOSIO_SEARCH_TOOLS", "COMPOSIO_MULTI_EXECUTE_TOOL"]
    section = _section(built)
    assert section is not None
    assert "**Connect.**" not in section
    assert "1. **Discover.**" in section


async def test_a_session_with_no_meta_tools_gives_nothing(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble, user_key: Ed25519Signer
) -> None:
    worker.tools_by_user[user_key.did()] = ("COMPOSIO_REMOTE_WORKBENCH",)
    async with composio_runtime() as rt:
        built = await rt.build("hi")
    assert (_own(built), _section(built), built.degraded) == ([], None, [])


async def test_connect_discover_execute(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble, user_key: Ed25519Signer
) -> None:
    async with composio_runtime() as rt:
        connect = await _invoke(rt, "COMPOSIO_MANAGE_CONNECTIONS", {"toolkits": ["gmail"]})
        link = connect["results"]["gmail"]["redirect_url"]
        assert link.startswith(f"{worker.base_url}/connect/")
        worker.mark_connected(user_key.did(), "gmail")
        found = await _invoke(
            rt, "COMPOSIO_SEARCH_TOOLS", {"queries": [{"use_case": "send an email"}]}
        )
        assert found["results"][0]["tools"][0] == {
            "tool_slug": "GMAIL_SEND_EMAIL",
            "toolkit": "gmail",
            "description": "Send an email from the user's Gmail account.",
            "connected": True,
        }
        envelope = {
            "tools": [{"tool_slug": "GMAIL_SEND_EMAIL", "arguments": {"subject": "Out"}}],
            "sync_response_to_workbench": False,
        }
        ran = await _invoke(rt, "COMPOSIO_MULTI_EXECUTE_TOOL", envelope)
    assert ran["results"] == [
        {
            "tool_slug": "GMAIL_SEND_EMAIL",
            "successful": True,
            "response": {"echo": {"subject": "Out"}},
        }
    ]
    [execution] = worker.executions_of("COMPOSIO_MULTI_EXECUTE_TOOL")
    assert execution.arguments == envelope
    assert worker.rejected == []  # a fresh invocation for every request
    # A connection call forgets the kept session: its tool set may have changed.
    assert len(worker.sessions) == 2


async def test_a_malformed_envelope_never_reaches_the_worker(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime() as rt:
        await rt.build("hi")
        before = len(worker.requests)
        answer = await _invoke(
            rt, "COMPOSIO_MULTI_EXECUTE_TOOL", {"GMAIL_SEND_EMAIL": {"subject": "Out"}}
        )
    assert answer["ok"] is False
    assert answer["code"] == ENVELOPE_ERROR_CODE
    assert "'GMAIL_SEND_EMAIL' passed as a top-level key" in answer["error"]
    assert '{"tools": [{"tool_slug": "GMAIL_SEND_EMAIL"' in answer["error"]
    # invoke_tool builds the agent once more (the kept session, no request); nothing else.
    assert len(worker.requests) == before
    assert worker.executions == []


async def test_a_forgotten_session_is_reopened_once(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime() as rt:
        await rt.build("hi")
        [session_id] = worker.sessions
        worker.expire_session(session_id)
        found = await _invoke(rt, "COMPOSIO_SEARCH_TOOLS", {"queries": [{"use_case": "web"}]})
    assert found["results"][0]["primary_tool_slugs"] == ["COMPOSIO_SEARCH_WEB"]
    [execution] = worker.executions
    assert execution.session_id != session_id
    assert len(worker.sessions) == 1


async def test_worker_refusals_reach_the_model_as_errors(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime() as rt:
        refused = await _invoke(rt, "COMPOSIO_MANAGE_CONNECTIONS", {"toolkits": "gmail"})
        worker.sessions.clear()
        worker.session_status = 503
        gone = await _invoke(rt, "COMPOSIO_GET_TOOL_SCHEMAS", {"tool_slugs": ["X_Y"]})
    assert refused == {
        "ok": False,
        "code": "composio.rejected",
        "error": "Composio refused the call: toolkits must be a non-empty array of strings",
    }
    assert gone["ok"] is False
    assert gone["code"] == "composio.worker_error"


async def test_an_unreachable_worker_is_an_error_not_a_crash(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    # The same double on a second address, which goes away after the tools loaded.
    server = LoopbackServer(worker.routes)
    await server.start()
    async with composio_runtime(config={"COMPOSIO_BASE_URL": server.origin}) as rt:
        built = await rt.build("hi")
        tool = _plugin_tool(built, "COMPOSIO_SEARCH_TOOLS")
        ctx = built.context.runtime_context
        assert ctx is not None
        await server.stop()
        answer = await tool.handler({"queries": [{"use_case": "x"}]}, ctx.for_plugin("composio"))
    assert answer["ok"] is False
    assert answer["code"] == "composio.unreachable", answer
    assert "Traceback" not in answer["error"]


async def test_users_have_their_own_sessions(
    composio_runtime: RuntimeFactory,
    worker: ComposioWorkerDouble,
    make_minter: MinterFactory,
    user_key: Ed25519Signer,
) -> None:
    other = Ed25519Signer.generate()
    worker.trusted_users.append(other.did())
    plugin = ComposioPlugin()
    async with composio_runtime(plugin) as rt:
        await rt.build("hi")
    async with composio_runtime(
        plugin,
        ucan=minter_for(other, Ed25519Signer.generate()),
        user=UserInfo(did=other.did(), timezone="UTC"),
    ) as rt:
        await rt.build("hi")
    owners = {s.owner for s in worker.sessions.values()}
    assert len(owners) == 2
    assert {r.body["user_id"] for r in worker.requests if r.method == "POST"} == {
        user_key.did(),
        other.did(),
    }


async def test_concurrent_turns_of_a_user_share_one_opening(
    composio_runtime: RuntimeFactory, worker: ComposioWorkerDouble
) -> None:
    async with composio_runtime() as rt:
        first, second = await asyncio.gather(rt.build("one"), rt.build("two"))
    assert _own(first) == _own(second) == META
    assert len(worker.sessions) == 1
    assert len(worker.requests) == 2
