"""``did:key`` resolution and the key formats DID documents carry (UCAN-19, UCAN-20).

A ``did:key`` is its own verification key. The helpers here turn the public-key
representations found in ``did:ixo``, ``did:web`` and local documents into Ed25519
``did:key`` strings; every one of them returns ``None`` for material that is not a
well-formed Ed25519 public key, so callers can skip such entries.
"""

from __future__ import annotations

import base64
import re

from multiformats import MultiformatsError, multibase

from oracle_ucan import varint
from oracle_ucan.errors import DidResolutionError, InvalidFormat, NotHandled
from oracle_ucan.principal import ED25519_PUB, parse_did_key

__all__ = [
    "KeyResolver",
    "did_key_from_base58",
    "did_key_from_hex",
    "did_key_from_jwk",
    "did_key_from_multibase",
    "ed25519_did_key",
]

_ED25519_KEY_BYTES = 32
_ED25519_PREFIX = varint.encode(ED25519_PUB)  # ed 01
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]+={0,2}$")


def ed25519_did_key(public_key: bytes) -> str:
    """The ``did:key`` of a raw 32-byte Ed25519 public key.

    Raises:
        InvalidFormat: the key is not 32 bytes.
    """
    if len(public_key) != _ED25519_KEY_BYTES:
        raise InvalidFormat(f"an Ed25519 public key is 32 bytes, got {len(public_key)}")
    return "did:key:" + multibase.encode(
        multibase.Multibase.BASE58BTC, _ED25519_PREFIX + public_key
    )


def did_key_from_multibase(value: str) -> str | None:
    """The ``did:key`` of a base58btc ``publicKeyMultibase`` holding an Ed25519 key.

    Both forms found in the wild are accepted: the multicodec form (``ed 01`` + 32 bytes,
    already a did:key's method-specific id) and a bare 32-byte key, to which the ``ed 01``
    prefix is added. Other key types are ``None``: they could never verify a UCAN
    (UCAN-14), so returning them would only cost failed verification attempts.
    """
    if not value.startswith("z"):
        return None
    try:
        _, raw = multibase.decode(value)
    except (MultiformatsError, ValueError):
        return None
    if len(raw) == _ED25519_KEY_BYTES:
        return ed25519_did_key(bytes(raw))
    if len(raw) == len(_ED25519_PREFIX) + _ED25519_KEY_BYTES and raw.startswith(_ED25519_PREFIX):
        # Re-encoding yields the same text for canonical base58btc and normalises the rest.
        return ed25519_did_key(bytes(raw[len(_ED25519_PREFIX) :]))
    return None


def did_key_from_hex(value: str) -> str | None:
    """The ``did:key`` of a ``publicKeyHex`` holding a raw 32-byte Ed25519 key."""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return ed25519_did_key(raw) if len(raw) == _ED25519_KEY_BYTES else None


def did_key_from_base58(value: str) -> str | None:
    """The ``did:key`` of a ``publicKeyBase58`` (bitcoin alphabet, no multibase prefix)."""
    if not value:
        return None
    try:
        _, raw = multibase.decode("z" + value)
    except (MultiformatsError, ValueError):
        return None
    return ed25519_did_key(bytes(raw)) if len(raw) == _ED25519_KEY_BYTES else None


def did_key_from_jwk(jwk: object) -> str | None:
    """The ``did:key`` of a ``publicKeyJwk`` with ``kty`` ``OKP`` and ``crv`` ``Ed25519``."""
    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        return None
    x = jwk.get("x")
    # urlsafe_b64decode silently drops characters outside the alphabet; refuse them instead.
    if not isinstance(x, str) or not _BASE64URL.fullmatch(x):
        return None
    try:
        raw = base64.urlsafe_b64decode(x.rstrip("=") + "=" * (-len(x.rstrip("=")) % 4))
    except ValueError:
        return None
    return ed25519_did_key(raw) if len(raw) == _ED25519_KEY_BYTES else None


class KeyResolver:
    """Resolves a ``did:key`` to itself (UCAN-19).

    Keys of types other than Ed25519 still resolve; verification then fails with
    ``INVALID_SIGNATURE`` "unsupported key type" (UCAN-14), which tells the caller more
    than a resolution error would.
    """

    async def resolve(self, did: str) -> list[str]:
        """``[did]`` for a well-formed ``did:key``.

        Raises:
            NotHandled: not a ``did:key``.
            DidResolutionError: a malformed ``did:key``.
        """
        if not did.startswith("did:key:"):
            raise NotHandled("not a did:key")
        try:
            _, key = parse_did_key(did)
        except InvalidFormat as exc:
            raise DidResolutionError(f"invalid did:key: {exc.message}") from exc
        if not key:
            raise DidResolutionError("invalid did:key: no key bytes")
        return [did]
