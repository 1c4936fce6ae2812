"""The commands ``make run`` prints, run as printed by a newcomer with nothing exported.

The example oracle is started as ``make run`` starts it (``python -m example_oracle``) in
a fresh directory; its help text is read back and the ``oracle token`` and
``oracle chat`` lines are run exactly as printed, from the same directory, with only
``HOME`` and ``PATH`` set. The model is the OpenAI double, given to the server alone.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from oracle_server.testing import OpenAIDouble, free_port

ORACLE = Path(sys.executable).parent / "oracle"


def newcomer_env(home: Path) -> dict[str, str]:
    """Nothing exported but a fresh HOME and a plain PATH."""
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    return env


def printed(help_text: str, marker: str) -> list[str]:
    """The arguments of the printed command line containing ``marker``, after ``oracle``."""
    [line] = [line for line in help_text.splitlines() if marker in line]
    command = line.split("#", 1)[0].strip()
    command = command.removeprefix("TOKEN=$(").removesuffix(")")
    words = command.split()
    assert words[0] == ".venv/bin/oracle", line
    return words[1:]


async def read_help(process: asyncio.subprocess.Process) -> str:
    """What the example prints on start, up to its ``API docs`` line."""
    assert process.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("API docs"):
        line = await process.stdout.readline()
        if not line:
            assert process.stderr is not None
            pytest.fail(f"the example oracle exited: {(await process.stderr.read())!r}")
        lines.append(line.decode())
    return "".join(lines)


@pytest.fixture
async def example(tmp_path: Path) -> AsyncIterator[tuple[str, str, OpenAIDouble]]:
    """The example oracle served from ``tmp_path``; yields its help text and base URL."""
    async with OpenAIDouble() as llm:
        port = free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "example_oracle",
            cwd=tmp_path,
            env={**newcomer_env(tmp_path / "home"), "PORT": str(port), **llm.env()},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(300):
                help_text = await read_help(process)
                base_url = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient() as client:
                    while True:
                        try:
                            await client.get(f"{base_url}/health")
                            break
                        except httpx.ConnectError:
                            await asyncio.sleep(0.1)
            yield help_text, base_url, llm
        finally:
            process.send_signal(2)
            async with asyncio.timeout(60):
                await process.wait()


async def run_printed(
    cwd: Path, args: list[str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [str(ORACLE), *args],
        cwd=cwd,
        env=newcomer_env(cwd / "home"),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def test_token_and_chat_work_as_make_run_prints_them(
    tmp_path: Path, example: tuple[str, str, OpenAIDouble]
) -> None:
    help_text, base_url, llm = example
    assert f"--url {base_url}" in help_text

    token = await run_printed(tmp_path, printed(help_text, "oracle token"))
    assert token.returncode == 0, token.stderr
    assert "Traceback" not in token.stderr
    headers = {"Authorization": f"Bearer {token.stdout.strip()}", "X-Auth-Type": "ucan"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        created = await client.post("/sessions")
    assert created.status_code == 201, created.text

    llm.add_steps("Tea it is.")
    chat = await run_printed(tmp_path, printed(help_text, "oracle chat"), stdin="I like tea\n\n")
    assert chat.returncode == 0, chat.stderr
    assert "Traceback" not in chat.stderr
    assert re.search(r"^Session [0-9a-f-]{36}\. Empty line or Ctrl-D to quit\.", chat.stdout)
    assert "Tea it is." in chat.stdout
    assert llm.requests[-1].messages[-1]["content"] == "I like tea"


async def test_inspect_of_the_example_says_memory_runs_embedded(
    tmp_path: Path, example: tuple[str, str, OpenAIDouble]
) -> None:
    done = await run_printed(tmp_path, ["inspect", "--app", "example_oracle.server:create_app"])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Model: none configured")
    [memory] = [line for line in lines if line.startswith("  memory ")]
    assert memory.endswith("(always) backend: embedded")
    assert any(line.startswith("  notes ") for line in lines)
