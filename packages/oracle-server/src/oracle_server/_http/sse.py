"""Server-sent events exactly as the JavaScript client parses them (SRV-29 … 32).

Each frame is ``event: <name>\\n[id: <n>\\n]data: <one-line JSON>\\n\\n`` and is written as one
body chunk: the 1.1.x client parses every network read on its own and loses a frame split
across two writes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["HEARTBEAT", "SSE_HEADERS", "frame"]

HEARTBEAT = b": heartbeat\n\n"
HEARTBEAT_SECONDS = 15.0
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


def frame(event: str, data: Any, *, event_id: int | None = None) -> bytes:
    """One SSE frame; JSON escapes keep the data on a single line."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    head = f"event: {event}\n"
    if event_id is not None:
        head += f"id: {event_id}\n"
    return f"{head}data: {payload}\n\n".encode()
