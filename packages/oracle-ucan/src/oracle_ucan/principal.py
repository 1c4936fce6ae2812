"""Ed25519 principals: ``did:key`` signers and verifiers, as ucanto's ``@ucanto/principal``.

A signer can sign as another DID (``with_did``): that is how a ``did:ixo`` principal signs
with the Ed25519 key its DID document lists.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import lru_cache

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from multiformats import MultiformatsError, multibase

from oracle_ucan import varint
from oracle_ucan.errors import InvalidFormat, SignatureError

__all__ = [
    "ED25519_PUB",
    "EDDSA_SIGNATURE_CODE",
    "Ed25519Signer",
    "Ed25519Verifier",
    "decode_principal",
    "encode_principal",
    "parse_did_key",
]

ED25519_PUB = 0xED
ED25519_PRIV = 0x1300
EDDSA_SIGNATURE_CODE = 0xD0ED
_DID_CORE = 0x0D1D
_PUB_PREFIX = varint.encode(ED25519_PUB)  # ed 01
_PRIV_PREFIX = varint.encode(ED25519_PRIV)  # 80 26
_DID_PREFIX = varint.encode(_DID_CORE)  # 9d 1a
# What JavaScript's String.prototype.trim removes (WhiteSpace and LineTerminator).
_JS_WHITESPACE = (
    "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
SIGNATURE_PREFIX = varint.encode(EDDSA_SIGNATURE_CODE) + varint.encode(64)  # ed a1 03 40


@lru_cache(maxsize=4096)
def parse_did_key(did: str) -> tuple[int, bytes]:
    """``(multicodec, key bytes)`` of a ``did:key``.

    Raises:
        InvalidFormat: not a ``did:key``.
    """
    if not did.startswith("did:key:z"):
        raise InvalidFormat(f"not a did:key: {did[:40]!r}")
    try:
        _, raw = multibase.decode(did[8:])
    except (MultiformatsError, ValueError) as exc:
        raise InvalidFormat(f"invalid did:key encoding: {exc}") from exc
    code, offset = varint.decode(raw)
    return code, bytes(raw[offset:])


def encode_principal(did: str) -> bytes:
    """Principal bytes of a UCAN (UCAN-7): the did:key's multicodec key, else ``9d1a`` + DID."""
    if did.startswith("did:key:"):
        code, key = parse_did_key(did)
        return varint.encode(code) + key
    if not did.startswith("did:") or len(did) < 5:
        raise InvalidFormat(f"not a DID: {did[:40]!r}")
    return _DID_PREFIX + did[4:].encode()


@lru_cache(maxsize=4096)
def decode_principal(raw: bytes) -> str:
    """The DID a UCAN's ``iss``/``aud`` bytes stand for.

    Raises:
        InvalidFormat: unknown principal encoding.
    """
    if not raw:
        raise InvalidFormat("empty principal")
    code, offset = varint.decode(raw)
    if code == _DID_CORE:
        try:
            text = raw[offset:].decode()
        except UnicodeDecodeError as exc:
            raise InvalidFormat("principal DID is not UTF-8") from exc
        if not text or ":" not in text:
            raise InvalidFormat("invalid principal DID")
        return "did:" + text
    return "did:key:" + multibase.encode("base58btc", raw)


@lru_cache(maxsize=4096)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True)
class Ed25519Verifier:
    """Verifies Ed25519 signatures of one public key."""

    public_key: bytes

    @classmethod
    def from_did(cls, did: str) -> Ed25519Verifier:
        """The verifier of an Ed25519 ``did:key``.

        Raises:
            InvalidFormat: not a did:key.
            SignatureError: a did:key of another key type (unsupported key type).
        """
        code, key = parse_did_key(did)
        if code != ED25519_PUB or len(key) != 32:
            raise SignatureError(f"unsupported key type 0x{code:x}")
        return cls(key)

    def did(self) -> str:
        """``did:key:z6Mk…``."""
        return "did:key:" + multibase.encode("base58btc", _PUB_PREFIX + self.public_key)

    def verify(self, signature: bytes, payload: bytes) -> bool:
        """Whether ``signature`` is this key's signature of ``payload``."""
        try:
            _public_key(self.public_key).verify(signature, payload)
        except (InvalidSignature, ValueError):
            return False
        return True


class Ed25519Signer:
    """Signs as ``did`` (by default the key's own ``did:key``) with an Ed25519 key."""

    signature_code = EDDSA_SIGNATURE_CODE
    signature_algorithm = "EdDSA"

    def __init__(self, seed: bytes, did: str | None = None) -> None:
        if len(seed) != 32:
            raise InvalidFormat("an Ed25519 seed is 32 bytes")
        self._seed = bytes(seed)
        self._key = Ed25519PrivateKey.from_private_bytes(self._seed)
        public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.verifier = Ed25519Verifier(public)
        self._did = did or self.verifier.did()

    def __repr__(self) -> str:
        return f"Ed25519Signer(did={self._did!r})"

    @classmethod
    def generate(cls) -> Ed25519Signer:
        """A signer with a fresh random key."""
        key = Ed25519PrivateKey.generate()
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return cls(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    @classmethod
    def from_mnemonic(cls, mnemonic: str) -> Ed25519Signer:
        """The key IXO derives from a mnemonic: ``SHA-256(mnemonic.trim())`` (UCAN-15).

        The trim is JavaScript's ``String.prototype.trim`` (its whitespace set differs
        from ``str.strip``'s), so both stacks derive the same key from the same text.
        """
        return cls(hashlib.sha256(mnemonic.strip(_JS_WHITESPACE).encode()).digest())

    @classmethod
    def parse(cls, text: str) -> Ed25519Signer:
        """Load ucanto's private-key text (``M`` + base64pad of the tagged key pair).

        Raises:
            InvalidFormat: not a ucanto Ed25519 private key.
        """
        if not text.startswith("M"):
            raise InvalidFormat("a ucanto private key starts with 'M' (base64pad)")
        try:
            raw = base64.b64decode(text[1:], validate=True)
        except ValueError as exc:
            raise InvalidFormat("invalid base64 in private key") from exc
        if len(raw) != 68 or raw[:2] != _PRIV_PREFIX or raw[34:36] != _PUB_PREFIX:
            raise InvalidFormat("not an Ed25519 private key")
        signer = cls(raw[2:34])
        if signer.verifier.public_key != raw[36:]:
            raise InvalidFormat("private key text carries a mismatched public key")
        return signer

    def format(self) -> str:
        """ucanto's private-key text for this key."""
        raw = _PRIV_PREFIX + self._seed + _PUB_PREFIX + self.verifier.public_key
        return "M" + base64.b64encode(raw).decode()

    def did(self) -> str:
        """The DID this signer signs as."""
        return self._did

    def with_did(self, did: str) -> Ed25519Signer:
        """The same key signing as ``did`` (e.g. a ``did:ixo`` that lists this key)."""
        return Ed25519Signer(self._seed, did)

    def sign(self, payload: bytes) -> bytes:
        """The raw 64-byte Ed25519 signature of ``payload``."""
        return self._key.sign(payload)
