"""Test doubles that speak the real protocols on loopback, and ports of the client's parsers.

- `OpenAIDouble`: a scripted OpenAI chat-completions server (JSON, SSE streaming, tool
  calls) to use as the oracle's model through ``LLM_PROVIDER=openai-compatible``.
- `PersistentSseParser` / `PerReadSseParser`: the SSE parsers of client SDK 1.4.0 and
  1.1.x, to check that the server's SSE body reads the same with both (SRV-70 b).
- `BlocksyncDouble`: Blocksync's GraphQL endpoint serving ``did:ixo`` documents.
- `Synapse` (in ``oracle_server.testing.synapse``): a real Matrix homeserver from PyPI in
  a cached virtual environment.
- `serving(app)`: an ``OracleApp`` on loopback for the duration of a block;
  `auth_headers(user, oracle_did)`: headers of a development auth invocation.
"""

from oracle_server.testing.blocksync import BlocksyncDouble
from oracle_server.testing.openai_double import ChatRequest, OpenAIDouble, Step, ToolCalls
from oracle_server.testing.server import auth_headers, free_port, serving
from oracle_server.testing.sse import (
    ACCEPTED_EVENTS,
    PER_READ_ACCEPTED_EVENTS,
    PerReadSseParser,
    PersistentSseParser,
    SseEvent,
    frame_boundaries,
    parse_stream,
    split_everywhere,
)

__all__ = [
    "ACCEPTED_EVENTS",
    "PER_READ_ACCEPTED_EVENTS",
    "BlocksyncDouble",
    "ChatRequest",
    "OpenAIDouble",
    "PerReadSseParser",
    "PersistentSseParser",
    "SseEvent",
    "Step",
    "ToolCalls",
    "auth_headers",
    "frame_boundaries",
    "free_port",
    "parse_stream",
    "serving",
    "split_everywhere",
]
