"""``python -m example_oracle``: serve the example oracle on http://127.0.0.1:3000."""

from __future__ import annotations

import asyncio
import os
import signal

from example_oracle.server import create_app
from oracle_server import run

__all__ = ["main"]

HELP = """\
Example oracle on http://{host}:{port}  (local mode: did:key users, no Matrix, no chain)
Talk to it:
  .venv/bin/oracle chat --url http://{host}:{port}           # a terminal chat
  TOKEN=$(.venv/bin/oracle token)                              # a development UCAN
  curl -s -X POST -H "Authorization: Bearer $TOKEN" -H "X-Auth-Type: ucan" \\
       http://{host}:{port}/sessions
API docs: http://{host}:{port}/docs"""

NO_MODEL = (
    "No language model is configured: every message answers with an error until you set "
    "LLM_PROVIDER=openai-compatible with OPENAI_COMPATIBLE_BASE_URL and "
    "OPENAI_COMPATIBLE_MODEL (a local server such as Ollama or vLLM), or "
    "OPEN_ROUTER_API_KEY / NEBIUS_API_KEY."
)


def _model_configured() -> bool:
    return any(
        os.environ.get(var)
        for var in ("OPENAI_COMPATIBLE_BASE_URL", "OPEN_ROUTER_API_KEY", "NEBIUS_API_KEY")
    )


async def _run() -> None:
    app = await create_app()
    settings = app.state.settings
    print(HELP.format(host=settings.host, port=settings.port), flush=True)
    if not _model_configured():
        print(NO_MODEL, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await app.serve(host=settings.host, port=settings.port, shutdown_trigger=stop.wait)


def main() -> None:
    """Serve until Ctrl-C."""
    run(_run())


if __name__ == "__main__":
    main()
