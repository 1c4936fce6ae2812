"""One isolated run: bubblewrap, resource limits, a wall clock, capped output.

Each run is a fresh ``bwrap`` sandbox:

- **no network** (every namespace unshared: network, PID, IPC, UTS, user, cgroup);
- a **read-only system**: ``/usr`` (and the ``/bin``, ``/lib``… links into it) bound
  read-only; nothing else of the host — no ``/etc`` beyond what programs need to start,
  no home directories, no other user's workspace;
- the user's **persistent** ``/workspace/data`` (a directory of its own per user on the
  host), read-only skills under ``/workspace/skills/<name>``, and a **tmpfs** ``/tmp``;
- **limits** set on the process before it starts (``prlimit``): CPU seconds, address
  space, processes, file size, open files; the run is started as an unprivileged user
  (``setpriv``) so the process limit binds (root is exempt from it);
- a **wall clock**: past it the whole sandbox is killed (its PID namespace dies with it);
- **output** read up to a cap per stream; a run that writes past it is killed.

Secrets reach the run as environment variables given to ``bwrap``'s own environment,
never on its command line (which every local user can read in ``/proc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "BubblewrapSandbox",
    "RunResult",
    "SandboxFileError",
    "SandboxLimits",
    "SandboxUnavailableError",
    "bubblewrap_path",
]

logger = logging.getLogger("oracle.sandbox")

SANDBOX_UID = 65534  # nobody
WORKSPACE_PREFIX = "/workspace/data/"
OUTPUT_ALIAS = "/workspace/output/"
READ_CHUNK = 65536
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What programs need from /etc to start (name resolution is pointless without a network).
_ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "ssl")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxUnavailableError(RuntimeError):
    """The machine cannot isolate runs; the message says what to install or enable."""


class SandboxFileError(ValueError):
    """A file could not be written in the workspace; the message says why."""


def bubblewrap_path() -> str | None:
    """Where ``bwrap`` is, or ``None``."""
    return shutil.which("bwrap")


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use.

    Attributes:
        cpu_seconds: CPU time; the kernel kills the run past it.
        memory_bytes: Address space of each process.
        processes: Processes and threads of the sandbox user at once.
        file_bytes: Size of any file the run writes.
        open_files: Open file descriptors per process.
        output_bytes: Bytes kept of stdout and of stderr each; a run that writes more
            is killed and its output marked truncated.
        wall_seconds: Real time before the whole sandbox is killed.
    """

    cpu_seconds: int = 30
    memory_bytes: int = 1024 * 1024 * 1024
    processes: int = 64
    file_bytes: int = 256 * 1024 * 1024
    open_files: int = 256
    output_bytes: int = 64 * 1024
    wall_seconds: float = 60.0


