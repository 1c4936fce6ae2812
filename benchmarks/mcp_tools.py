"""MCP tools: what a tool call costs through the MCP client, and what an MCP server adds
to the first model call.

Latency: one function, ``lookup(query, limit)``, bound twice: in process as a plugin tool,
and as tool ``lookup_07`` of an MCP server (the Python SDK's ``MCPServer``, stateless
streamable HTTP, on loopback in the same process and event loop) bound by the
``mcp-client`` plugin. Both are timed as a bare call (the handler against
``McpClient.call_tool``) and as whole turns of a scripted model that calls the tool once
and answers, through the same runtime; the ratio is MCP over in-process.

Tokens: the system prompt and visible tool schemas (o200k_base) of the first model call
of a new session, for an oracle without and with a 50-tool server: on demand, with and
without another on-demand plugin already present (which brings the on-demand note); after
``load_capability``; and always visible.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from starlette.routing import Mount

from benchmarks._common import summary, tool_then_reply
from benchmarks.first_turn_tokens import schema_tokens
from benchmarks.synthetic import synthetic_plugin
from oracle_core import OraclePlugin, PluginContext, PluginTool, count_tokens, plugin_tool
from oracle_core.testing import ScriptedChatModel, call_tool, create_test_runtime, reply
from oracle_mcp import McpClient
from oracle_mcp.testing import catalogue_server, mounted_app, running
from oracle_plugins.mcp_client import McpClientPlugin
from oracle_server.testing import LoopbackServer

TOOLS = 50
CALLS = 200
TURNS = 60
ROUNDS = 3


def lookup(query: str, limit: int = 10) -> str:
    """The function both paths run."""
    return f"{min(limit, 3)} records for {query}"


def catalogue(count: int = TOOLS) -> MCPServer[Any]:
    return catalogue_server(count, lambda index: lookup)


class LookupArgs(BaseModel):
    query: str
    limit: int = 10


class InProcess(OraclePlugin):
    name = "local-lookup"
    version = "1"
    manifest = {
        "title": "Lookup",
        "summary": "Catalogue lookup.",
        "when_to_use": ["catalogue"],
        "visibility": "always",
    }

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        @plugin_tool(name="lookup_07", description="Search the catalogue.", args_schema=LookupArgs)
        def tool(args: LookupArgs, rt_ctx: Any) -> str:
            return lookup(args.query, args.limit)

        return [tool]


@asynccontextmanager
async def served() -> AsyncIterator[str]:
    server = catalogue()
    app = mounted_app(server)  # creates the session manager that running() starts
    async with running(server), LoopbackServer([Mount("/mcp", app=app)]) as h:
        yield f"{h.origin}/mcp/"


def servers(url: str, *, on_demand: bool) -> dict[str, str]:
    spec = {"name": "catalogue", "url": url, "on_demand": on_demand, "summary": "Products."}
    return {"ORACLE_MCP_SERVERS": json.dumps([spec])}


async def _timed(call: Callable[[], Any], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def calls(url: str) -> dict[str, Any]:
    """Bare calls: the function against ``McpClient.call_tool``."""
    client = McpClient(url, name="catalogue")
    args = {"query": "solar panels", "limit": 5}

    async def direct() -> str:
        return lookup(**args)  # type: ignore[arg-type]

    async def remote() -> Any:
        return await client.call_tool("lookup_07", args, {})

    await client.list_tools({})  # negotiated and listed once, as in a running oracle
    best: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        for name, fn in (("in_process", direct), ("mcp", remote)):
            samples = await _timed(fn, CALLS)
            if name not in best or statistics.median(samples) < statistics.median(best[name]):
                best[name] = samples
    await client.aclose()
    return {name: summary(samples) for name, samples in best.items()}


async def turns(plugins: list[OraclePlugin], config: dict[str, str], tool: str) -> list[float]:
    model = tool_then_reply(tool, {"query": "solar panels", "limit": 5})
    runtime = await create_test_runtime(plugins=plugins, config=config, model=model)
    async with runtime:
        await runtime.run_turn("warm up", thread_id="warm")
        samples = []
        for index in range(TURNS):
            start = time.perf_counter()
            await runtime.run_turn("find solar panels", thread_id=f"t{index}")
            samples.append(time.perf_counter() - start)
    return samples


async def first_call_tokens(
    plugins: list[OraclePlugin], config: dict[str, str], *, load: bool = False
) -> int:
    steps = (
        [call_tool("load_capability", {"names": ["catalogue"]}), reply("Loaded.")] if load else []
    )
    model = ScriptedChatModel([*steps, reply("ok")], strict=True)
    runtime = await create_test_runtime(plugins=plugins, config=config, model=model)
    async with runtime:
        if load:
            await runtime.run_turn("load the catalogue", thread_id="t")
        start = len(model.calls)
        built = await runtime.build("hello", thread_id="t")
        await built.agent.ainvoke(built.input, config=built.config, context=built.context)
    call = model.calls[start]
    visible = set(call.tool_names)
    return count_tokens(call.system_prompt or "") + schema_tokens(
        [t for t in built.tools if t.name in visible]
    )


async def measure() -> dict[str, Any]:
    """Latency figures and token deltas."""
    async with served() as url:
        bare = await calls(url)
        local = await turns([InProcess()], {}, "lookup_07")
        remote = await turns(
            [McpClientPlugin()], servers(url, on_demand=False), "catalogue__lookup_07"
        )
        other = synthetic_plugin(0, "on-demand")
        core = await first_call_tokens([], {})
        with_other = await first_call_tokens([synthetic_plugin(0, "on-demand")], {})
        tokens = {
            "on_demand_alone": await first_call_tokens(
                [McpClientPlugin()], servers(url, on_demand=True)
            )
            - core,
            "on_demand_next_to_another": await first_call_tokens(
                [other, McpClientPlugin()], servers(url, on_demand=True)
            )
            - with_other,
            "after_load": await first_call_tokens(
                [McpClientPlugin()], servers(url, on_demand=True), load=True
            )
            - core,
            "always": await first_call_tokens([McpClientPlugin()], servers(url, on_demand=False))
            - core,
        }
    return {
        "calls": bare,
        "turns": {"in_process": summary(local), "mcp": summary(remote)},
        "tokens": tokens,
        "tools": TOOLS,
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    bare, turn, tokens = result["calls"], result["turns"], result["tokens"]
    call_ratio = bare["mcp"]["median_ms"] / max(bare["in_process"]["median_ms"], 1e-9)
    turn_ratio = turn["mcp"]["median_ms"] / turn["in_process"]["median_ms"]
    lines = [
        "MCP tools (loopback MCPServer, stateless streamable HTTP)",
        f"  bare call     in-process {bare['in_process']['median_ms']:.4f} ms   "
        f"MCP {bare['mcp']['median_ms']:.2f} ms (p90 {bare['mcp']['p90_ms']:.2f})   "
        f"+{bare['mcp']['median_ms'] - bare['in_process']['median_ms']:.2f} ms "
        f"({call_ratio:,.0f}x)",
        f"  whole turn    in-process {turn['in_process']['median_ms']:.2f} ms   "
        f"MCP {turn['mcp']['median_ms']:.2f} ms   ratio {turn_ratio:.2f}x",
        f"  first-call tokens added by a {result['tools']}-tool server:",
        f"    on demand, next to another on-demand plugin {tokens['on_demand_next_to_another']:+d}",
        f"    on demand, the only one (the on-demand note) {tokens['on_demand_alone']:+d}",
        f"    after load_capability {tokens['after_load']:+d}",
        f"    always visible {tokens['always']:+d}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
