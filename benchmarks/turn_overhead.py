"""Turn overhead: ``run_turn`` against raw LangChain ``create_agent`` in the same run.

Both sides use the same scripted model (one tool call, then an answer), the same tool
handlers and an ``AsyncSqliteSaver`` per user. The raw side builds its agent per turn too,
as a per-request server must; the runtime adds its own work on top (checkpoint snapshot,
hooks, prompt, four framework middleware, the capability gate).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool

from benchmarks._common import local_env, summary, tool_then_reply
from benchmarks.synthetic import QueryArgs, synthetic_plugins
from oracle_core import (
    MainAgentHooks,
    SessionInfo,
    SqliteCheckpointers,
    TurnRequest,
    UserInfo,
    create_runtime,
)

TURNS = 150
WARMUP = 10
USER = UserInfo(did="did:key:z6MkBenchmarkUser", timezone="UTC")


def _raw_tools(plugins: list[Any]) -> list[StructuredTool]:
    tools = []
    for plugin in plugins:
        for suffix in ("search", "get"):
            name = f"{plugin.name.replace('-', '_')}_{suffix}"

            def handler(**kwargs: Any) -> str:
                return '[{"id": "x-1", "title": "found"}]'

            schema = QueryArgs if suffix == "search" else None
            tools.append(
                StructuredTool.from_function(
                    handler, name=name, description=f"{name} tool", args_schema=schema
                )
                if schema
                else StructuredTool.from_function(
                    lambda record_id, include_history=False: "{}",
                    name=name,
                    description=f"{name} tool",
                )
            )
    return tools


async def measure(turns: int = TURNS) -> dict[str, Any]:
    """Per-turn latency of both sides, interleaved so that drift hits both equally."""
    plugins = synthetic_plugins(always=3, on_demand=0)
    model = tool_then_reply("synthetic_0_search", {"query": "north site"})
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        runtime = await create_runtime(
            {"name": "Benchmark Oracle"},
            plugins=plugins,
            hooks=MainAgentHooks(resolve_model=lambda role, **_: model),
            env=local_env(data / "oracle"),
            discover_entry_points=False,
        )
        raw_savers = SqliteCheckpointers(data / "raw")
        raw_saver = await raw_savers(USER.did)
        raw_tools = _raw_tools(plugins)
        built = await runtime.build_agent(
            TurnRequest(user=USER, session=SessionInfo(id="probe"), message="probe")
        )
        prompt = built.prompt.text

        async def raw_turn(thread: str) -> None:
            agent = create_agent(model, raw_tools, system_prompt=prompt, checkpointer=raw_saver)
            await agent.ainvoke(
                {"messages": [HumanMessage("Find open invoices about the north site")]},
                {"configurable": {"thread_id": thread}},
            )

        prebuilt = create_agent(model, raw_tools, system_prompt=prompt, checkpointer=raw_saver)

        async def raw_prebuilt_turn(thread: str) -> None:
            await prebuilt.ainvoke(
                {"messages": [HumanMessage("Find open invoices about the north site")]},
                {"configurable": {"thread_id": "pre-" + thread}},
            )

        async def oracle_turn(thread: str) -> None:
            await runtime.run_turn(
                TurnRequest(
                    user=USER,
                    session=SessionInfo(id=thread),
                    message="Find open invoices about the north site",
                )
            )

        raw: list[float] = []
        pre: list[float] = []
        ours: list[float] = []
        try:
            for i in range(turns + WARMUP):
                thread = f"t{i // 10}"
                for fn, bucket in ((raw_turn, raw), (raw_prebuilt_turn, pre), (oracle_turn, ours)):
                    start = time.perf_counter()
                    await fn(thread)
                    if i >= WARMUP:
                        bucket.append(time.perf_counter() - start)
        finally:
            await raw_savers.aclose()
            await runtime.aclose()
    raw_s, pre_s, ours_s = summary(raw), summary(pre), summary(ours)
    return {
        "turns": turns,
        "raw_create_agent": raw_s,
        "raw_prebuilt": pre_s,
        "run_turn": ours_s,
        "ratio_median": ours_s["median_ms"] / raw_s["median_ms"],
        "ratio_mean": ours_s["mean_ms"] / raw_s["mean_ms"],
        "ratio_prebuilt_median": ours_s["median_ms"] / pre_s["median_ms"],
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    raw, pre, ours = result["raw_create_agent"], result["raw_prebuilt"], result["run_turn"]
    return (
        f"Turn overhead ({result['turns']} turns each, one tool call + answer, SQLite saver)\n"
        f"  raw create_agent per turn: median {raw['median_ms']:.2f} ms, "
        f"mean {raw['mean_ms']:.2f} ms\n"
        f"  raw agent compiled once:   median {pre['median_ms']:.2f} ms, "
        f"mean {pre['mean_ms']:.2f} ms\n"
        f"  oracle run_turn:           median {ours['median_ms']:.2f} ms, "
        f"mean {ours['mean_ms']:.2f} ms\n"
        f"  ratio run_turn / raw: {result['ratio_median']:.3f}x (median), "
        f"{result['ratio_mean']:.3f}x (mean); target <= 1.15x\n"
        f"  ratio run_turn / raw compiled once: {result['ratio_prebuilt_median']:.3f}x (median);"
        " target <= 1.10x"
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
