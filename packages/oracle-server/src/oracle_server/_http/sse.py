"""Server-sent events exactly as the JavaScript client parses them (SRV-29 … 32).

Each frame is ``event: <name>\\n[id: <n>\\n]data: <one-line JSON>\\n\\n`` and is written as one
body chunk: the 1.1.x client parses every network read on its own and loses a frame split
across two writes.

Every frame encodes: a lone surrogate (which UTF-8 cannot hold; a model or a tool can
produce one through a JSON ``\\udXXX`` escape) becomes U+FFFD, so one bad string never
costs a frame, let alone the frames written with it.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["HEARTBEAT", "SSE_HEADERS", "frame", "json_text"]

_SURROGATE = re.compile("[\\ud800-\\udfff]")

HEARTBEAT = b": heartbeat\n\n"
HEARTBEAT_SECONDS = 15.0
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def json_text(data: Any) -> str:
    """Compact JSON that UTF-8 can always encode (lone surrogates become U+FFFD)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return _SURROGATE.sub("\ufffd", text)


def frame(event: str, data: Any, *, event_id: int | None = None) -> bytes:
    """One SSE frame; JSON escapes keep the data on a single line."""
    payload = json_text(data)
    head = f"event: {event}\n"
    if event_id is not None:
        head += f"id: {event_id}\n"
    return f"{head}data: {payload}\n\n".encode()
