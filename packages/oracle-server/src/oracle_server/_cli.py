"""``oracle``: serve an oracle, inspect it, mint a development token, chat in the terminal.

    oracle serve [--app module:factory] [--host H] [--port P]
    oracle inspect [--app module:factory]
    oracle token [--ttl SECONDS]
    oracle chat [--url URL] [--session ID] [--model ID]

``--app`` names an async factory returning an ``OracleApp`` (default: an oracle of the
installed plugins, named by ``ORACLE_NAME``). ``token``, ``chat`` and ``inspect`` are
development commands: with ``ORACLE_BACKEND`` unset they run in local mode, as
``make run`` serves, and ``token`` and ``chat`` sign as a development user whose key is
kept next to the oracle's development key under ``SQLITE_DATABASE_PATH``
(``./data/sqlite``). ``serve`` takes the environment as it is (``ORACLE_BACKEND``
defaults to ``ixo``).

A configuration error (an invalid or missing variable, a plugin that cannot boot, an
``--app`` that does not load) is one message on stderr and exit code 2; an oracle that
cannot be reached is exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from oracle_core import OracleBootError, OracleError, check_provider
from oracle_server._app import OracleApp
from oracle_server._auth.keys import DEV_KEY_FILE, development_key, oracle_signer
from oracle_server._boot import create_oracle_app
from oracle_server._loop import event_loop_factory, run
from oracle_server._persistence import UserDatabases
from oracle_server._settings import ServerSettings, load_settings
from oracle_ucan import Ed25519Signer, invoke

__all__ = ["CommandError", "main"]

DEV_USER_KEY_FILE = "dev-user-key.txt"
INSPECT_USER = "did:key:inspect"
CONFIGURATION_EXIT_CODE = 2
UNREACHABLE_EXIT_CODE = 1
MAX_WORKERS = 64

AppFactory = Callable[[], Awaitable[OracleApp]]


class CommandError(Exception):
    """Something the user fixes: printed as one message on stderr, then ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = CONFIGURATION_EXIT_CODE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def development_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``ORACLE_BACKEND=local`` when it names no backend (as ``make run``)."""
    if (env.get("ORACLE_BACKEND") or "").strip():
        return dict(env)
    return {**env, "ORACLE_BACKEND": "local"}


@contextlib.contextmanager
def _development_environ() -> Iterator[None]:
    # An --app factory reads os.environ itself; the default backend is set for its call.
    previous = os.environ.get("ORACLE_BACKEND")
    os.environ.update(development_env(os.environ))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("ORACLE_BACKEND", None)
        else:
            os.environ["ORACLE_BACKEND"] = previous


class _HeldRecords(logging.Handler):
    """Keeps the boot's warnings and errors until it is known whether the boot failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _boot_logs() -> Iterator[None]:
    """Show the boot's log only when it succeeds: a failed boot is the one message the
    command prints, not that message again as log lines before it.

    Logging configured by the host is left alone.
    """
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    held = _HeldRecords()
    root.addHandler(held)
    try:
        yield
    finally:
        root.removeHandler(held)
    shown = logging.lastResort
    if shown is not None:
        for record in held.records:
            shown.handle(record)


def _default_factory(*, require_llm: bool = True) -> AppFactory:
    def create() -> Awaitable[OracleApp]:
        name = os.environ.get("ORACLE_NAME") or "Oracle"
        return create_oracle_app({"name": name}, require_llm=require_llm)

    return create


def _load_factory(spec: str | None, *, require_llm: bool = True) -> AppFactory:
    if not spec:
        return _default_factory(require_llm=require_llm)
    module_name, _, attr = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr or "create_app")
    except (ImportError, AttributeError) as exc:
        raise CommandError(
            f"--app {spec} does not load ({type(exc).__name__}: {exc}); name an async "
            "factory as module:function, e.g. example_oracle.server:create_app"
        ) from exc
    if not callable(factory):
        raise CommandError(f"--app {spec} is not callable; name an async factory")
    return factory  # type: ignore[no-any-return]


def _settings(env: Mapping[str, str]) -> ServerSettings:
    return load_settings(development_env(env))


def _dev_user(env: Mapping[str, str]) -> Ed25519Signer:
    settings = _settings(env)
    return development_key(Path(settings.sqlite_path) / DEV_USER_KEY_FILE)


