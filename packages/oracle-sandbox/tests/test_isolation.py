"""The embedded sandbox isolates: these tests try to get out, not only to run code.

Each case runs real code in a real bubblewrap sandbox: no network (not even the host's
loopback), no write outside the workspace, nothing of the host's home or of another
user's workspace in sight; a fork bomb, an infinite loop, a sleeper and a flood of
output are all stopped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from oracle_sandbox import BubblewrapSandbox, SandboxFileError, SandboxUnavailableError

ALICE = "did:key:z6MkAlice"
BOB = "did:key:z6MkBob"


async def test_code_runs_and_the_workspace_persists_between_runs(
    sandbox: BubblewrapSandbox,
) -> None:
    first = await sandbox.run(ALICE, "echo kept > notes.txt && pwd")
    assert first.ok, first
    assert first.stdout.strip() == "/workspace/data"
    again = await sandbox.run(
        ALICE, "print(open('/workspace/data/notes.txt').read())", language="python"
    )
    assert again.ok, again
    assert again.stdout.strip() == "kept"
    assert (sandbox.workspace(ALICE) / "notes.txt").read_text() == "kept\n"


@pytest.fixture
def host_listener() -> Iterator[int]:
    """A TCP port listening on the host's loopback."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


async def test_there_is_no_network_not_even_the_hosts_loopback(
    sandbox: BubblewrapSandbox, host_listener: int
) -> None:
    code = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(2)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {host_listener}))\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('internet')\n"
        "except OSError as exc:\n"
        "    print('no internet', type(exc).__name__)\n"
    )
    result = await sandbox.run(ALICE, code, language="python")
    assert result.ok, result
    assert "connected" not in result.stdout
    assert "refused" in result.stdout
    assert "no internet" in result.stdout
    interfaces = await sandbox.run(ALICE, "cat /proc/net/dev")
    assert "eth" not in interfaces.stdout  # only the sandbox's own, down, loopback


