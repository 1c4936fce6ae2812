"""A scripted conversation in the terminal that shows the meta-tools at work.

The model is scripted (no LLM needed): it lists capabilities, loads the unit converter,
converts, and in a second turn of the same thread converts again without reloading,
because ``loaded_plugins`` persisted in the SQLite checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from example_oracle import example_plugins
from oracle_core import (
    MainAgentHooks,
    OracleConfig,
    SessionInfo,
    TurnRequest,
    UserInfo,
    create_runtime,
)
from oracle_core.testing import ScriptedChatModel, call_tool, reply

CONFIG = OracleConfig(
    name="Example Oracle",
    org="the oracle runtime project",
    description="a small assistant that keeps notes and converts units",
)
USER = UserInfo(did="did:key:z6MkExampleUserOfTheDemoConversation", timezone="Europe/Paris")


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            call_tool("list_capabilities", {}),
            call_tool("load_capability", {"names": ["unit-converter"]}),
            call_tool("convert_units", {"value": 26.2, "from_unit": "mi", "to_unit": "km"}),
            reply("A marathon, 26.2 miles, is about 42.16 km."),
            call_tool("convert_units", {"value": 20, "from_unit": "c", "to_unit": "f"}),
            call_tool("save_note", {"text": "20 °C is 68 °F"}),
            reply("20 °C is 68 °F. I noted it for you."),
        ],
        strict=True,
    )


def _show(messages: Sequence[BaseMessage], out: list[str]) -> None:
    for message in messages:
        if isinstance(message, HumanMessage):
            out.append(f"  user      > {message.text}")
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                args = json.dumps(call["args"], ensure_ascii=False)
                out.append(f"  tool call > {call['name']}({args})")
            if message.text:
                out.append(f"  oracle    > {message.text}")
        elif isinstance(message, ToolMessage):
            text = str(message.content)
            out.append(f"  result    < {text if len(text) <= 110 else text[:107] + '...'}")


async def run_demo(data_dir: Path) -> list[str]:
    """Run the two scripted turns; returns the transcript lines."""
    model = _script()
    env = {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(data_dir / "sqlite"),
        "NOTES_DATABASE_PATH": str(data_dir / "notes.sqlite"),
        # The scripted model replaces the provider; these only satisfy the boot check.
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "scripted",
    }
    hooks = MainAgentHooks(resolve_model=lambda role, **_: model)
    out: list[str] = []
    async with await create_runtime(
        CONFIG, plugins=example_plugins(), hooks=hooks, env=env, discover_entry_points=False
    ) as runtime:
        out.append(f"Booted: {', '.join(runtime.plugins.status().loaded)}")
        session = SessionInfo(id="demo-thread")
        for text in ("How many km is a marathon?", "And 20 °C in Fahrenheit? Note it."):
            built = await runtime.build_agent(TurnRequest(user=USER, session=session, message=text))
            if not out[1:]:
                tokens = built.prompt.token_report()
                out.append(
                    f"System prompt: {tokens['total']} tokens; tools bound: {len(built.tools)}"
                )
            visible_before = len(model.calls)
            before = await built.agent.aget_state(built.config)
            count = len(before.values.get("messages", [])) if before.values else 0
            state: dict[str, Any] = await built.agent.ainvoke(
                built.input, config=built.config, context=built.context
            )
            out.append("")
            _show(state["messages"][count:], out)
            seen = list(
                dict.fromkeys(", ".join(c.tool_names) for c in model.calls[visible_before:])
            )
            out.append("  tools the model could see: " + "  ->  ".join(f"[{s}]" for s in seen))
            out.append(f"  loaded_plugins after the turn: {state.get('loaded_plugins', [])}")
    return out


def main() -> None:
    """Entry point of ``make run`` until the HTTP server exists."""
    with tempfile.TemporaryDirectory(prefix="example-oracle-") as tmp:
        for line in asyncio.run(run_demo(Path(tmp))):
            print(line)


if __name__ == "__main__":
    main()
