"""``oracle``: serve an oracle, inspect it, mint a development token, chat in the terminal.

    oracle serve [--app module:factory] [--host H] [--port P]
    oracle inspect [--app module:factory]
    oracle token [--ttl SECONDS]
    oracle chat [--url URL] [--session ID] [--model ID]

``--app`` names an async factory returning an ``OracleApp`` (default: an oracle of the
installed plugins, named by ``ORACLE_NAME``). ``token`` and ``chat`` work in local mode
(``ORACLE_BACKEND=local``): they sign as a development user whose key is kept next to
the oracle's development key under ``SQLITE_DATABASE_PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from oracle_server._app import OracleApp
from oracle_server._auth.keys import DEV_KEY_FILE, development_key, oracle_signer
from oracle_server._boot import create_oracle_app
from oracle_server._settings import load_settings
from oracle_ucan import Ed25519Signer, invoke

__all__ = ["main"]

DEV_USER_KEY_FILE = "dev-user-key.txt"

AppFactory = Callable[[], Awaitable[OracleApp]]


def _default_factory() -> Awaitable[OracleApp]:
    return create_oracle_app({"name": os.environ.get("ORACLE_NAME") or "Oracle"})


def _load_factory(spec: str | None) -> AppFactory:
    if not spec:
        return _default_factory
    module_name, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module_name), attr or "create_app")
    if not callable(factory):
        raise SystemExit(f"{spec} is not callable")
    return factory  # type: ignore[no-any-return]


def _dev_user() -> Ed25519Signer:
    settings = load_settings(os.environ)
    return development_key(Path(settings.sqlite_path) / DEV_USER_KEY_FILE)


def _oracle_did() -> str:
    settings = load_settings(os.environ)
    if settings.oracle_did:
        return settings.oracle_did
    dev_key = Path(settings.sqlite_path) / DEV_KEY_FILE
    if dev_key.exists():  # a local oracle served from this directory (make run)
        return Ed25519Signer.parse(dev_key.read_text().strip()).did()
    signer = oracle_signer(settings)
    if signer is None:
        raise SystemExit("set ORACLE_DID, or run with ORACLE_BACKEND=local")
    return signer.did()


def dev_token(ttl: int = 600) -> str:
    """A development auth invocation from the local dev user to this oracle."""
    user = _dev_user()
    return invoke(
        user,
        audience=_oracle_did(),
        capability={"with": user.did(), "can": "*"},
        expiration=int(time.time()) + ttl,
    ).to_base64()


async def _serve(args: argparse.Namespace) -> None:
    app = await _load_factory(args.app)()
    settings = app.state.settings
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    print(f"Oracle '{app.state.oracle_name}' on http://{host}:{port} (DID {app.state.oracle_did})")
    await app.serve(host=host, port=port, shutdown_trigger=_signals())


def _signals() -> Callable[[], Awaitable[None]]:
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def stopped() -> None:
        await stop.wait()

    return stopped


async def _inspect(args: argparse.Namespace) -> None:
    from oracle_core import SessionInfo, TurnRequest, UserInfo

    app = await _load_factory(args.app)()
    try:
        status = app.plugins.status()
        print("Plugins")
        for name in status.loaded:
            manifest = app.runtime.registries.manifests[name]
            print(f"  {name} {status.versions.get(name, '')} ({manifest.visibility})")
        for excluded in status.excluded:
            print(f"  - {excluded.plugin}: {excluded.code} ({excluded.reason})")
        for failed in status.failed:
            print(f"  ! {failed.plugin}: {failed.reason}")
        built = await app.runtime.build_agent(
            TurnRequest(
                user=UserInfo(did="did:key:inspect"),
                session=SessionInfo(id="inspect"),
                message="inspect",
            )
        )
        print("System prompt tokens per section")
        for key, tokens in built.prompt.token_report().items():
            print(f"  {key:24s} {tokens:6d}")
        print("Routes")
        for route in app.state.runtime.routes:
            print(f"  {route[0]}: {getattr(route[1], 'path', route[1])}")
        print(f"Tools bound: {len(built.tools)}")
    finally:
        await app.aclose()


async def _chat(args: argparse.Namespace) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {dev_token()}", "X-Auth-Type": "ucan"}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=None) as client:
        session_id = args.session
        if not session_id:
            response = await client.post("/sessions")
            response.raise_for_status()
            session_id = response.json()["sessionId"]
        print(f"Session {session_id}. Empty line or Ctrl-D to quit.")
        while True:
            try:
                text = await asyncio.to_thread(input, "you> ")
            except EOFError:
                return
            if not text.strip():
                return
            await _stream_turn(client, session_id, text, model=args.model)


async def _stream_turn(
    client: Any, session_id: str, text: str, *, model: str | None = None
) -> None:
    body: dict[str, Any] = {"message": text, "stream": True}
    if model is not None:
        body["model"] = model
    async with client.stream("POST", f"/messages/{session_id}", json=body) as response:
        if response.status_code != 200:
            print(f"error {response.status_code}: {(await response.aread()).decode()}")
            return
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                _show(event, json.loads(line[6:]))
    print()


def _show(event: str, data: Any) -> None:
    if event == "message":
        print(data.get("content", ""), end="", flush=True)
    elif event == "tool_call":
        args = {k: v for k, v in (data.get("args") or {}).items() if k != "toolName"}
        if data.get("status") == "isRunning":
            print(f"\n  [tool] {data.get('toolName')}({json.dumps(args, ensure_ascii=False)})")
        else:
            print(f"  [done] {data.get('toolName')} -> {str(data.get('output', ''))[:120]}")
    elif event == "error":
        print(f"\n  [error] {data.get('error')}")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``oracle`` command."""
    parser = argparse.ArgumentParser(prog="oracle", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve an oracle over HTTP")
    serve.add_argument("--app", help="module:factory returning an OracleApp")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    inspect_cmd = commands.add_parser("inspect", help="plugin status, prompt tokens, routes")
    inspect_cmd.add_argument("--app", help="module:factory returning an OracleApp")
    token = commands.add_parser("token", help="mint a development auth invocation")
    token.add_argument("--ttl", type=int, default=600)
    chat = commands.add_parser("chat", help="talk to an oracle in the terminal")
    chat.add_argument("--url", default="http://127.0.0.1:3000")
    chat.add_argument("--session")
    chat.add_argument("--model", help="a model id listed by GET /models (default: the oracle's)")
    args = parser.parse_args(argv)
    if args.command == "token":
        print(dev_token(args.ttl))
        return
    runner = {"serve": _serve, "inspect": _inspect, "chat": _chat}[args.command]
    try:
        asyncio.run(runner(args))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
