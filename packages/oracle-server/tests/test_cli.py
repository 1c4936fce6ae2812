"""The ``oracle`` command: token, inspect, serve and the terminal chat's stream handling."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from oracle_server import create_oracle_app
from oracle_server._cli import _stream_turn, main
from oracle_server.testing import OpenAIDouble, ToolCalls, serving
from oracle_ucan import Ed25519Signer, validate_auth_invocation


def local_env(tmp_path: Path, double: OpenAIDouble | None = None) -> dict[str, str]:
    env = {"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path)}
    # Under coverage's subprocess patch the child measures itself as well.
    env.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    if double is not None:
        env.update(double.env())
    else:
        env.update(
            {
                "LLM_PROVIDER": "openai-compatible",
                "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
                "OPENAI_COMPATIBLE_MODEL": "m",
            }
        )
    return env


async def test_token_is_a_valid_auth_invocation_for_the_local_oracle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in local_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    app = await create_oracle_app(
        {"name": "CLI Oracle"}, discover_entry_points=False, skip_graceful_shutdown=True
    )
    try:
        main(["token", "--ttl", "300"])
        token = capsys.readouterr().out.strip()
        result = await validate_auth_invocation(token, audience=app.state.oracle_did)
        assert result.ok, result.error
        # The same development user every time.
        main(["token"])
        again = capsys.readouterr().out.strip()
        second = await validate_auth_invocation(again, audience=app.state.oracle_did)
        assert second.invoker == result.invoker
    finally:
        await app.aclose()


def test_inspect_prints_plugins_prompt_tokens_and_routes(tmp_path: Path) -> None:
    env = {
        **local_env(tmp_path),
        "PYTHONPATH": str(Path(__file__).parent),
        "ORACLE_TOOL_POLICY": 'deny = ["secret_*"]\napproval_required = ["memory-engine__*"]',
    }
    done = subprocess.run(
        [sys.executable, "-m", "oracle_server._cli", "inspect", "--app", "cli_app:create_app"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Plugins" in done.stdout
    assert "  portal" in done.stdout
    assert "System prompt tokens per section" in done.stdout
    assert "identity" in done.stdout
    assert "total" in done.stdout
    assert "Tool policy" in done.stdout
    assert "  deny: secret_*" in done.stdout
    assert "  approval required: memory-engine__* + every destructive tool" in done.stdout


async def test_chat_stream_shows_text_and_tool_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with OpenAIDouble(
        [ToolCalls([("list_capabilities", {})]), "Nothing loaded yet."]
    ) as double:
        app = await create_oracle_app(
            {"name": "CLI Oracle"},
            env=local_env(tmp_path, double),
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        from oracle_server.testing import auth_headers
        from oracle_ucan import Ed25519Signer

        async with serving(app) as base_url:
            headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
            async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
                session_id = (await client.post("/sessions")).json()["sessionId"]
                await _stream_turn(client, session_id, "what can you do?")
    out = capsys.readouterr().out
    assert "[tool] list_capabilities({})" in out
    assert "[done] list_capabilities ->" in out
    assert "Nothing loaded yet." in out


async def test_chat_sends_the_chosen_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with OpenAIDouble(["From small.", "From the default."]) as double:
        env = {**local_env(tmp_path, double), "OPENAI_COMPATIBLE_ROLE_MODELS": "subagent=small"}
        app = await create_oracle_app(
            {"name": "CLI Oracle"},
            env=env,
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        from oracle_server.testing import auth_headers
        from oracle_ucan import Ed25519Signer

        async with serving(app) as base_url:
            headers = auth_headers(Ed25519Signer.generate(), app.state.oracle_did)
            async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
                session_id = (await client.post("/sessions")).json()["sessionId"]
                await _stream_turn(client, session_id, "hi", model="small")
                await _stream_turn(client, session_id, "hi")
                await _stream_turn(client, session_id, "hi", model="unknown")
    out = capsys.readouterr().out
    assert [r.model for r in double.requests] == ["small", "double-model"]
    assert "From small." in out
    assert "From the default." in out
    assert "error 400:" in out
    assert "message.model_unknown" in out


async def test_serve_answers_health_and_stops_on_sigint(tmp_path: Path) -> None:
    from oracle_server.testing import free_port

    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "oracle_server._cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        env={**local_env(tmp_path), "PATH": "/usr/bin:/bin", "ORACLE_NAME": "Served"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient() as client:
            # Booting loads every installed plugin (the embedded memory's model too).
            for _ in range(1200):
                try:
                    health = await client.get(f"http://127.0.0.1:{port}/health")
                    break
                except httpx.ConnectError:
                    if process.returncode is not None:
                        errors = await process.stderr.read() if process.stderr else b""
                        pytest.fail(f"oracle serve exited: {errors!r}")
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("the served oracle never answered")
        assert health.json()["status"] == "ok"
    finally:
        process.send_signal(2)
        async with asyncio.timeout(30):
            await process.wait()
    assert process.returncode == 0


# --- the console script with a minimal environment ---------------------------------------

ORACLE = Path(sys.executable).parent / "oracle"


def run_oracle(
    cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``oracle <args>`` as a newcomer runs it: a fresh HOME, nothing exported, in ``cwd``."""
    (cwd / "home").mkdir(exist_ok=True)
    environment = {"HOME": str(cwd / "home"), "PATH": "/usr/bin:/bin"}
    environment.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    environment.update(env or {})
    return subprocess.run(
        [str(ORACLE), *args],
        cwd=cwd,
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def one_message(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The stderr of a failed command: one ``oracle <command>: …`` message, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"oracle {command}: "), done.stderr
    return done.stderr


async def test_token_with_nothing_exported_signs_for_the_local_oracle_here(
    tmp_path: Path,
) -> None:
    done = run_oracle(tmp_path, "token")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    # The key `make run` serves with, under ./data/sqlite of the directory it runs in.
    key = (tmp_path / "data" / "sqlite" / "oracle-dev-key.txt").read_text().strip()
    result = await validate_auth_invocation(
        done.stdout.strip(), audience=Ed25519Signer.parse(key).did()
    )
    assert result.ok, result.error


def test_inspect_with_nothing_exported_reports_the_missing_model_and_backends(
    tmp_path: Path,
) -> None:
    done = run_oracle(tmp_path, "inspect")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Model: none configured (LLM_PROVIDER=openrouter needs ")
    assert "OPEN_ROUTER_API_KEY" in lines[0]
    # The installed memory plugin runs on its embedded backend in local mode.
    [memory] = [line for line in lines if line.startswith("  memory ")]
    assert memory.endswith("(always) backend: embedded")
    assert "System prompt tokens per section: not built (boot.llm.key_missing)" in lines
    user_dbs = tmp_path / "data" / "sqlite" / "user_dbs"
    assert not user_dbs.exists() or not any(user_dbs.iterdir())


def test_inspect_names_the_model_when_one_is_configured(tmp_path: Path) -> None:
    env = {**local_env(tmp_path), "PYTHONPATH": str(Path(__file__).parent)}
    done = run_oracle(tmp_path, "inspect", "--app", "cli_app:create_app", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Model: m (openai-compatible, http://127.0.0.1:9/v1)"
    assert "System prompt tokens per section" in done.stdout.splitlines()
    # The prompt was built for a made-up user, whose database does not stay behind.
    assert not (tmp_path / "user_dbs").exists() or not any((tmp_path / "user_dbs").iterdir())


def test_serve_without_a_model_is_one_message_and_exit_code_2(tmp_path: Path) -> None:
    done = run_oracle(tmp_path, "serve", env={"ORACLE_BACKEND": "local"})
    assert done.returncode == 2
    message = one_message(done, "serve")
    assert message.count("\n") == 1
    assert message.startswith("oracle serve: boot.llm.key_missing: LLM_PROVIDER=openrouter")
    assert "OPEN_ROUTER_API_KEY" in message


def test_serve_on_the_ixo_backend_names_every_missing_variable(tmp_path: Path) -> None:
    done = run_oracle(tmp_path, "serve")
    assert done.returncode == 2
    message = one_message(done, "serve")
    assert message.startswith("oracle serve: boot.config.invalid: ")
    for variable in ("ORACLE_DID", "MATRIX_BASE_URL", "SECP_MNEMONIC"):
        assert f"'{variable}': required when ORACLE_BACKEND=ixo" in message


@pytest.mark.parametrize("command", ["token", "inspect", "chat", "serve"])
def test_a_bad_setting_is_one_message_and_exit_code_2(tmp_path: Path, command: str) -> None:
    done = run_oracle(tmp_path, command, env={"ORACLE_BACKEND": "local", "PORT": "abc"})
    assert done.returncode == 2
    assert "'PORT': Input should be a valid integer" in one_message(done, command)


def test_an_app_that_does_not_load_is_exit_code_2(tmp_path: Path) -> None:
    done = run_oracle(tmp_path, "inspect", "--app", "no_such_module:create_app")
    assert done.returncode == 2
    assert "--app no_such_module:create_app does not load" in one_message(done, "inspect")


def test_chat_with_no_oracle_running_says_how_to_start_one(tmp_path: Path) -> None:
    from oracle_server.testing import free_port

    url = f"http://127.0.0.1:{free_port()}"
    done = run_oracle(tmp_path, "chat", "--url", url, stdin="hello\n")
    assert done.returncode == 1
    message = one_message(done, "chat")
    assert f"cannot reach the oracle at {url}" in message
    assert "make run" in message
