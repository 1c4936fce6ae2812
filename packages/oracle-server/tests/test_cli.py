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
from oracle_ucan import validate_auth_invocation


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
    env = {**local_env(tmp_path), "PYTHONPATH": str(Path(__file__).parent)}
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
    assert "  frontend-tools" in done.stdout
    assert "System prompt tokens per section" in done.stdout
    assert "identity" in done.stdout
    assert "total" in done.stdout


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
            for _ in range(200):
                try:
                    health = await client.get(f"http://127.0.0.1:{port}/health")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("the served oracle never answered")
        assert health.json()["status"] == "ok"
    finally:
        process.send_signal(2)
        async with asyncio.timeout(30):
            await process.wait()
    assert process.returncode == 0
