"""Serving an ``OracleApp`` on loopback for tests, and minting development tokens."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from oracle_core.testing import mark_sensitive
from oracle_server._app import OracleApp
from oracle_ucan import Ed25519Signer, invoke

__all__ = ["auth_headers", "free_port", "serving"]


def free_port() -> int:
    """An ephemeral port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serving(app: OracleApp, *, port: int | None = None) -> AsyncIterator[str]:
    """Serve ``app`` with Hypercorn on 127.0.0.1 until the block ends; yields the base URL.

    The app is closed when the block ends (``OracleApp.serve`` closes it).
    """
    chosen = port or free_port()
    stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(
        app.serve(host="127.0.0.1", port=chosen, shutdown_trigger=stop.wait, freeze_gc=False)
    )
    base_url = f"http://127.0.0.1:{chosen}"
    try:
        await _until_listening(chosen, task)
        yield base_url
    finally:
        stop.set()
        await task


async def _until_listening(port: int, task: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if task.done():
            task.result()  # re-raises a failure to start
            raise RuntimeError("the server stopped before it listened")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise TimeoutError(f"nothing listened on port {port}")


def auth_headers(user: Ed25519Signer, oracle_did: str, *, ttl: int = 600) -> dict[str, str]:
    """Headers of an auth invocation from ``user`` to the oracle (did:key, local mode)."""
    token = invoke(
        user,
        audience=oracle_did,
        capability={"with": user.did(), "can": "*"},
        expiration=int(time.time()) + ttl,
    ).to_base64()
    mark_sensitive(token)
    return {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}
