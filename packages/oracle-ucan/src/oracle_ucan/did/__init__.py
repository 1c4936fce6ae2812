"""DID resolution: from a DID to the ``did:key`` verification keys it lists (§8.3).

``default_resolver()`` chains the local table, ``did:key``, ``did:ixo`` (Blocksync) and
``did:web`` behind one cache; ``resolve_service_did`` finds the DID a service publishes.
Network resolvers read at most :data:`MAX_DOCUMENT_BYTES` per response and raise only
``DidResolutionError``.
"""

from __future__ import annotations

from oracle_ucan.did.composite import CompositeResolver, DidResolver, default_resolver
from oracle_ucan.did.ixo import IXO_DID_DOCUMENT_QUERY, IxoResolver
from oracle_ucan.did.key import KeyResolver, ed25519_did_key
from oracle_ucan.did.local import LocalResolver
from oracle_ucan.did.service import (
    ServiceDidResolver,
    clear_service_did_cache,
    resolve_service_did,
)
from oracle_ucan.did.web import MAX_DOCUMENT_BYTES, WebResolver

__all__ = [
    "IXO_DID_DOCUMENT_QUERY",
    "MAX_DOCUMENT_BYTES",
    "CompositeResolver",
    "DidResolver",
    "IxoResolver",
    "KeyResolver",
    "LocalResolver",
    "ServiceDidResolver",
    "WebResolver",
    "clear_service_did_cache",
    "default_resolver",
    "ed25519_did_key",
    "resolve_service_did",
]
