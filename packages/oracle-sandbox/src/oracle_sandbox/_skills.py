"""Skills for the runs: capsules fetched from the registry, checked, unpacked once.

A capsule is a gzip tar archive of one skill folder (``<name>/SKILL.md`` and whatever
else it ships), addressed by its CID at ``{registry}/capsules/{cid}/download``. The
caller's skills invocation (``X-Skills-Invocation``) is sent as the bearer, so the
user's private capsules download too. A CID that names its bytes directly (CIDv1, raw,
sha256 — what the registry double issues) is checked against the archive; other CIDs
are trusted to the registry. The archive is unpacked with the standard library's
``data`` filter (no links out, no devices, no absolute paths, no setuid bits), within
limits on size and entries, into ``<root>/<cid>/<name>``, readable by the sandbox user
and mounted read-only into the runs that name it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["LoadedSkill", "SkillCache", "SkillError", "raw_cid"]

CID_PATTERN = re.compile(r"^[A-Za-z0-9]{16,128}$")
SKILL_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_RAW_SHA256_PREFIX = b"\x01\x55\x12\x20"  # CIDv1, raw codec, sha2-256, 32 bytes


class SkillError(ValueError):
    """A skill could not be loaded; the message says why (fit for the model)."""


@dataclass(frozen=True)
class LoadedSkill:
    """A skill unpacked on the host.

    Attributes:
        cid: Its capsule's CID.
        name: Its folder's name (``/workspace/skills/<name>`` in a run).
        path: The folder on the host.
        files: Its files, relative to the folder, sorted.
    """

    cid: str
    name: str
    path: Path
    files: tuple[str, ...]

    @property
    def mount(self) -> str:
        """Where runs see it."""
        return f"/workspace/skills/{self.name}"


def raw_cid(data: bytes) -> str:
    """The CIDv1 (raw codec, sha2-256, base32) naming ``data``."""
    digest = hashlib.sha256(data).digest()
    encoded = base64.b32encode(_RAW_SHA256_PREFIX + digest).decode().lower().rstrip("=")
    return "b" + encoded


def _names_bytes(cid: str) -> bool:
    return cid.startswith("bafkrei")


class SkillCache:
    """Fetches and unpacks capsules, each once.

    Args:
        root: Where skills are unpacked on the host.
        registry: The capsule registry's base URL (``SKILLS_CAPSULES_BASE_URL``), or
            ``None`` when the oracle has none (runs with a ``cid`` are then refused).
        max_archive_bytes: Largest archive downloaded.
        max_unpacked_bytes: Largest total of the files it holds.
        max_entries: Most files and folders it may hold.
        timeout: Seconds for a download.
    """

    def __init__(
        self,
        root: Path,
        registry: str | None,
        *,
        max_archive_bytes: int = 50 * 1024 * 1024,
        max_unpacked_bytes: int = 200 * 1024 * 1024,
        max_entries: int = 5000,
        timeout: float = 60.0,
    ) -> None:
        self.root = root
        self.registry = registry.rstrip("/") if registry else None
        self.max_archive_bytes = max_archive_bytes
        self.max_unpacked_bytes = max_unpacked_bytes
        self.max_entries = max_entries
        self.timeout = timeout
        self._locks: dict[str, asyncio.Lock] = {}

    async def load(self, cid: str, invocation: str | None) -> LoadedSkill:
        """The skill ``cid`` names, downloaded and unpacked when not yet here.

        Args:
            cid: The capsule's CID (from ``list_skills`` / ``search_skills``).
            invocation: The caller's skills invocation, sent as the bearer.

        Raises:
            SkillError: no registry, a malformed CID, a refused or failed download, an
                archive that does not match its CID, or one that is not a skill.
        """
        if not CID_PATTERN.match(cid):
            raise SkillError("cid must be the capsule's CID (letters and digits)")
        lock = self._locks.setdefault(cid, asyncio.Lock())
        async with lock:
            loaded = self._cached(cid)
            if loaded is not None:
                return loaded
            if self.registry is None:
                raise SkillError("this sandbox has no skills registry configured")
            archive = await self._download(cid, invocation)
            if _names_bytes(cid) and raw_cid(archive) != cid:
                raise SkillError("the capsule's bytes do not match its CID; not loaded")
            return await asyncio.to_thread(self._unpack, cid, archive)

    def _cached(self, cid: str) -> LoadedSkill | None:
        folder = self.root / cid
        if not folder.is_dir():
            return None
        names = [p for p in folder.iterdir() if p.is_dir()]
        if len(names) != 1:
            return None
        return _loaded(cid, names[0])

    async def _download(self, cid: str, invocation: str | None) -> bytes:
        headers = {"Accept": "application/gzip"}
        if invocation:
            headers.update({"Authorization": f"Bearer {invocation}", "X-Auth-Type": "ucan"})
        url = f"{self.registry}/capsules/{cid}/download"
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout) as http,
                http.stream("GET", url, headers=headers) as response,
            ):
                if response.status_code in (401, 403, 404):
                    raise SkillError(
                        f"skill {cid} not found, or not shared with this user "
                        f"(registry answered {response.status_code})"
                    )
                if response.status_code >= 400:
                    raise SkillError(f"the skills registry failed ({response.status_code})")
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > self.max_archive_bytes:
                        raise SkillError(
                            f"the capsule is larger than {self.max_archive_bytes} bytes"
                        )
                return bytes(data)
        except httpx.HTTPError as exc:
            raise SkillError(f"the skills registry is unreachable ({type(exc).__name__})") from exc

    def _unpack(self, cid: str, archive: bytes) -> LoadedSkill:
        try:
            # Closed by the ``with`` below; opening is what fails on a bad archive.
            bundle = tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz")  # noqa: SIM115
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise SkillError("the capsule is not a gzip tar archive") from exc
        with bundle:
            members = bundle.getmembers()
            if len(members) > self.max_entries:
                raise SkillError(f"the capsule holds more than {self.max_entries} entries")
            if sum(m.size for m in members if m.isfile()) > self.max_unpacked_bytes:
                raise SkillError(
                    f"the capsule unpacks to more than {self.max_unpacked_bytes} bytes"
                )
            self.root.mkdir(parents=True, exist_ok=True)
            self.root.chmod(0o711)
            staging = Path(tempfile.mkdtemp(dir=self.root, prefix=".unpack-"))
            try:
                try:
                    bundle.extractall(staging, filter="data")
                except (tarfile.TarError, OSError) as exc:
                    raise SkillError(f"the capsule could not be unpacked: {exc}") from exc
                folder = _skill_folder(staging)
                _readable(staging)
                target = self.root / cid
                os.replace(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return _loaded(cid, target / folder.name)


def _skill_folder(staging: Path) -> Path:
    """The capsule's one top folder holding ``SKILL.md``, named as a skill."""
    top = [p for p in staging.iterdir() if not p.name.startswith(".")]
    if len(top) != 1 or not top[0].is_dir() or not (top[0] / "SKILL.md").is_file():
        raise SkillError("a capsule holds one folder, <skill-name>/ with a SKILL.md")
    if not SKILL_NAME.match(top[0].name) or len(top[0].name) > 64:
        raise SkillError("the skill's folder name is not a valid skill name")
    return top[0]


def _readable(root: Path) -> None:
    """Readable (and folders searchable) by the sandbox user, writable by no one else."""
    root.chmod(0o755)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            Path(folder, name).chmod(0o755)
        for name in files:
            path = Path(folder, name)
            path.chmod(0o755 if path.stat().st_mode & 0o100 else 0o644)


def _loaded(cid: str, folder: Path) -> LoadedSkill:
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return LoadedSkill(cid=cid, name=folder.name, path=folder, files=tuple(files))
