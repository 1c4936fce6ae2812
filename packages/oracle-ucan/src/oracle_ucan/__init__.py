"""oracle-ucan: ucanto-compatible UCAN for Python.

Decode, validate and mint the UCANs that ucanto clients send: CARv1 archives of
DAG-CBOR UCAN 0.9.1 blocks signed with Ed25519, issued by ``did:key`` principals or by
``did:ixo`` / ``did:web`` principals whose keys are resolved. Byte-identical to ucanto
for the same inputs. Validators return stable error codes and never raise on bad input.
"""

from oracle_ucan.capability import (
    CapabilityDef,
    ability_covers,
    default_caveats,
    resource_covers,
    resource_names_did,
)
from oracle_ucan.car import MAX_BLOCKS, MAX_CAR_BYTES, CarFile, decode_car, encode_car
from oracle_ucan.cid import CID, cid_for
from oracle_ucan.delegation import Delegation, decode_base64, delegate, invoke
from oracle_ucan.did import (
    CompositeResolver,
    DidResolver,
    IxoResolver,
    KeyResolver,
    LocalResolver,
    WebResolver,
    default_resolver,
    resolve_service_did,
)
from oracle_ucan.errors import (
    DidResolutionError,
    ErrorCode,
    InvalidFormat,
    NotHandled,
    SignatureError,
    UcanError,
)
from oracle_ucan.mint import InvocationMinter, MintError, TokenCache, mint_invocation
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier
from oracle_ucan.stores import InMemoryInvocationStore, InvocationStore
from oracle_ucan.ucan import UCAN_VERSION, Ucan, issue
from oracle_ucan.validator import (
    CLOCK_SKEW_SECONDS,
    MAX_CHAIN_DEPTH,
    ChainVerifier,
    ValidateResult,
    ValidationFailure,
    validate_auth_invocation,
    validate_delegation,
    validate_invocation,
)

__version__ = "0.1.0"

__all__ = [
    "CID",
    "CLOCK_SKEW_SECONDS",
    "MAX_BLOCKS",
    "MAX_CAR_BYTES",
    "MAX_CHAIN_DEPTH",
    "UCAN_VERSION",
    "CapabilityDef",
    "CarFile",
    "ChainVerifier",
    "CompositeResolver",
    "Delegation",
    "DidResolutionError",
    "DidResolver",
    "Ed25519Signer",
    "Ed25519Verifier",
    "ErrorCode",
    "InMemoryInvocationStore",
    "InvalidFormat",
    "InvocationMinter",
    "InvocationStore",
    "IxoResolver",
    "KeyResolver",
    "LocalResolver",
    "MintError",
    "NotHandled",
    "SignatureError",
    "TokenCache",
    "Ucan",
    "UcanError",
    "ValidateResult",
    "ValidationFailure",
    "WebResolver",
    "ability_covers",
    "cid_for",
    "decode_base64",
    "decode_car",
    "default_caveats",
    "default_resolver",
    "delegate",
    "encode_car",
    "invoke",
    "issue",
    "mint_invocation",
    "resolve_service_did",
    "resource_covers",
    "resource_names_did",
    "validate_auth_invocation",
    "validate_delegation",
    "validate_invocation",
]
