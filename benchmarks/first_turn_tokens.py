"""First-turn tokens: the system prompt plus the tool schemas the model sees on turn one.

A runtime of 17 synthetic plugins of realistic manifest size (7 always, 10 on-demand) is
measured, then the same runtime with 100 more on-demand plugins (they should cost almost
nothing: on-demand plugins are neither in the prompt nor bound visibly until loaded), and
both against the naive baseline that advertises and binds every tool.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.utils.function_calling import convert_to_openai_tool

from benchmarks._common import local_env
from benchmarks.synthetic import synthetic_plugin, synthetic_plugins
from oracle_core import (
    MainAgentHooks,
    OraclePlugin,
    SessionInfo,
    TurnRequest,
    UserInfo,
    count_tokens,
    create_runtime,
)
from oracle_core.testing import ScriptedChatModel, reply

USER = UserInfo(did="did:key:z6MkTokenBenchmarkUser", timezone="UTC")
FIXED_TIME = "2026-01-01T09:00:00+00:00"


def schema_tokens(tools: list[Any]) -> int:
    """Tokens of the tools' OpenAI function schemas, as a provider receives them."""
    return sum(
        count_tokens(json.dumps(convert_to_openai_tool(t), separators=(",", ":"))) for t in tools
    )


async def first_turn(plugins: list[OraclePlugin], data: Path) -> dict[str, int]:
    """Prompt and visible-tool tokens of the first model call of a new thread."""
    model = ScriptedChatModel([reply("ok")])
    runtime = await create_runtime(
        {"name": "Token Benchmark Oracle", "org": "Example Org", "description": "a helper"},
        plugins=plugins,
        hooks=MainAgentHooks(resolve_model=lambda role, **_: model),
        env=local_env(data),
        discover_entry_points=False,
    )
    try:
        user = UserInfo(did=USER.did, timezone="UTC", current_time=FIXED_TIME)
        built = await runtime.build_agent(
            TurnRequest(user=user, session=SessionInfo(id="t"), message="hello")
        )
        await built.agent.ainvoke(built.input, config=built.config, context=built.context)
        visible = set(model.calls[0].tool_names)
        bound = [t for t in built.tools if t.name in visible]
        prompt = count_tokens(model.calls[0].system_prompt or "")
        tools = schema_tokens(bound)
        all_tools = schema_tokens(built.tools)
        return {
            "prompt": prompt,
            "tools": tools,
            "total": prompt + tools,
            "visible_tools": len(bound),
            "all_tools": len(built.tools),
            "all_tool_tokens": all_tools,
        }
    finally:
        await runtime.aclose()


async def measure() -> dict[str, Any]:
    """Figures for the base runtime, +100 on-demand plugins, and the bind-everything baseline."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        base = await first_turn(synthetic_plugins(always=7, on_demand=10), data / "a")
        more = synthetic_plugins(always=7, on_demand=10) + [
            synthetic_plugin(100 + i, "on-demand") for i in range(100)
        ]
        grown = await first_turn(more, data / "b")
        # Baseline: every plugin always visible (all in the prompt, all tools bound).
        everything = [synthetic_plugin(i, "always") for i in range(17)]
        naive = await first_turn(everything, data / "c")
    return {"base": base, "grown": grown, "naive": naive}


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    base, grown, naive = result["base"], result["grown"], result["naive"]
    extra = grown["total"] - base["total"]
    saving = 1 - base["total"] / naive["total"]
    return (
        "First-turn tokens (o200k_base; system prompt + visible tool schemas)\n"
        f"  17 plugins (7 always, 10 on-demand): {base['total']} tokens "
        f"(prompt {base['prompt']}, {base['visible_tools']} tool schemas {base['tools']})\n"
        f"  +100 on-demand plugins: {grown['total']} tokens, {extra:+d} "
        f"(target <= 100); {grown['all_tools']} tools bound, {grown['visible_tools']} visible\n"
        f"  baseline, all 17 plugins advertised and bound: {naive['total']} tokens "
        f"(prompt {naive['prompt']}, tools {naive['tools']})\n"
        f"  reduction against binding every tool: {saving:.1%}"
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
