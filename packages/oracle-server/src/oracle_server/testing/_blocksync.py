"""A Blocksync GraphQL server on loopback that serves ``did:ixo`` documents.

It answers the one query the oracle sends (``IXO_DID_DOCUMENT_QUERY``) the way Blocksync
does, so ``did:ixo`` users authenticate through the real resolver over HTTP.

Example:
    ```python
    async with BlocksyncDouble() as blocksync:
        user = blocksync.add_user(Ed25519Signer.generate())  # signs as did:ixo:ixo1…
        env = {"BLOCKSYNC_GRAPHQL_URL": blocksync.graphql_url, ...}
    ```
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from oracle_server.testing._loopback import LoopbackServer
from oracle_ucan import Ed25519Signer
from oracle_ucan.did.ixo import IXO_DID_DOCUMENT_QUERY

__all__ = ["BlocksyncDouble"]

_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


class BlocksyncDouble(LoopbackServer):
    """Blocksync's GraphQL endpoint at ``POST /graphql`` with the DIDs it was given.

    Attributes:
        documents: DID → its ``verificationMethod`` list.
        queries: The DIDs asked for, in order.
        violations: Requests that were not the oracle's query, described.
    """

    name = "BlocksyncDouble"

    def __init__(self) -> None:
        self.documents: dict[str, list[dict[str, Any]]] = {}
        self.queries: list[str] = []
        self.violations: list[str] = []
        super().__init__([Route("/graphql", self._graphql, methods=["POST"])])

    @property
    def graphql_url(self) -> str:
        """``BLOCKSYNC_GRAPHQL_URL`` for the oracle."""
        return f"{self.origin}/graphql"

    def add_user(self, signer: Ed25519Signer, did: str | None = None) -> Ed25519Signer:
        """Publish a ``did:ixo`` whose signing key is ``signer``'s; returns the signer
        signing as that DID. Without ``did`` one is derived from the key (lowercase
        bech32 characters, as IXO addresses are)."""
        if did is None:
            digest = hashlib.sha256(signer.verifier.public_key).digest()
            did = "did:ixo:ixo1" + "".join(_BECH32[b % 32] for b in digest[:38])
        self.documents[did] = [
            {
                "id": f"{did}#signing",
                "type": "Ed25519VerificationKey2018",
                "controller": did,
                "publicKeyMultibase": signer.did().removeprefix("did:key:"),
            }
        ]
        return signer.with_did(did)

    async def _graphql(self, request: Request) -> Response:
        try:
            payload = json.loads(await request.body())
            did = payload["variables"]["id"]
            if payload["query"] != IXO_DID_DOCUMENT_QUERY or not isinstance(did, str):
                raise ValueError("not the DID document query")
        except (ValueError, KeyError, TypeError) as exc:
            self.violations.append(f"{type(exc).__name__}: {exc}")
            return JSONResponse({"errors": [{"message": "unexpected request"}]}, status_code=400)
        self.queries.append(did)
        nodes = []
        if did in self.documents:
            nodes.append({"id": did, "verificationMethod": self.documents[did]})
        return JSONResponse({"data": {"iids": {"nodes": nodes}}})
