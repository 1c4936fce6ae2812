"""Shared helpers: a cyclic scripted model, a local env, and timing statistics."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from oracle_core.testing import ScriptedChatModel


def local_env(data_dir: Path) -> dict[str, str]:
    """Environment of a local oracle whose provider settings are never contacted."""
    return {
        "ORACLE_BACKEND": "local",
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "scripted",
        "SQLITE_DATABASE_PATH": str(data_dir),
    }


def tool_then_reply(tool: str, args: dict[str, object]) -> ScriptedChatModel:
    """A model that calls ``tool`` once per turn, then answers, forever."""

    def step(messages: Sequence[BaseMessage], visible: tuple[str, ...]) -> AIMessage:
        if messages and isinstance(messages[-1], ToolMessage):
            return AIMessage(content="Done.")
        return AIMessage(content="", tool_calls=[{"name": tool, "args": args, "id": None}])

    return ScriptedChatModel([step], on_exhausted="repeat_last")


def summary(samples: Sequence[float]) -> dict[str, float]:
    """Median, mean, p90 and min of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9) - 1] * 1000,
        "min_ms": ordered[0] * 1000,
    }