async def test_nothing_outside_the_workspace_can_be_written(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    script = (
        f"for f in /usr/x /etc/x /x /workspace/x {outside}; do "
        "  (echo pwned > $f) 2>/dev/null && echo wrote $f; "
        "done; echo done"
    )
    result = await sandbox.run(ALICE, script)
    assert result.stdout.strip() == "done", result
    assert not await asyncio.to_thread(outside.exists)
    assert not await asyncio.to_thread(Path("/usr/x").exists)
    scratch = await sandbox.run(ALICE, "echo scratch > /tmp/s && cat /tmp/s")
    assert scratch.stdout.strip() == "scratch"  # /tmp is the run's own tmpfs
    later = await sandbox.run(ALICE, "ls /tmp")
    assert later.stdout.strip() == ""  # and it does not outlive the run


async def test_the_hosts_home_and_files_are_not_there(
    sandbox: BubblewrapSandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.txt"
    await asyncio.to_thread(secret.write_text, "host secret")
    home = await asyncio.to_thread(os.path.expanduser, "~")
    result = await sandbox.run(
        ALICE, f"cat {secret} {home}/.bashrc /etc/shadow /etc/passwd 2>&1; ls / ; ls /home 2>&1"
    )
    assert "host secret" not in result.stdout
    assert "root:" not in result.stdout
    listing = set(result.stdout.split())
    assert "root" not in listing
    assert {"usr", "tmp", "workspace", "proc", "dev"} <= listing


async def test_one_user_never_sees_another_users_workspace(sandbox: BubblewrapSandbox) -> None:
    await sandbox.run(ALICE, "echo alice-private > diary.txt")
    result = await sandbox.run(
        BOB, "ls -a /workspace/data; cat /workspace/data/diary.txt 2>&1; ls /workspace"
    )
    assert "alice-private" not in result.stdout
    assert "diary.txt" not in result.stdout.split("\n")[0:3]
    assert sandbox.workspace(ALICE) != sandbox.workspace(BOB)
    # Everywhere but /proc and the read-only system (which holds no workspace): a full
    # walk of /usr can outlast the small wall clock on a busy machine.
    found = await sandbox.run(
        BOB,
        "find / -path /proc -prune -o -path /usr -prune -o -name diary.txt -print "
        "2>/dev/null; echo end",
    )
    assert found.stdout.strip() == "end", found


def _sandbox_processes(uid: int) -> int:
    listed = subprocess.run(
        ["ps", "-u", str(uid), "-o", "pid="], capture_output=True, text=True, check=False
    )
    return len(listed.stdout.split())


async def no_process_left(uid: int) -> bool:
    """Whether every process of the sandbox user is gone (the kernel reaps a dead PID
    namespace's processes asynchronously: give it a few seconds)."""
    for _ in range(100):
        if _sandbox_processes(uid) == 0:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_fork_bomb_is_contained_and_leaves_nothing_behind(
    sandbox: BubblewrapSandbox,
) -> None:
    result = await sandbox.run(ALICE, "f(){ f | f & }; f; sleep 1; echo still-here")
    assert result.seconds < sandbox.limits.wall_seconds + 3
    after = await sandbox.run(ALICE, "echo fine")
    assert after.ok, after  # the machine still forks for the next run
    if os.geteuid() == 0:
        assert await no_process_left(sandbox.uid)


async def test_an_infinite_loop_is_stopped_by_the_cpu_limit(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run(ALICE, "while :; do :; done")
    assert not result.ok
    assert result.exit_code is not None
    assert result.exit_code != 0
    assert result.seconds < sandbox.limits.wall_seconds


async def test_a_sleeper_is_killed_by_the_wall_clock(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run(ALICE, "sleep 60")
    assert result.timed_out
    assert result.exit_code is None
    assert result.seconds < sandbox.limits.wall_seconds + 3
    if os.geteuid() == 0:
        assert await no_process_left(sandbox.uid)


async def test_output_is_capped_and_a_flood_is_stopped(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run(ALICE, "yes flood")
    assert result.truncated
    assert len(result.stdout.encode()) <= sandbox.limits.output_bytes
    assert result.stdout.startswith("flood\n")
    assert result.seconds < sandbox.limits.wall_seconds


async def test_memory_is_limited(sandbox: BubblewrapSandbox) -> None:
    code = (
        "try:\n    b = bytearray(2 * 1024**3)\n    print('allocated')\n"
        "except MemoryError:\n    print('refused')"
    )
    result = await sandbox.run(ALICE, code, language="python")
    assert result.stdout.strip() == "refused", result


async def test_secrets_arrive_as_environment_and_nothing_else_of_the_host(
    sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY_TOKEN", "host-token-value")
    result = await sandbox.run(ALICE, "env", env={"_USER_SECRET_API_KEY": "user-secret-value"})
    assert "_USER_SECRET_API_KEY=user-secret-value" in result.stdout
    assert "host-token-value" not in result.stdout


async def test_skills_are_mounted_read_only(sandbox: BubblewrapSandbox) -> None:
    skill = sandbox.root.parent / "skill"
    await asyncio.to_thread(skill.mkdir)
    await asyncio.to_thread((skill / "SKILL.md").write_text, "# A skill")
    skill.chmod(0o755)
    result = await sandbox.run(
        ALICE,
        "cat /workspace/skills/report/SKILL.md; "
        "(echo x > /workspace/skills/report/x) 2>/dev/null || echo read-only",
        skills={"report": skill},
    )
    assert "# A skill" in result.stdout
    assert "read-only" in result.stdout


async def test_without_bubblewrap_it_refuses_and_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        BubblewrapSandbox(tmp_path).check()


async def test_files_are_written_inside_the_sandbox_so_links_cannot_escape(
    sandbox: BubblewrapSandbox,
) -> None:
    size = await sandbox.write_file(ALICE, "/workspace/data/out/report.md", b"# Report\n")
    assert size == 9
    read = await sandbox.run(ALICE, "cat out/report.md")
    assert read.stdout == "# Report\n"

    # The user's code plants links to the host; a write through them stays inside.
    target = sandbox.root.parent / "host-target"
    await asyncio.to_thread(target.mkdir)
    target.chmod(0o777)
    planted = await sandbox.run(ALICE, f"ln -s /etc etc && ln -s {target} host && echo planted")
    assert planted.stdout.strip() == "planted"
    for path in ("/workspace/data/etc/passwd", "/workspace/data/host/escaped.txt"):
        with pytest.raises(SandboxFileError):
            await sandbox.write_file(ALICE, path, b"pwned")
    assert await asyncio.to_thread(lambda: list(target.iterdir())) == []
    passwd = await asyncio.to_thread(Path("/etc/passwd").read_text)
    assert "pwned" not in passwd


@pytest.mark.parametrize(
    "path", ["/etc/x", "/workspace/data/../x", "workspace/data/x", "/workspace/data", "/tmp/x"]
)
async def test_files_go_only_under_the_workspace(sandbox: BubblewrapSandbox, path: str) -> None:
    with pytest.raises(SandboxFileError, match="/workspace/data/"):
        await sandbox.write_file(ALICE, path, b"x")


async def test_a_run_reads_what_it_is_given_on_standard_input(sandbox: BubblewrapSandbox) -> None:
    result = await sandbox.run(ALICE, "wc -c", stdin=b"12345")
    assert result.stdout.strip() == "5"