@dataclass(frozen=True)
class RunResult:
    """What a run did.

    Attributes:
        exit_code: The process's exit status (negative: the signal that ended it);
            ``None`` when it was killed by the wall clock.
        stdout: Its standard output, decoded (at most ``output_bytes``).
        stderr: Its standard error, likewise.
        timed_out: Killed by the wall clock.
        truncated: Killed for writing more output than the cap.
        seconds: Real time the run took.
        stdout_bytes: The raw standard output, for the runs that read a file.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    seconds: float
    stdout_bytes: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        """Exited 0 on its own."""
        return self.exit_code == 0 and not self.timed_out and not self.truncated


class _Capped:
    """One output stream, kept up to ``cap`` bytes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.over = asyncio.Event()

    async def drain(self, stream: asyncio.StreamReader) -> None:
        # Read to the end, keeping the first ``cap`` bytes: a writer blocked on a full
        # pipe would keep the sandbox alive while it is being killed.
        while chunk := await stream.read(READ_CHUNK):
            room = self.cap - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if len(chunk) > room:
                self.over.set()

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class BubblewrapSandbox:
    """Runs code in bubblewrap sandboxes, one per run, with a workspace per user.

    Args:
        root: Where the users' workspaces live on the host (``<root>/<user key>/data``).
        limits: Each run's limits.
        uid: The unprivileged user runs start as when this process is root.
    """

    def __init__(
        self, root: Path, *, limits: SandboxLimits | None = None, uid: int = SANDBOX_UID
    ) -> None:
        self.root = root
        self.limits = limits or SandboxLimits()
        self.uid = uid
        self._bwrap: str | None = None

    def check(self) -> None:
        """Refuse to run without a working isolation mechanism.

        Raises:
            SandboxUnavailableError: ``bwrap`` is missing (install the Debian package
                ``bubblewrap``), or cannot create namespaces here.
        """
        path = bubblewrap_path()
        if path is None:
            raise SandboxUnavailableError(
                "the embedded sandbox needs bubblewrap: install the Debian package "
                "'bubblewrap' (apt-get install bubblewrap)"
            )
        for tool in ("prlimit", "setpriv"):
            if shutil.which(tool) is None:
                raise SandboxUnavailableError(
                    f"the embedded sandbox needs {tool} (the Debian package 'util-linux')"
                )
        if os.geteuid() == 0:
            self._check_reachable(self.root)
        self._bwrap = path

    def _check_reachable(self, path: Path) -> None:
        # bwrap runs as the sandbox user, who must walk to the workspaces (and, for a
        # skill, to its directory) to bind them.
        for folder in [path, *path.parents]:
            if folder.exists() and not os.stat(folder).st_mode & 0o001:
                raise SandboxUnavailableError(
                    f"the sandbox user (uid {self.uid}) cannot reach {path}: {folder} is "
                    "not searchable by others (chmod o+x it, or choose another "
                    "SANDBOX_ROOT)"
                )

    def workspace(self, user: str) -> Path:
        """The user's persistent ``/workspace/data`` on the host (made when missing)."""
        key = hashlib.sha256(user.encode()).hexdigest()[:32]
        data = self.root / key / "data"
        if not data.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
            self.root.chmod(0o711)  # searchable, not listable: no one learns the user keys
            (data / "output").mkdir(parents=True, exist_ok=True)
            (self.root / key).chmod(0o700)
            if os.geteuid() == 0:
                for made in (self.root / key, data, data / "output"):
                    os.chown(made, self.uid, self.uid)
        return data

    def _command(
        self, workspace: Path, argv: list[str], skills: Mapping[str, Path], info_fd: int
    ) -> list[str]:
        assert self._bwrap is not None
        limits = self.limits
        command: list[str] = []
        if os.geteuid() == 0:
            # As root the process limit would not bind: start as an unprivileged user.
            command += [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "--",
            ]
        command += [
            "prlimit",
            f"--cpu={limits.cpu_seconds}",
            f"--as={limits.memory_bytes}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_bytes}",
            f"--nofile={limits.open_files}",
            "--",
            self._bwrap,
            # bwrap writes {"child-pid": …} here: the sandbox's PID 1, whose death takes
            # every process of the sandbox with it.
            "--info-fd",
            str(info_fd),
            "--unshare-all",
            # The command is the sandbox's PID 1: with bwrap's own init there instead, the
            # init outlives the outer bwrap as a zombie the host reaps late, and zombies
            # count against the process limit of the next runs.
            "--as-pid-1",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for name in _SYSTEM_LINKS:
            host = Path("/") / name
            if host.is_symlink():
                command += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                command += ["--ro-bind", str(host), f"/{name}"]
        for name in _ETC_FILES:
            command += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        command += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--dir",
            "/workspace",
            "--bind",
            str(workspace),
            "/workspace/data",
            # Deliverables and earlier attachments: /workspace/output is data/output.
            "--symlink",
            "/workspace/data/output",
            "/workspace/output",
        ]
        for name, path in skills.items():
            command += ["--ro-bind", str(path), f"/workspace/skills/{name}"]
        # Everything but /tmp, /workspace/data and /proc is read-only inside, too.
        command += ["--remount-ro", "/", "--chdir", "/workspace/data", "--", *argv]
        return command

    async def run(
        self,
        user: str,
        code: str,
        *,
        language: Literal["shell", "python"] = "shell",
        env: Mapping[str, str] | None = None,
        skills: Mapping[str, Path] | None = None,
        stdin: bytes | None = None,
    ) -> RunResult:
        """Run ``code`` for ``user`` in a fresh sandbox.

        Args:
            user: Whose workspace the run gets (a DID).
            code: A shell script, or Python source.
            language: ``shell`` (``sh -c``) or ``python`` (``python3 -c``).
            env: Variables the run sees besides ``PATH``, ``HOME`` and ``LANG`` (secrets).
            skills: Directories mounted read-only at ``/workspace/skills/<name>``.
            stdin: Bytes on the run's standard input (none by default).

        Raises:
            SandboxUnavailableError: see :meth:`check`.
        """
        argv = ["sh", "-c", code] if language == "shell" else ["python3", "-c", code]
        return await self._run(user, argv, env=env, skills=skills, stdin=stdin)

    async def write_file(self, user: str, path: str, data: bytes) -> int:
        """Write ``data`` at ``path`` in the user's ``/workspace/data/``; its size.

        The write happens inside a sandbox, as the sandbox user: a link the user's own
        code left in the workspace cannot send it anywhere on the host.

        Raises:
            SandboxFileError: ``path`` is not under ``/workspace/data/``, or the write
                failed (the message says why).
        """
        normal = posixpath.normpath(path)
        if (
            "\x00" in path
            or not path.startswith(WORKSPACE_PREFIX)
            or not normal.startswith(WORKSPACE_PREFIX)
        ):
            raise SandboxFileError(f"files are written only under {WORKSPACE_PREFIX}")
        result = await self._run(user, ["python3", "-c", _WRITE_FILE, normal], stdin=data)
        if not result.ok:
            reason = (result.stderr.strip().splitlines() or ["the write failed"])[-1]
            raise SandboxFileError(reason[:300])
        return int(result.stdout.strip())

    async def read_file(self, user: str, path: str, *, max_bytes: int) -> bytes:
        """The bytes of ``path`` in the user's ``/workspace/data/`` (``/workspace/output/``
        is its ``output`` folder).

        Read inside a sandbox, as the sandbox user, like :meth:`write_file`: a link in
        the workspace cannot make it read the host.

        Raises:
            SandboxFileError: ``path`` is outside the workspace, is not a file, or is
                larger than ``max_bytes``.
        """
        normal = _workspace_path(path)
        result = await self._run(
            user, ["python3", "-c", _READ_FILE, normal, str(max_bytes)], capture=max_bytes
        )
        if not result.ok:
            reason = (result.stderr.strip().splitlines() or ["the read failed"])[-1]
            raise SandboxFileError(reason[:300])
        return result.stdout_bytes

    async def _run(
        self,
        user: str,
        argv: list[str],
        *,
        env: Mapping[str, str] | None = None,
        skills: Mapping[str, Path] | None = None,
        stdin: bytes | None = None,
        capture: int | None = None,
    ) -> RunResult:
        if self._bwrap is None:
            self.check()
        workspace = self.workspace(user)
        if os.geteuid() == 0:
            for skill in (skills or {}).values():
                self._check_reachable(skill)
        environment = _environment(env)
        started = time.monotonic()
        info_read, info_write = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *self._command(workspace, argv, skills or {}, info_write),
                stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
                start_new_session=True,
                pass_fds=(info_write,),
            )
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        sandbox_pid = asyncio.ensure_future(asyncio.to_thread(_child_pid, info_read))
        feeding = None
        if stdin is not None:
            assert process.stdin is not None
            feeding = asyncio.ensure_future(_feed(process.stdin, stdin))
        # A file read keeps up to its own cap of stdout (one byte more shows it was over).
        out, err = (
            _Capped(capture + 1 if capture is not None else self.limits.output_bytes),
            _Capped(self.limits.output_bytes),
        )
        assert process.stdout is not None
        assert process.stderr is not None
        readers = asyncio.gather(out.drain(process.stdout), err.drain(process.stderr))
        overflow = asyncio.ensure_future(_first(out.over, err.over))
        # Done when the process has exited and every pipe is closed (asyncio's wait()).
        finished = asyncio.ensure_future(process.wait())
        timed_out = truncated = False
        try:
            done, _ = await asyncio.wait(
                {finished, overflow},
                timeout=self.limits.wall_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                timed_out = True
            elif overflow in done and not finished.done():
                truncated = True
        finally:
            overflow.cancel()
            if feeding is not None:
                feeding.cancel()
            if not finished.done():
                pid = await _settled(sandbox_pid)
                _kill(process.pid, pid)
                try:
                    await asyncio.wait_for(asyncio.shield(finished), timeout=10)
                except TimeoutError:
                    logger.error("sandbox.unkillable: a run outlived its kill")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(readers, timeout=5)
            await _settled(sandbox_pid)
            os.close(info_read)
        return RunResult(
            exit_code=None if timed_out else process.returncode,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=truncated,
            seconds=time.monotonic() - started,
            stdout_bytes=bytes(out.data) if capture is not None else b"",
        )


def _environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """What a run sees: the caller's variables, then the fixed ones (which win)."""
    return {
        **dict(env or {}),
        "PATH": _SAFE_PATH,
        "HOME": "/workspace/data",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
    }


def _workspace_path(path: str) -> str:
    """``path`` normalised, when it is in the workspace (``/workspace/output/`` as the
    ``output`` folder of ``/workspace/data/``)."""
    if "\x00" in path:
        raise SandboxFileError("a path cannot hold NUL")
    normal = posixpath.normpath(path)
    if normal.startswith(OUTPUT_ALIAS):
        normal = WORKSPACE_PREFIX + "output/" + normal.removeprefix(OUTPUT_ALIAS)
    if not normal.startswith(WORKSPACE_PREFIX):
        raise SandboxFileError(f"files are read only under {WORKSPACE_PREFIX}")
    return normal


_READ_FILE = """
import os, sys
path, cap = sys.argv[1], int(sys.argv[2])
if not os.path.isfile(path):
    sys.exit("no such file: " + path)
if os.path.getsize(path) > cap:
    sys.exit("the file is larger than %d bytes" % cap)
with open(path, "rb") as src:
    sys.stdout.buffer.write(src.read(cap + 1))
"""

_WRITE_FILE = """
import os, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "wb") as out:
    out.write(sys.stdin.buffer.read())
print(os.path.getsize(path))
"""


async def _feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        writer.write(data)
        await writer.drain()
        writer.close()


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _child_pid(fd: int) -> int | None:
    """The sandbox's PID 1 as bwrap reports it on its info descriptor.

    Read until the report is whole JSON (it may come in several writes); the descriptor
    stays open until the run ends, so bwrap never writes into a closed pipe (which would
    kill it with SIGPIPE and leave the sandbox stranded half set up).
    """
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
        try:
            pid = json.loads(data).get("child-pid")
        except ValueError:
            continue
        return pid if isinstance(pid, int) and pid > 1 else None
    return None


async def _settled(future: asyncio.Future[int | None]) -> int | None:
    """The sandbox's PID once bwrap said it (it says so as it starts, or closes the pipe
    as it fails)."""
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout=5)
    except Exception:
        return None


def _kill(pid: int, sandbox_pid: int | None) -> None:
    """Kill the sandbox: its PID 1 (the PID namespace, and every process in it, dies
    with it), then bwrap's own session."""
    for target in (sandbox_pid, pid):
        if target is None:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
