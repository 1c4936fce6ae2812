"""Skills for runs: capsules fetched once, checked against their CID, unpacked safely,
mounted read-only; secrets reach only skill runs."""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oracle_sandbox import BubblewrapSandbox
from oracle_sandbox._server import secrets_env
from oracle_sandbox._skills import SkillCache, SkillError, raw_cid
from oracle_sandbox.testing import reachable_folder
from oracle_server.testing import LoopbackServer

USER = "did:key:z6MkSkillUser"


def archive(files: dict[str, bytes], *, links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return gzip.compress(buffer.getvalue())


GOOD = archive(
    {"greet/SKILL.md": b"---\nname: greet\n---\n# Greet\n", "greet/run.sh": b"echo hello $WHO\n"}
)


class Registry:
    """Capsules by CID; ``private`` ones only for the bearer ``let-me-in``."""

    def __init__(self) -> None:
        self.capsules: dict[str, bytes] = {}
        self.private: set[str] = set()
        self.downloads: list[tuple[str, str | None]] = []

    def add(self, data: bytes, *, cid: str | None = None, private: bool = False) -> str:
        cid = cid or raw_cid(data)
        self.capsules[cid] = data
        if private:
            self.private.add(cid)
        return cid

    async def download(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        bearer = request.headers.get("authorization")
        self.downloads.append((cid, bearer))
        if cid not in self.capsules or (cid in self.private and bearer != "Bearer let-me-in"):
            return Response(status_code=404)
        return Response(self.capsules[cid], media_type="application/gzip")


@pytest.fixture
async def registry() -> AsyncIterator[tuple[Registry, str]]:
    reg = Registry()
    async with LoopbackServer([Route("/capsules/{cid}/download", reg.download)]) as served:
        yield reg, served.origin


@pytest.fixture
def skills_root(bubblewrap: str) -> Iterator[Path]:
    root = reachable_folder("oracle-skills-")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_a_capsule_is_fetched_once_checked_and_unpacked(
    registry: tuple[Registry, str], skills_root: Path
) -> None:
    reg, origin = registry
    cid = reg.add(GOOD)
    cache = SkillCache(skills_root / "skills", origin)
    first = await cache.load(cid, None)
    again = await cache.load(cid, None)
    assert (first.name, first.mount, first.files) == (
        "greet",
        "/workspace/skills/greet",
        ("SKILL.md", "run.sh"),
    )
    assert again == first
    assert len(reg.downloads) == 1


async def test_private_capsules_need_the_callers_invocation(
    registry: tuple[Registry, str], skills_root: Path
) -> None:
    reg, origin = registry
    cid = reg.add(GOOD, private=True)
    cache = SkillCache(skills_root / "skills", origin)
    with pytest.raises(SkillError, match="not found, or not shared"):
        await cache.load(cid, None)
    loaded = await cache.load(cid, "let-me-in")
    assert loaded.name == "greet"
    assert reg.downloads[-1] == (cid, "Bearer let-me-in")


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"not an archive", "not a gzip tar"),
        (archive({"../escape/SKILL.md": b"x"}), "could not be unpacked"),
        (archive({"a/SKILL.md": b"x"}, links={"a/host": "/etc/passwd"}), "could not be unpacked"),
        (archive({"one/SKILL.md": b"x", "two/SKILL.md": b"y"}), "one folder"),
        (archive({"Bad_Name/SKILL.md": b"x"}), "valid skill name"),
        (archive({"greet/README.md": b"x"}), "SKILL.md"),
    ],
)
async def test_archives_that_are_not_a_safe_skill_are_refused(
    registry: tuple[Registry, str], skills_root: Path, data: bytes, why: str
) -> None:
    reg, origin = registry
    cid = reg.add(data)
    with pytest.raises(SkillError, match=why):
        await SkillCache(skills_root / "skills", origin).load(cid, None)
    assert not (skills_root / "skills" / cid).exists()


async def test_bytes_that_do_not_match_their_cid_are_refused(
    registry: tuple[Registry, str], skills_root: Path
) -> None:
    reg, origin = registry
    forged = reg.add(GOOD, cid=raw_cid(b"something else"))
    with pytest.raises(SkillError, match="do not match its CID"):
        await SkillCache(skills_root / "skills", origin).load(forged, None)


async def test_bad_cids_and_a_missing_registry_are_clear_errors(skills_root: Path) -> None:
    with pytest.raises(SkillError, match="cid must be"):
        await SkillCache(skills_root, "http://127.0.0.1:9").load("../../etc", None)
    with pytest.raises(SkillError, match="no skills registry"):
        await SkillCache(skills_root, None).load(raw_cid(GOOD), None)
    with pytest.raises(SkillError, match="unreachable"):
        await SkillCache(skills_root, "http://127.0.0.1:9").load(raw_cid(GOOD), None)


async def test_a_skill_is_mounted_read_only_with_the_runs_variables(
    registry: tuple[Registry, str], skills_root: Path, sandbox: BubblewrapSandbox
) -> None:
    reg, origin = registry
    skill = await SkillCache(skills_root / "skills", origin).load(reg.add(GOOD), None)
    result = await sandbox.run(
        USER,
        f"sh {skill.mount}/run.sh; echo x > {skill.mount}/run.sh",
        env={"WHO": "world"},
        skills={skill.name: skill.path},
    )
    assert result.stdout == "hello world\n"
    assert "Read-only file system" in result.stderr
    assert (skill.path / "run.sh").read_bytes() == b"echo hello $WHO\n"


def test_secret_headers_become_variables_by_their_kind() -> None:
    env = secrets_env(
        {
            "x-os-openai_key": "sk-1",
            "X-US-github_token": "ghp",
            "x-us-bad name": "skipped",
            "authorization": "Bearer t",
        }
    )
    assert env == {"OPENAI_KEY": "sk-1", "_USER_SECRET_GITHUB_TOKEN": "ghp"}


async def test_files_are_read_inside_the_sandbox_only_from_the_workspace(
    sandbox: BubblewrapSandbox,
) -> None:
    await sandbox.run(USER, "mkdir -p output; echo hi > output/a.txt; ln -s /etc/hostname leak")
    assert await sandbox.read_file(USER, "/workspace/output/a.txt", max_bytes=100) == b"hi\n"
    assert await sandbox.read_file(USER, "/workspace/data/output/a.txt", max_bytes=100) == b"hi\n"
    from oracle_sandbox import SandboxFileError

    with pytest.raises(SandboxFileError, match="only under"):
        await sandbox.read_file(USER, "/etc/passwd", max_bytes=100)
    with pytest.raises(SandboxFileError, match="larger than"):
        await sandbox.read_file(USER, "/workspace/output/a.txt", max_bytes=1)
    # A link the user's code left points inside the sandbox's own view: no host file.
    with pytest.raises(SandboxFileError, match="no such file"):
        await sandbox.read_file(USER, "/workspace/data/leak", max_bytes=1000)
