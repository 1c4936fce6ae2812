"""Test support for interoperability with JavaScript: Node and pinned npm packages.

The interop tests (ucanto here; the socket.io client and the client SDK in
``oracle-server``'s tests) each keep a ``package.json`` and ``package-lock.json`` beside
their scripts. ``node_with_locked_packages`` checks Node and runs ``npm ci`` there when
``node_modules`` is missing or differs from the lockfile; a missing or old Node, or a
failed install, raises ``NodeSetupError``, which the tests' fixtures turn into a failure,
never a skip: these tests are the only proof of compatibility with the JS stacks.

``InvocationGate`` is the check a double of a UCAN-protected service (a memory engine, a
sandbox, a registry, a file store) runs on each request's bearer invocation, the way the
real service does: audience, chain rooted at a trusted user, ability and resource,
replays refused or, for services the oracle sends one cached invocation, admitted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oracle_ucan.capability import CapabilityDef
from oracle_ucan.stores import InMemoryInvocationStore, InvocationStore
from oracle_ucan.validator import ChainVerifier, ValidateResult, validate_invocation

__all__ = [
    "NODE_MAJOR",
    "InvocationGate",
    "NodeSetupError",
    "ReusableInvocations",
    "did_web_document",
    "node_with_locked_packages",
]

NODE_MAJOR = 20
"""The oldest Node major version the interop scripts run on."""

NPM_CI_TIMEOUT = 300
"""Seconds ``npm ci`` may take."""


class NodeSetupError(RuntimeError):
    """Node or the pinned packages are not usable; the message starts with a stable code."""


def _tool(name: str, code: str, purpose: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise NodeSetupError(
            f"{code}.node_missing: `{name}` is not on PATH; {purpose} need "
            f"Node {NODE_MAJOR}+ and npm (.ci/run installs them)"
        )
    return path


def _locked_packages(lockfile: Path) -> dict[str, tuple[object, object]] | None:
    try:
        packages = json.loads(lockfile.read_text())["packages"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {
        name: (entry.get("version"), entry.get("integrity"))
        for name, entry in packages.items()
        if name  # "" is the project itself, absent from the installed tree's lockfile
    }


def _install_is_current(js_dir: Path) -> bool:
    """Whether ``node_modules`` holds exactly what ``package-lock.json`` pins."""
    lock = js_dir / "package-lock.json"
    installed = js_dir / "node_modules" / ".package-lock.json"
    if not installed.is_file() or installed.stat().st_mtime < lock.stat().st_mtime:
        return False
    wanted = _locked_packages(lock)
    return wanted is not None and wanted == _locked_packages(installed)


def node_with_locked_packages(js_dir: Path, *, code: str, purpose: str) -> str:
    """The ``node`` executable, after ``npm ci`` in ``js_dir`` when its install is stale.

    Args:
        js_dir: The folder with ``package.json`` and ``package-lock.json``.
        code: Prefix of the failure codes (``<code>.node_missing``, ``.node_too_old``,
            ``.npm_ci_failed``).
        purpose: What needs Node, for the failure message ("the ucanto interoperability
            tests").

    Returns:
        The path of ``node``.

    Raises:
        NodeSetupError: Node or npm missing, Node too old, or ``npm ci`` failed.
    """
    node_path = _tool("node", code, purpose)
    npm_path = _tool("npm", code, purpose)
    version = subprocess.run(
        [node_path, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    major = version.lstrip("v").split(".", 1)[0]
    if not major.isdigit() or int(major) < NODE_MAJOR:
        raise NodeSetupError(f"{code}.node_too_old: Node {version!r}; need {NODE_MAJOR}+")
    if not _install_is_current(js_dir):
        env = {**os.environ, "npm_config_update_notifier": "false"}
        done = subprocess.run(
            [npm_path, "ci", "--no-audit", "--no-fund"],
            cwd=js_dir,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise NodeSetupError(
                f"{code}.npm_ci_failed: `npm ci` in {js_dir} exited {done.returncode}:\n"
                f"{done.stderr[-4000:]}"
            )
    return node_path


class ReusableInvocations:
    """An invocation store that admits reuse, for doubles of services the oracle sends one
    cached invocation to many times (the real services accept it while it lasts)."""

    async def has(self, cid: str) -> bool:
        """Never seen: every use is the first."""
        return False

    async def add(self, cid: str, ttl_seconds: int) -> None:
        """Nothing is kept."""
        return

    async def claim(self, cid: str, ttl_seconds: int) -> bool:
        """Always claimed."""
        return True


def did_web_document(did: str) -> dict[str, Any]:
    """The ``/.well-known/did.json`` a double serves so the oracle resolves its DID."""
    return {"@context": ["https://www.w3.org/ns/did/v1"], "id": did}


@dataclass
class InvocationGate:
    """Checks the bearer invocation of each request to a service double.

    Attributes:
        did: The service's DID: the audience every invocation must name.
        resource: The ``with`` the invocation must cover (``ixo:memory``…).
        capability: The ability it must claim.
        trusted_users: DIDs accepted at the root of the proof chain.
        verifier: Resolves non-``did:key`` issuers (the oracle's ``did:ixo``).
        single_use: Refuse a second use of an invocation (services minted for per call);
            otherwise reuse is admitted (services the oracle caches one invocation for).
        auth_type: The ``X-Auth-Type`` the request must carry with ``Authorization:
            Bearer``; ``None`` accepts the bearer alone.
        rejected: Why each refused request was refused (a validator code, or
            ``"missing invocation"``), in order.
    """

    did: str
    resource: str
    capability: CapabilityDef
    trusted_users: Collection[str]
    verifier: ChainVerifier | None = None
    single_use: bool = False
    auth_type: str | None = "ucan"
    rejected: list[str] = field(default_factory=list)
    store: InvocationStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = InMemoryInvocationStore() if self.single_use else ReusableInvocations()

    @staticmethod
    def bearer(headers: Mapping[str, str]) -> str | None:
        """The token of ``Authorization: Bearer <token>``, or ``None``."""
        authorization = headers.get("authorization", "")
        if not authorization.startswith("Bearer "):
            return None
        return authorization.removeprefix("Bearer ").strip() or None

    async def check(self, headers: Mapping[str, str]) -> ValidateResult:
        """Validate the request's bearer invocation; a refusal is recorded in ``rejected``.

        An ``ok`` result has a non-empty ``proof_chain`` (its first DID is the user) and
        an ``invoker`` (the oracle).
        """
        token = self.bearer(headers)
        if token is None or (
            self.auth_type is not None and headers.get("x-auth-type") != self.auth_type
        ):
            self.rejected.append("missing invocation")
            return ValidateResult.fail("UNAUTHORIZED", "a UCAN bearer invocation is required")
        return await self.check_token(token)

    async def check_token(self, token: str) -> ValidateResult:
        """Validate an invocation passed some other way (a header of the service's own)."""
        result = await validate_invocation(
            token,
            self.capability,
            self.resource,
            audience=self.did,
            root_issuers=list(self.trusted_users),
            store=self.store,
            verifier=self.verifier,
        )
        if result.ok and result.proof_chain and result.invoker is not None:
            return result
        code = result.error.code if result.error else "invalid"
        self.rejected.append(code)
        if result.ok:  # valid, yet without a chain to a user: not a delegated call
            return ValidateResult.fail("UNAUTHORIZED", "the invocation has no proof chain")
        return result
