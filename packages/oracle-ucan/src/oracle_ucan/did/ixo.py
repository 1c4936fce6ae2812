"""``did:ixo`` resolution through the Blocksync GraphQL indexer (UCAN-20).

Network bounds and error mapping are those of :func:`oracle_ucan.did.web.fetch_json`:
one overall deadline, 1 MiB responses, only ``DidResolutionError`` raised.
"""

from __future__ import annotations

import json

import httpx

from oracle_ucan.did.key import (
    did_key_from_base58,
    did_key_from_hex,
    did_key_from_jwk,
    did_key_from_multibase,
)
from oracle_ucan.did.web import fetch_json
from oracle_ucan.errors import DidResolutionError, NotHandled

__all__ = ["IXO_DID_DOCUMENT_QUERY", "IxoResolver", "verification_keys"]

IXO_DID_DOCUMENT_QUERY = (
    "query GetDIDDocument($id: String!) "
    "{ iids(filter: { id: { equalTo: $id } }) { nodes { id verificationMethod } } }"
)
"""The GraphQL query sent to Blocksync, byte for byte as UCAN-20 gives it."""

_MAX_GRAPHQL_MESSAGE = 200


class IxoResolver:
    """Resolves ``did:ixo`` DIDs to the Ed25519 keys their on-chain documents list.

    Args:
        graphql_url: Blocksync GraphQL endpoint (``BLOCKSYNC_GRAPHQL_URL``).
        client: Client to send with; ``None`` opens one per resolution.
        timeout: Overall deadline of one query, in seconds.
    """

    def __init__(
        self,
        graphql_url: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._graphql_url = graphql_url
        self._client = client
        self._timeout = timeout

    async def resolve(self, did: str) -> list[str]:
        """Every Ed25519 ``did:key`` of the DID's document, in document order.

        Verification tries each in turn, so a rotated-in key works as soon as the
        document lists it (UCAN-20).

        Raises:
            NotHandled: not a ``did:ixo``.
            DidResolutionError: Blocksync unreachable or failing, GraphQL ``errors``, no
                document for the DID, or no usable Ed25519 key in it.
        """
        if not did.startswith("did:ixo:") or len(did) == len("did:ixo:"):
            raise NotHandled("not a did:ixo")
        answer = await fetch_json(
            "POST",
            self._graphql_url,
            client=self._client,
            deadline=self._timeout,
            what="Blocksync",
            body={"query": IXO_DID_DOCUMENT_QUERY, "variables": {"id": did}},
        )
        return verification_keys(_document_node(did, answer))


def _document_node(did: str, answer: object) -> dict[str, object]:
    if not isinstance(answer, dict):
        raise DidResolutionError("Blocksync answered a non-object")
    errors = answer.get("errors")
    if errors:
        first = errors[0] if isinstance(errors, list) else errors
        message = first.get("message") if isinstance(first, dict) else None
        detail = message[:_MAX_GRAPHQL_MESSAGE] if isinstance(message, str) else "unknown error"
        raise DidResolutionError(f"Blocksync GraphQL error: {detail}")
    data = answer.get("data")
    iids = data.get("iids") if isinstance(data, dict) else None
    nodes = iids.get("nodes") if isinstance(iids, dict) else None
    if not isinstance(nodes, list):
        raise DidResolutionError("Blocksync answer has no data.iids.nodes")
    for node in nodes:
        # The filter asks for this id; checking it keeps a misbehaving indexer from
        # handing over another DID's keys.
        if isinstance(node, dict) and node.get("id") == did:
            return node
    raise DidResolutionError("DID document not found on Blocksync")


def verification_keys(node: dict[str, object]) -> list[str]:
    """The Ed25519 ``did:key``s of a Blocksync ``iids`` node, in document order.

    Entries count when their ``type`` contains ``Ed25519`` or is ``JsonWebKey2020``, or
    their ``id`` contains ``signing``; the key comes from the first field present of
    ``publicKeyMultibase``, ``publicKeyHex``, ``publicKeyBase58``, ``publicKeyJwk``.
    Entries whose key is not Ed25519 are skipped; duplicates keep their first place.

    Args:
        node: A node with ``verificationMethod`` as a list or a JSON-encoded list.

    Raises:
        DidResolutionError: malformed ``verificationMethod`` or no Ed25519 key.
    """
    methods = node.get("verificationMethod")
    if isinstance(methods, str):
        # Blocksync stores the column as JSON text on some deployments.
        try:
            methods = json.loads(methods)
        except (ValueError, RecursionError) as exc:
            raise DidResolutionError("verificationMethod is not valid JSON") from exc
    if not isinstance(methods, list):
        raise DidResolutionError("DID document has no verificationMethod list")
    keys: list[str] = []
    for method in methods:
        if not isinstance(method, dict) or not _is_signing_method(method):
            continue
        did_key = _method_key(method)
        if did_key is not None and did_key not in keys:
            keys.append(did_key)
    if not keys:
        raise DidResolutionError("DID document lists no Ed25519 verification key")
    return keys


def _is_signing_method(method: dict[str, object]) -> bool:
    kind = method.get("type")
    ident = method.get("id")
    if isinstance(kind, str) and ("Ed25519" in kind or kind == "JsonWebKey2020"):
        return True
    return isinstance(ident, str) and "signing" in ident


def _method_key(method: dict[str, object]) -> str | None:
    # The first representation present decides, as in the TypeScript resolver: a broken
    # multibase value is not rescued by a stray hex field of the same entry.
    multibase_value = method.get("publicKeyMultibase")
    if isinstance(multibase_value, str):
        return did_key_from_multibase(multibase_value)
    hex_value = method.get("publicKeyHex")
    if isinstance(hex_value, str):
        return did_key_from_hex(hex_value)
    base58_value = method.get("publicKeyBase58")
    if isinstance(base58_value, str):
        return did_key_from_base58(base58_value)
    jwk = method.get("publicKeyJwk")
    if isinstance(jwk, str):
        try:
            jwk = json.loads(jwk)
        except (ValueError, RecursionError):
            return None
    return did_key_from_jwk(jwk)
