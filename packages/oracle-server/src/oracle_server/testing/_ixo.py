"""A served oracle in ixo mode (no Matrix) with one signed-in user, for plugin tests.

The plugins that reach UCAN-protected services (memory, skills, composio, vfs…) each
prove one turn through the real server in ixo mode: the oracle's identity is known to the
service doubles (they verify its ``did:ixo`` with ``identity.verifier()``), the user
stores a delegation with ``POST /delegation``, and turns run over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from oracle_core import OraclePlugin
from oracle_server._app import OracleApp
from oracle_server._boot import create_oracle_app
from oracle_server.testing._server import auth_headers, serving
from oracle_ucan import ChainVerifier, Ed25519Signer, LocalResolver, delegate

__all__ = ["IxoIdentity", "IxoOracle", "serving_ixo_oracle"]

_UNREACHABLE = "http://127.0.0.1:9"


@dataclass(frozen=True)
class IxoIdentity:
    """An oracle's ixo-mode identity: its DIDs and signing mnemonic.

    Args:
        slug: Lower-case letters and digits; names the oracle and makes its DIDs.
    """

    slug: str

    @property
    def name(self) -> str:
        """``ORACLE_NAME``."""
        return f"{self.slug.capitalize()} Oracle"

    @property
    def oracle_did(self) -> str:
        """``ORACLE_DID``: the audience of the user's tokens, the issuer of invocations."""
        return f"did:ixo:ixo1{self.slug}oracle"

    @property
    def entity_did(self) -> str:
        """``ORACLE_ENTITY_DID``."""
        return f"did:ixo:entity:{self.slug}"

    @property
    def mnemonic(self) -> str:
        """``ORACLE_SIGNING_MNEMONIC``."""
        return f"{self.slug} oracle test signing mnemonic"

    def verifier(self) -> ChainVerifier:
        """Verifies chains through this oracle: its ``did:ixo`` resolves to its key."""
        resolver = LocalResolver()
        key = Ed25519Signer.from_mnemonic(self.mnemonic).did().removeprefix("did:key:")
        resolver.register(self.oracle_did, key)
        return ChainVerifier(resolver)

    def env(self, data_dir: Path) -> dict[str, str]:
        """Every variable ixo mode needs without Matrix; the chain URLs refuse."""
        return {
            "ORACLE_BACKEND": "ixo",
            "MATRIX_ENABLED": "false",
            "ORACLE_NAME": self.name,
            "ORACLE_DID": self.oracle_did,
            "ORACLE_ENTITY_DID": self.entity_did,
            "ORACLE_SIGNING_MNEMONIC": self.mnemonic,
            "NETWORK": "devnet",
            "BLOCKSYNC_GRAPHQL_URL": f"{_UNREACHABLE}/graphql",
            "SECP_MNEMONIC": "unused",
            "RPC_URL": _UNREACHABLE,
            "SQLITE_DATABASE_PATH": str(data_dir),
            "THROTTLE_LIMIT": "1000",
        }


@dataclass
class IxoOracle:
    """The served oracle and its signed-in user.

    Attributes:
        app: The app.
        http: A client of the oracle, sending the user's auth headers.
        user: The user's key.
        identity: The oracle's identity.
    """

    app: OracleApp
    http: httpx.AsyncClient
    user: Ed25519Signer
    identity: IxoIdentity

    async def new_session(self) -> str:
        """A new session of the user's."""
        created = await self.http.post("/sessions")
        created.raise_for_status()
        return str(created.json()["sessionId"])

    async def send(self, session_id: str, message: str, **body: Any) -> httpx.Response:
        """One non-streamed turn; the response, whatever its status."""
        return await self.http.post(f"/messages/{session_id}", json={"message": message, **body})


@asynccontextmanager
async def serving_ixo_oracle(
    identity: IxoIdentity,
    plugins: Sequence[OraclePlugin],
    *,
    data_dir: Path,
    env: Mapping[str, str] | None = None,
    grants: Iterable[Mapping[str, str]] = (),
    user: Ed25519Signer | None = None,
) -> AsyncIterator[IxoOracle]:
    """Serve an ixo-mode oracle with ``plugins`` until the block ends.

    Args:
        identity: The oracle's identity (share it with the doubles' verifiers).
        plugins: The plugins; entry points are not discovered.
        data_dir: ``SQLITE_DATABASE_PATH``.
        env: More variables (the model double's, the services' URLs); they win.
        grants: Capabilities (``{"with", "can"}``) the user delegates to the oracle,
            stored with ``POST /delegation`` before the block runs; none stores nothing.
        user: The user's key; a new one by default.
    """
    user = user or Ed25519Signer.generate()
    app = await create_oracle_app(
        {"name": identity.name},
        plugins=list(plugins),
        env={**identity.env(data_dir), **(env or {})},
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    headers = auth_headers(user, identity.oracle_did)
    async with (
        serving(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
    ):
        capabilities = [dict(grant) for grant in grants]
        if capabilities:
            grant = delegate(
                user,
                audience=identity.oracle_did,
                capabilities=capabilities,
                expiration=int(time.time()) + 3600,
            ).to_base64()
            stored = await http.post("/delegation", json={"raw": grant})
            if stored.status_code not in (200, 201):
                raise RuntimeError(f"the oracle refused the delegation: {stored.text}")
        yield IxoOracle(app=app, http=http, user=user, identity=identity)