def _oracle_did(env: Mapping[str, str]) -> str:
    settings = _settings(env)
    if settings.oracle_did:
        return settings.oracle_did
    dev_key = Path(settings.sqlite_path) / DEV_KEY_FILE
    if dev_key.exists():  # a local oracle served from this directory (make run)
        return Ed25519Signer.parse(dev_key.read_text().strip()).did()
    signer = oracle_signer(settings)
    if signer is None:
        raise CommandError(
            "the oracle's DID is unknown: set ORACLE_DID, or unset ORACLE_BACKEND to sign "
            "for the local oracle served from this directory"
        )
    return signer.did()


def dev_token(ttl: int = 600, env: Mapping[str, str] | None = None) -> str:
    """A development auth invocation from the local dev user to this oracle.

    Args:
        ttl: Seconds the invocation is valid.
        env: The environment (default ``os.environ``); local mode unless it names a
            backend.

    Raises:
        EnvValidationError: a variable is invalid.
        CommandError: the oracle's DID cannot be known.
    """
    environment = os.environ if env is None else env
    user = _dev_user(environment)
    return invoke(
        user,
        audience=_oracle_did(environment),
        capability={"with": user.did(), "can": "*"},
        expiration=int(time.time()) + ttl,
    ).to_base64()


async def _serve(args: argparse.Namespace) -> None:
    with _boot_logs():
        app = await _load_factory(args.app)()
    settings = app.state.settings
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    if settings.worker_hub_fd is None:  # a worker's supervisor prints the banner
        print(
            f"Oracle '{app.state.oracle_name}' on http://{host}:{port} (DID {app.state.oracle_did})"
        )
    await app.serve(host=host, port=port, shutdown_trigger=_signals())


def _supervise(args: argparse.Namespace) -> None:
    """Check the settings, make the key, and become the supervisor (never returns)."""
    settings = load_settings(os.environ)
    if settings.matrix_active:
        raise CommandError(
            "workers.matrix_unsupported: --workers runs several processes, and the Matrix "
            "layer (ORACLE_BACKEND=ixo) syncs one account from one process; serve it with "
            "one worker per replica, or set MATRIX_ENABLED=false"
        )
    event_loop_factory(os.environ)  # EVENT_LOOP checked here, with its code
    # Made once, before the workers start, so they all sign with the same key.
    oracle_signer(settings)
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    spec = {
        "argv": ["--app", args.app] if args.app else [],
        "stop_seconds": settings.shutdown_drain_seconds + 10,
        "workers": args.workers,
        "host": host,
        "port": port,
        "banner": f"Oracle on http://{host}:{port} ({args.workers} workers)",
    }
    sys.stdout.flush()
    sys.stderr.flush()
    # A process image with only the supervisor's modules (oracle_server._workers).
    os.execv(sys.executable, [sys.executable, "-m", "oracle_server._workers", json.dumps(spec)])


def _signals() -> Callable[[], Awaitable[None]]:
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def stopped() -> None:
        await stop.wait()

    return stopped


def model_status(settings: ServerSettings) -> str:
    """The ``Model`` line of ``inspect``: the default model, or why there is none."""
    try:
        check_provider(settings)
    except OracleBootError as exc:
        return f"Model: none configured ({exc}); every turn fails until it is set"
    if settings.llm_provider == "openai-compatible":
        main = settings.role_models().get("main", settings.openai_compatible_model)
        return f"Model: {main} (openai-compatible, {settings.openai_compatible_base_url})"
    return f"Model: {settings.llm_provider}"


def print_tool_policy(report: Mapping[str, Any]) -> None:
    """The effective tool policy (``OracleRuntime.tool_policy_report``), as ``inspect``
    prints it."""
    rules = report["rules"]
    print("Tool policy")
    print(f"  allow: {', '.join(rules['allow']) or '(none)'}")
    print(f"  deny: {', '.join(rules['deny']) or '(none)'}")
    required = ", ".join(rules["approval_required"]) or "(none)"
    destructive = " + every destructive tool" if rules["approve_destructive"] else ""
    print(f"  approval required: {required}{destructive}")
    if rules["data_scopes"]:
        print(f"  data scopes: {json.dumps(rules['data_scopes'], sort_keys=True)}")
    for name, rule in report["denied"].items():
        print(f"  - {name}: denied ({rule})")
    for name, rule in report["approval_required"].items():
        print(f"  ? {name}: needs approval ({rule})")


