"""A skills registry double that speaks the real protocol (03-plugins §8 item 6).

``SkillsRegistryDouble`` is a Starlette app with:

- ``GET /capsules?limit&offset``: ``{capsules[], pagination{total, limit, offset, hasMore}}``;
- ``GET /capsules/search?q&limit``: ``{query, count, capsules[]}``;
- ``GET /capsules/{cid}/download``: the capsule as a gzip tar archive
  (``<name>/SKILL.md``, ``<name>/scripts/…``), for a sandbox to mount read-only;
- ``GET /.well-known/did.json``: the registry's ``did:web`` document.

Without ``Authorization`` the registry answers public capsules only. With
``Authorization: Bearer <invocation>`` and ``X-Auth-Type: ucan`` it checks the invocation
with ``oracle_ucan.validate_invocation`` (addressed to the double's DID, claiming
``skills/*`` on ``ixo:skills``, proof chain rooted at a trusted user) and adds the
private capsules of the user at the root of the chain, marked ``visibility: "private"``;
a bearer that does not validate gets ``401``. A private capsule's archive is served only
to its owner: ``401`` without a valid invocation, ``404`` to anyone else.

Capsules are built from in-memory files by ``capsule(...)``; each ``cid`` is the CIDv1
(raw, sha256) of its archive's bytes. Rows come back newest first, so the double never
does the plugin's "private first" for it.

Needs ``oracle-ucan`` and ``starlette`` (``pip install 'oracle-plugins-skills[testing]'``).
Serve it with any ASGI server, e.g. ``oracle_server.testing``'s ``LoopbackServer``::

    registry = SkillsRegistryDouble(trusted_users=[user.did()])
    async with LoopbackServer(registry.routes) as server:
        registry.origin = server.origin
        config = {"SKILLS_CAPSULES_BASE_URL": registry.base_url}
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oracle_plugins.skills._cid import archive_cid
from oracle_ucan import CapabilityDef, ChainVerifier
from oracle_ucan.testing import InvocationGate, did_web_document

__all__ = [
    "DEFAULT_REGISTRY_DID",
    "OTHER_USER_DID",
    "Caller",
    "RecordedRequest",
    "Refused",
    "SkillCapsule",
    "SkillsRegistryDouble",
    "archive_cid",
    "capsule",
    "fixture_capsules",
    "read_archive",
]

DEFAULT_REGISTRY_DID = "did:web:capsules.skills.test"
"""The double's DID unless told otherwise."""

OTHER_USER_DID = "did:key:z6MkotherUserOfTheSkillsRegistryDouble"
"""Owner of a private fixture capsule that no test user ever sees."""

_SKILLS = CapabilityDef(can="skills/*", protocol="ixo:")
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_WORD_RE = re.compile(r"\w+")
_ARCHIVE_MTIME = 0  # fixed, so the same files always give the same archive and cid


@dataclass(frozen=True)
class SkillCapsule:
    """One capsule of the double.

    Attributes:
        name: The skill's name (its folder in the archive and in the sandbox).
        description: What it does.
        files: The archive's files, relative to ``<name>/``.
        archive: The ``.tar.gz`` bytes served by the download route.
        cid: The CIDv1 (raw, sha256) of ``archive``.
        created_at: ISO 8601 publication instant.
        private_owner: The user DID that published it privately; ``None`` when public.
        license: Optional licence string, passed through in rows.
    """

    name: str
    description: str
    files: Mapping[str, bytes]
    archive: bytes
    cid: str
    created_at: str
    private_owner: str | None = None
    license: str | None = None

    @property
    def private(self) -> bool:
        """Whether only its owner sees it."""
        return self.private_owner is not None

    def row(self, *, oracle_did: str | None = None) -> dict[str, Any]:
        """The capsule as the registry lists it; private rows carry ``visibility``."""
        row: dict[str, Any] = {
            "cid": self.cid,
            "name": self.name,
            "description": self.description,
            "license": self.license,
            "compatibility": None,
            "allowedTools": None,
            "metadata": None,
            "archiveSize": len(self.archive),
            "createdAt": self.created_at,
        }
        if self.private:
            row.update(visibility="private", ownerDid=self.private_owner, oracleDid=oracle_did)
        return row


