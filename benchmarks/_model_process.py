"""The OpenAI-compatible model double in a process of its own.

``python -m benchmarks._model_process`` serves the double on loopback, scripted as the
server benchmarks script it (a tool call, then the answer after the tool result), and
writes one JSON line on stdout: the environment that points the runtime's
``openai-compatible`` provider at it. EOF on stdin stops it.

A real model runs elsewhere: in its own process the double's work is not counted as the
server's CPU, and both servers of a side-by-side run call the same double.
"""

from __future__ import annotations

import asyncio
import json
import sys

from oracle_server.testing import ChatRequest, OpenAIDouble, Step, ToolCalls

ANSWER = "It is noon in Paris."


def tool_then_answer(request: ChatRequest) -> Step:
    """A tool call on the first model call of a turn, the answer after the tool result."""
    if request.messages and request.messages[-1].get("role") == "tool":
        return ANSWER
    return ToolCalls([("city_time", {"city": "Paris"})])


async def main() -> None:
    """Serve until stdin closes."""
    async with OpenAIDouble(auto_reply=tool_then_answer, keep_requests=16) as double:
        sys.stdout.write(json.dumps(double.env()) + "\n")
        sys.stdout.flush()
        while await asyncio.to_thread(sys.stdin.readline):
            pass


if __name__ == "__main__":
    asyncio.run(main())