async def _inspect(args: argparse.Namespace) -> None:
    from oracle_core import SessionInfo, TurnRequest, UserInfo

    with _development_environ(), _boot_logs():
        app = await _load_factory(args.app, require_llm=False)()
    try:
        print(model_status(app.state.settings))
        status = app.plugins.status()
        print("Plugins")
        for name in status.loaded:
            manifest = app.runtime.registries.manifests[name]
            backend = status.backends.get(name)
            print(
                f"  {name} {status.versions.get(name, '')} ({manifest.visibility})"
                + (f" backend: {backend}" if backend else "")
            )
        for excluded in status.excluded:
            print(f"  - {excluded.plugin}: {excluded.code} ({excluded.reason})")
        for failed in status.failed:
            print(f"  ! {failed.plugin}: {failed.reason}")
        tools = "not built"
        try:
            built = await app.runtime.build_agent(
                TurnRequest(
                    user=UserInfo(did=INSPECT_USER),
                    session=SessionInfo(id="inspect"),
                    message="inspect",
                )
            )
        except OracleBootError as exc:  # no model: the build stops at the model
            print(f"System prompt tokens per section: not built ({exc.code})")
        else:
            tools = str(len(built.tools))
            print("System prompt tokens per section")
            for key, tokens in built.prompt.token_report().items():
                print(f"  {key:24s} {tokens:6d}")
        finally:
            # The build opened a user database for its made-up user; inspecting stores nothing.
            if isinstance(app.state.checkpointers, UserDatabases):
                await app.state.checkpointers.remove_user(INSPECT_USER)
        print_tool_policy(app.runtime.tool_policy_report())
        print("Routes")
        for route in app.state.runtime.routes:
            print(f"  {route[0]}: {getattr(route[1], 'path', route[1])}")
        print(f"Tools bound: {tools}")
    finally:
        await app.aclose()


async def _chat(args: argparse.Namespace) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {dev_token()}", "X-Auth-Type": "ucan"}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=None) as client:
        session_id = args.session
        if not session_id:
            session_id = await _new_session(client, args.url)
        print(f"Session {session_id}. Empty line or Ctrl-D to quit.")
        while True:
            try:
                text = await asyncio.to_thread(input, "you> ")
            except EOFError:
                return
            if not text.strip():
                return
            await _stream_turn(client, session_id, text, model=args.model)


async def _new_session(client: Any, url: str) -> str:
    import httpx

    try:
        response = await client.post("/sessions")
    except httpx.TransportError as exc:
        raise CommandError(
            f"cannot reach the oracle at {url} ({type(exc).__name__}); start it with "
            "`make run` (or `oracle serve`), or pass --url",
            exit_code=UNREACHABLE_EXIT_CODE,
        ) from exc
    if response.status_code == 401:
        raise CommandError(
            f"the oracle at {url} refused the development token (401): it signs for the "
            "local oracle whose key is under SQLITE_DATABASE_PATH (./data/sqlite); run "
            "`oracle chat` from the directory the oracle serves from, or set "
            "SQLITE_DATABASE_PATH or ORACLE_DID to match it"
        )
    if response.status_code != 201:
        raise CommandError(
            f"the oracle at {url} answered {response.status_code} to POST /sessions: "
            f"{response.text[:200]}"
        )
    return str(response.json()["sessionId"])


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
    serve.add_argument(
        "--workers",
        type=_worker_count,
        default=1,
        help="processes serving the port, sharing turn locks, runs and rate limits (1)",
    )
    inspect_cmd = commands.add_parser("inspect", help="plugin status, prompt tokens, routes")
    inspect_cmd.add_argument("--app", help="module:factory returning an OracleApp")
    token = commands.add_parser("token", help="mint a development auth invocation")
    token.add_argument("--ttl", type=int, default=600)
    chat = commands.add_parser("chat", help="talk to an oracle in the terminal")
    chat.add_argument("--url", default="http://127.0.0.1:3000")
    chat.add_argument("--session")
    chat.add_argument("--model", help="a model id listed by GET /models (default: the oracle's)")
    args = parser.parse_args(argv)
    try:
        if args.command == "token":
            print(dev_token(args.ttl))
            return
        if (
            args.command == "serve"
            and args.workers > 1
            and "ORACLE_WORKER_HUB_FD" not in os.environ
        ):
            _supervise(args)
        if args.command == "serve":
            run(_serve(args))
        else:
            runner = {"inspect": _inspect, "chat": _chat}[args.command]
            asyncio.run(runner(args))
    except KeyboardInterrupt:
        sys.exit(130)
    except CommandError as exc:
        _fail(args.command, str(exc), exc.exit_code)
    except OracleError as exc:
        # Boot and settings errors carry their code and fix; the traceback helps nobody.
        _fail(args.command, f"{exc.code}: {exc}", CONFIGURATION_EXIT_CODE)


def _worker_count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_WORKERS}")
    return count


def _fail(command: str, message: str, exit_code: int) -> None:
    print(f"oracle {command}: {message}", file=sys.stderr)
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
