"""A server with ``ucan`` auth: every list and call carries a fresh invocation minted from
the user's delegation, addressed to the server's ``did:web``; the server (the Memory
Engine double, which validates each one with ``oracle_ucan``) accepts them. A user whose
delegation does not grant the ability gets no tools and a degraded note, not a failure."""

from __future__ import annotations

import json
import time

from oracle_core import UcanAccessor, UserInfo
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, reply
from oracle_plugins.mcp_client import McpClientPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate


def minter(user: Ed25519Signer, oracle: Ed25519Signer, grant: dict[str, str]) -> UcanAccessor:
    proof = delegate(
        user, audience=oracle.did(), capabilities=[grant], expiration=int(time.time()) + 3600
    ).to_base64()
    service = IxoUcanService(oracle_did=oracle.did(), signer=lambda: oracle)
    return service.for_user(UserInfo(did=user.did(), ucan_delegation=proof))


async def test_each_request_carries_an_invocation_the_server_accepts() -> None:
    user, oracle = Ed25519Signer.generate(), Ed25519Signer.generate()
    engine = MemoryEngineDouble(trusted_users=[user.did()])
    servers = [
        {
            "name": "engine",
            "url": "",
            "auth": {"ucan": {"capability": "ixo:memory", "can": "memory/*"}},
            "allow": ["add_memory", "search_memory_engine"],
        }
    ]
    model = ScriptedChatModel(
        [
            call_tool("engine__add_memory", {"name": "Diet", "content": "Ada is vegetarian."}),
            reply("Noted."),
        ]
    )
    async with engine.running(), LoopbackServer(engine.routes) as http:
        engine.origin = http.origin
        servers[0]["url"] = engine.mcp_url
        granted = await create_test_runtime(
            plugins=[McpClientPlugin()],
            config={"ORACLE_MCP_SERVERS": json.dumps(servers)},
            ucan=minter(user, oracle, {"with": "ixo:memory", "can": "memory/*"}),
            user=UserInfo(did=user.did()),
            model=model,
        )
        async with granted:
            built = await granted.build("hello")
            result = await granted.run_turn("remember that I am vegetarian")
        refused_plugin = McpClientPlugin()
        refused = await create_test_runtime(
            plugins=[refused_plugin],
            config={"ORACLE_MCP_SERVERS": json.dumps(servers)},
            ucan=minter(user, oracle, {"with": "ixo:other", "can": "other/*"}),
            user=UserInfo(did=user.did()),
        )
        async with refused:
            denied = await refused.build("hello")
            states = [s.state for s in refused_plugin.status()]

    assert sorted(n for n in built.tool_infos if n.startswith("engine__")) == [
        "engine__add_memory",
        "engine__search_memory_engine",
    ]
    assert result.text == "Noted."
    assert [m.content for m in engine.memories[(user.did(), "user")]] == ["Ada is vegetarian."]
    assert engine.rejected == []
    assert {r.caller.user for r in engine.requests} == {user.did()}
    assert not [n for n in denied.tool_infos if n.startswith("engine__")]
    assert ("mcp-client", "MCP server engine: no authorisation for this user") in denied.degraded
    assert states == ["unauthorised"]
