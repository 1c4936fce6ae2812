"""A streamed response's SSE frames, read as the JavaScript client reads them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from oracle_server.testing import PersistentSseParser, SseEvent

__all__ = ["sse_events"]


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Each frame of ``response`` as it completes (heartbeat comments are skipped)."""
    parser = PersistentSseParser()
    async for chunk in response.aiter_text():
        for event in parser.feed(chunk):
            yield event
    for event in parser.end():
        yield event