def _relative_path(path: str) -> str:
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ValueError(f"capsule file path {path!r} must be relative, e.g. 'scripts/run.py'")
    return path


def _archive(name: str, files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        directories = {name}
        for path in files:
            parts = path.split("/")[:-1]
            directories.update("/".join([name, *parts[: i + 1]]) for i in range(len(parts)))
        for directory in sorted(directories):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _ARCHIVE_MTIME
            tar.addfile(info)
        for path in sorted(files):
            data = files[path]
            info = tarfile.TarInfo(f"{name}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, _ARCHIVE_MTIME
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=_ARCHIVE_MTIME)


def capsule(
    name: str,
    files: Mapping[str, str | bytes] | None = None,
    *,
    description: str | None = None,
    private_owner: str | None = None,
    created_at: str = "2025-01-01T00:00:00.000Z",
    license: str | None = None,
) -> SkillCapsule:
    """A capsule built from in-memory files.

    Args:
        name: Lower-case words joined by ``-``, e.g. ``invoice-builder``.
        files: Paths relative to the skill folder → text or bytes. A ``SKILL.md`` with
            ``name``/``description`` front matter is added when missing.
        description: Defaults to ``"The <name> skill."``.
        private_owner: Publish privately for this user DID.
        created_at: ISO 8601 publication instant.
        license: Optional licence.

    Raises:
        ValueError: A bad name, a file path that is absolute or leaves the folder, or a
            ``created_at`` that is not ISO 8601.
    """
    if not _NAME_RE.fullmatch(name) or len(name) > 64:
        raise ValueError(f"capsule name {name!r} must be lower-case words joined by '-'")
    try:
        datetime.fromisoformat(created_at)
    except ValueError:
        raise ValueError(f"created_at {created_at!r} must be an ISO 8601 instant") from None
    description = description if description is not None else f"The {name} skill."
    encoded = {
        _relative_path(path): data.encode() if isinstance(data, str) else bytes(data)
        for path, data in (files or {}).items()
    }
    if "SKILL.md" not in encoded:
        front = f"---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n\n{description}\n"
        encoded["SKILL.md"] = front.encode()
    archive = _archive(name, encoded)
    return SkillCapsule(
        name=name,
        description=description,
        files=encoded,
        archive=archive,
        cid=archive_cid(archive),
        created_at=created_at,
        private_owner=private_owner,
        license=license,
    )


def fixture_capsules(owner: str) -> list[SkillCapsule]:
    """The default catalog, with ``owner``'s private skills.

    - ``invoice-builder``: public (2025-03-01) **and** ``owner``'s private one, older
      (2025-01-15): search must still pick the private one.
    - ``slide-deck``: two public versions (2025-01-10, 2025-04-02): the newest wins.
    - ``kyc-check``: public. ``meeting-notes``: ``owner``'s private skill.
    - ``tax-helper``: private to ``OTHER_USER_DID``, never shown to ``owner``.
    """
    run = "import sys\nprint('running', sys.argv[1:])\n"
    return [
        capsule(
            "invoice-builder",
            {"scripts/build_invoice.py": run},
            description="Builds PDF invoices from line items.",
            created_at="2025-03-01T09:00:00.000Z",
            license="MIT",
        ),
        capsule(
            "invoice-builder",
            {"scripts/build_invoice.py": run, "templates/letterhead.txt": "ACME Ltd\n"},
            description="Builds invoices on my company letterhead.",
            private_owner=owner,
            created_at="2025-01-15T09:00:00.000Z",
        ),
        capsule(
            "slide-deck",
            {"scripts/run.py": run},
            description="Turns an outline into a PowerPoint deck.",
            created_at="2025-01-10T12:00:00.000Z",
        ),
        capsule(
            "slide-deck",
            {"scripts/run.py": run, "themes/dark.json": "{}\n"},
            description="Turns an outline into a PowerPoint deck, with themes.",
            created_at="2025-04-02T12:00:00.000Z",
        ),
        capsule(
            "kyc-check",
            {"scripts/run.py": run},
            description="Checks identity documents for KYC.",
            created_at="2025-02-20T08:30:00.000Z",
        ),
        capsule(
            "meeting-notes",
            {"scripts/run.py": run},
            description="Summarises meeting notes into action items.",
            private_owner=owner,
            created_at="2025-02-01T10:00:00.000Z",
        ),
        capsule(
            "tax-helper",
            {"scripts/run.py": run},
            description="Prepares tax returns for invoices.",
            private_owner=OTHER_USER_DID,
            created_at="2025-05-01T10:00:00.000Z",
        ),
    ]


@dataclass(frozen=True)
class Caller:
    """Who an authenticated request is from: the user at the root and the invoker."""

    user: str
    oracle: str


@dataclass(frozen=True)
class RecordedRequest:
    """One request to a capsule route.

    Attributes:
        path: The request path.
        params: Query parameters.
        network: ``X-IXO-Network``, when sent.
        caller: The validated caller; ``None`` for an anonymous or refused request.
        authorization: Whether an ``Authorization`` header was sent.
    """

    path: str
    params: dict[str, str]
    network: str | None
    caller: Caller | None
    authorization: bool


@dataclass(frozen=True)
class Refused:
    """A bearer that did not validate; the request gets ``401``."""

    reason: str


@dataclass
class SkillsRegistryDouble:
    """The double's app and catalog.

    Args:
        trusted_users: User DIDs whose delegations are accepted at the root of the chain.
        capsules: The catalog; default ``fixture_capsules(trusted_users[0])`` (no
            private capsules of anyone when no user is trusted).
        did: The registry's DID (served at ``/.well-known/did.json``).
        verifier: Verifies the chain's signatures; give it a resolver for ``did:ixo``
            oracles (``did:key`` ones need none).
        serve_did_document: ``False`` answers ``404`` for the DID document, so the oracle
            cannot resolve the audience and goes public-only.
    """

    trusted_users: list[str] = field(default_factory=list)
    capsules: list[SkillCapsule] | None = None
    did: str = DEFAULT_REGISTRY_DID
    verifier: ChainVerifier | None = None
    serve_did_document: bool = True
    origin: str | None = None
    """Base URL of the served app; set by whoever serves it."""
    fail_status: int | None = None
    """When set, the capsule routes answer this status (the DID document still works)."""
    requests: list[RecordedRequest] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    downloads: list[tuple[str, Caller | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.trusted_users = list(self.trusted_users)
        self.gate = InvocationGate(
            self.did,
            "ixo:skills",
            _SKILLS,
            self.trusted_users,
            self.verifier,
            rejected=self.rejected,
        )
        if self.capsules is None:
            owner = self.trusted_users[0] if self.trusted_users else OTHER_USER_DID
            self.capsules = fixture_capsules(owner)

    # --- serving -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``SKILLS_CAPSULES_BASE_URL`` for the served double."""
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    def archive_url(self, cid: str) -> str:
        """Where the archive of capsule ``cid`` is downloaded from."""
        return f"{self.base_url}/capsules/{cid}/download"

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes, for ``LoopbackServer(double.routes)`` or a Starlette app."""
        return [
            Route("/.well-known/did.json", self._did_document, methods=["GET"]),
            Route("/capsules", self._list, methods=["GET"]),
            Route("/capsules/search", self._search, methods=["GET"]),
            Route("/capsules/{cid}/download", self._download, methods=["GET"]),
        ]

    def app(self) -> Starlette:
        """A Starlette app serving ``routes`` (for any ASGI server or ``httpx.ASGITransport``)."""
        return Starlette(routes=self.routes)

    # --- catalog helpers for tests --------------------------------------------------------

    def add(self, *capsules: SkillCapsule) -> None:
        """Publish more capsules."""
        self.catalog.extend(capsules)

    @property
    def catalog(self) -> list[SkillCapsule]:
        """Every capsule, whoever may see it."""
        assert self.capsules is not None  # set in __post_init__
        return self.capsules

    def by_cid(self, cid: str) -> SkillCapsule | None:
        """The capsule with this cid, if any."""
        return next((c for c in self.catalog if c.cid == cid), None)

    def visible_to(self, user: str | None) -> list[SkillCapsule]:
        """What ``user`` (``None``: an anonymous caller) sees, newest first."""
        rows = [c for c in self.catalog if not c.private or c.private_owner == user]
        return sorted(rows, key=lambda c: _instant(c.created_at), reverse=True)

    def callers(self) -> set[Caller | None]:
        """The callers of the recorded capsule requests."""
        return {r.caller for r in self.requests}

    # --- auth -----------------------------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str]) -> Caller | Refused | None:
        """The caller of a request: a ``Caller``, ``None`` when it sent no bearer, or
        ``Refused`` when the bearer does not validate (recorded in ``rejected``)."""
        authorization = headers.get("authorization")
        if authorization is None:
            return None
        result = await self.gate.check(headers)
        if not result.ok:
            return Refused(result.error.code if result.error else "invalid")
        assert result.invoker is not None
        return Caller(user=result.proof_chain[0], oracle=result.invoker)

    async def _caller(self, request: Request) -> Caller | Response | None:
        caller = await self.authenticate(request.headers)
        self.requests.append(
            RecordedRequest(
                path=request.url.path,
                params=dict(request.query_params),
                network=request.headers.get("x-ixo-network"),
                caller=caller if isinstance(caller, Caller) else None,
                authorization="authorization" in request.headers,
            )
        )
        if isinstance(caller, Refused):
            return JSONResponse({"error": "invalid invocation"}, status_code=401)
        if self.fail_status is not None:
            return JSONResponse({"error": "registry failure"}, status_code=self.fail_status)
        return caller

    # --- routes ---------------------------------------------------------------------------

    async def _did_document(self, request: Request) -> Response:
        if not self.serve_did_document:
            return JSONResponse({"error": "not found"}, status_code=404)
        return JSONResponse(did_web_document(self.did))

    async def _list(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        try:
            limit = _int_param(request, "limit", 20, 1, 100)
            offset = _int_param(request, "offset", 0, 0, None)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        visible = self.visible_to(caller.user if caller else None)
        page = visible[offset : offset + limit]
        oracle = caller.oracle if caller else None
        return JSONResponse(
            {
                "capsules": [c.row(oracle_did=oracle) for c in page],
                "pagination": {
                    "total": len(visible),
                    "limit": limit,
                    "offset": offset,
                    "hasMore": offset + len(page) < len(visible),
                },
            }
        )

    async def _search(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        q = request.query_params.get("q", "").strip()
        words = [w.lower() for w in _WORD_RE.findall(q)]
        if not words:
            return JSONResponse({"error": "q is required"}, status_code=400)
        try:
            limit = _int_param(request, "limit", 10, 1, 50)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        found = [
            c
            for c in self.visible_to(caller.user if caller else None)
            if any(w in f"{c.name} {c.description}".lower() for w in words)
        ][:limit]
        oracle = caller.oracle if caller else None
        return JSONResponse(
            {"query": q, "count": len(found), "capsules": [c.row(oracle_did=oracle) for c in found]}
        )

    async def _download(self, request: Request) -> Response:
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        found = self.by_cid(request.path_params["cid"])
        if found is not None and found.private:
            if caller is None:
                return JSONResponse({"error": "authorization required"}, status_code=401)
            if caller.user != found.private_owner:
                found = None  # someone else's private capsule does not exist for this caller
        if found is None:
            return JSONResponse({"error": "capsule not found"}, status_code=404)
        self.downloads.append((found.cid, caller))
        return Response(
            found.archive,
            media_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="{found.name}.tar.gz"'},
        )


def _instant(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}")
    return value


def read_archive(data: bytes) -> dict[str, bytes]:
    """The files of a capsule archive, by path (``<name>/SKILL.md`` …); directories left out."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file always has content
                files[member.name] = extracted.read()
    return files
