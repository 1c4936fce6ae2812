"""Ed25519 principals (``oracle_ucan.principal``, UCAN-7, 14-16).

Expected DIDs and key texts marked "ucanto" were printed by ``@ucanto/principal`` 9.0.3's
``ed25519.Signer.derive(seed)`` / ``Signer.format``; the rest is recomputed here with
``hashlib`` and ``cryptography`` directly.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_ucan.errors import InvalidFormat, SignatureError
from oracle_ucan.principal import (
    ED25519_PUB,
    EDDSA_SIGNATURE_CODE,
    Ed25519Signer,
    Ed25519Verifier,
    decode_principal,
    encode_principal,
    parse_did_key,
)

BOUNDED = settings(max_examples=100, deadline=None, derandomize=True, database=None)

SEED = bytes(range(32))
SEED_DID = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"  # ucanto
SEED_TEXT = (  # ucanto
    "MgCYAAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eH+0BA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
)
MNEMONIC = "abandon ability able"
MNEMONIC_DID = "did:key:z6MkqedPEsbTg5yYirTMmfbTJK8YaozTMNpih913ZS8FRcXa"  # ucanto, SHA-256 seed
MNEMONIC_TEXT = (  # ucanto
    "MgCZHDESRqE4gnA6IejhDEG5+tKiXYC55bUlIYBqhdxdpIe0BploSqpQytYNSTebXoDjo+vZt4F2+p5PjXF0IXFAgExk="
)
SECP256K1_DID = "did:key:zQ3shokFTS3brHcDQrn82RUDfCZESWL1ZdCEJwekUDPQiYBme"  # did:key spec
P256_DID = "did:key:zDnaerDaTF5BXEavCrfRZEk316dpbLsfPDZ3WJ5hRTPFU2169"  # did:key spec

_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58btc(raw: bytes) -> str:
    """Bitcoin base58, written out here so the test does not rely on the code under test."""
    number = int.from_bytes(raw, "big")
    out = ""
    while number:
        number, digit = divmod(number, 58)
        out = _BASE58[digit] + out
    return "1" * (len(raw) - len(raw.lstrip(b"\x00"))) + out


def public_key_of(seed: bytes) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def did_key_of(seed: bytes) -> str:
    return "did:key:z" + base58btc(b"\xed\x01" + public_key_of(seed))


# ---------------------------------------------------------------------------
# did:key and keys
# ---------------------------------------------------------------------------


def test_did_key_is_base58btc_of_ed01_and_the_public_key() -> None:
    signer = Ed25519Signer(SEED)
    assert signer.did() == SEED_DID == did_key_of(SEED)
    assert signer.did().startswith("did:key:z6Mk")
    assert signer.verifier.public_key == public_key_of(SEED)
    assert signer.verifier.did() == SEED_DID
    assert parse_did_key(SEED_DID) == (ED25519_PUB, public_key_of(SEED))
    assert repr(signer) == f"Ed25519Signer(did={SEED_DID!r})"


@BOUNDED
@given(seed=st.binary(min_size=32, max_size=32))
def test_every_seed_gives_a_z6mk_did_key(seed: bytes) -> None:
    signer = Ed25519Signer(seed)
    assert signer.did() == did_key_of(seed)
    assert signer.did().startswith("did:key:z6Mk")
    assert Ed25519Verifier.from_did(signer.did()) == signer.verifier


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_a_seed_is_32_bytes(size: int) -> None:
    with pytest.raises(InvalidFormat, match="32 bytes"):
        Ed25519Signer(bytes(size))


def test_signatures_are_deterministic_ed25519() -> None:
    signer = Ed25519Signer(SEED)
    signature = signer.sign(b"payload")
    assert len(signature) == 64
    assert signature == Ed25519PrivateKey.from_private_bytes(SEED).sign(b"payload")
    assert signer.verifier.verify(signature, b"payload")
    assert not signer.verifier.verify(signature, b"payloae")
    assert not Ed25519Signer(bytes(32)).verifier.verify(signature, b"payload")
    assert signer.signature_code == EDDSA_SIGNATURE_CODE == 0xD0ED
    assert signer.signature_algorithm == "EdDSA"


@pytest.mark.parametrize("signature", [b"", b"\x00" * 63, b"\x00" * 64, b"\xff" * 65])
def test_verify_returns_false_on_malformed_signatures(signature: bytes) -> None:
    assert Ed25519Signer(SEED).verifier.verify(signature, b"payload") is False


def test_verify_returns_false_for_a_malformed_public_key() -> None:
    signature = Ed25519Signer(SEED).sign(b"payload")
    assert Ed25519Verifier(b"\x01" * 31).verify(signature, b"payload") is False


def test_generate_gives_fresh_keys() -> None:
    first, second = Ed25519Signer.generate(), Ed25519Signer.generate()
    assert first.did() != second.did()
    assert first.verifier.verify(first.sign(b"x"), b"x")
    assert Ed25519Signer.parse(first.format()).did() == first.did()


# ---------------------------------------------------------------------------
# Mnemonics and ucanto's key text (UCAN-15, 16)
# ---------------------------------------------------------------------------


def test_from_mnemonic_seeds_with_sha256_of_the_stripped_text() -> None:
    signer = Ed25519Signer.from_mnemonic(MNEMONIC)
    seed = hashlib.sha256(MNEMONIC.encode()).digest()
    assert signer.did() == did_key_of(seed) == MNEMONIC_DID
    assert signer.format() == MNEMONIC_TEXT
    assert signer.sign(b"x") == Ed25519PrivateKey.from_private_bytes(seed).sign(b"x")


@pytest.mark.parametrize("padded", [f"  {MNEMONIC}\n", f"\t{MNEMONIC} ", f"{MNEMONIC}\r\n"])
def test_from_mnemonic_ignores_surrounding_whitespace(padded: str) -> None:
    assert Ed25519Signer.from_mnemonic(padded).did() == MNEMONIC_DID


def test_from_mnemonic_hashes_utf8() -> None:
    words = "économie café naïve"
    seed = hashlib.sha256(words.encode("utf-8")).digest()
    assert Ed25519Signer.from_mnemonic(words).did() == did_key_of(seed)
    assert Ed25519Signer.from_mnemonic("abandon  ability able").did() != MNEMONIC_DID


def test_format_is_m_and_base64pad_of_tagged_seed_and_public_key() -> None:
    signer = Ed25519Signer(SEED)
    expected = (
        "M" + base64.b64encode(b"\x80\x26" + SEED + b"\xed\x01" + public_key_of(SEED)).decode()
    )
    assert signer.format() == expected == SEED_TEXT


@pytest.mark.parametrize(("text", "did"), [(SEED_TEXT, SEED_DID), (MNEMONIC_TEXT, MNEMONIC_DID)])
def test_parse_reads_ucanto_key_text(text: str, did: str) -> None:
    signer = Ed25519Signer.parse(text)
    assert signer.did() == did
    assert signer.format() == text


@BOUNDED
@given(seed=st.binary(min_size=32, max_size=32))
def test_parse_format_round_trip(seed: bytes) -> None:
    signer = Ed25519Signer(seed)
    text = signer.format()
    assert text.startswith("MgC")
    again = Ed25519Signer.parse(text)
    assert again.did() == signer.did()
    assert again.format() == text
    assert again.sign(b"m") == signer.sign(b"m")


def _tagged(seed: bytes, public: bytes, priv: bytes = b"\x80\x26", pub: bytes = b"\xed\x01") -> str:
    return "M" + base64.b64encode(priv + seed + pub + public).decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "starts with 'M'"),
        (SEED_TEXT[1:], "starts with 'M'"),
        ("m" + SEED_TEXT[1:], "starts with 'M'"),
        ("M***", "invalid base64"),
        (SEED_TEXT.rstrip("="), "invalid base64"),
        (SEED_TEXT[:20] + " " + SEED_TEXT[20:], "invalid base64"),
        ("Mé" + SEED_TEXT[2:], "invalid base64"),
        ("M", "not an Ed25519 private key"),
        ("M" + base64.b64encode(bytes(68)).decode(), "not an Ed25519 private key"),
        (_tagged(SEED, public_key_of(SEED)[:31]), "not an Ed25519 private key"),
        (_tagged(SEED, public_key_of(SEED), priv=b"\x81\x26"), "not an Ed25519 private key"),
        (_tagged(SEED, public_key_of(SEED), pub=b"\xe7\x01"), "not an Ed25519 private key"),
        (_tagged(SEED, public_key_of(bytes(32))), "mismatched public key"),
    ],
)
def test_parse_rejects_malformed_key_text(text: str, message: str) -> None:
    with pytest.raises(InvalidFormat, match=message):
        Ed25519Signer.parse(text)


# ---------------------------------------------------------------------------
# Signing as another DID (UCAN-15)
# ---------------------------------------------------------------------------


def test_with_did_signs_as_another_did_with_the_same_key() -> None:
    signer = Ed25519Signer(SEED)
    ixo = signer.with_did("did:ixo:ixo1abc")
    assert ixo.did() == "did:ixo:ixo1abc"
    assert ixo.verifier == signer.verifier
    assert ixo.verifier.did() == SEED_DID
    assert ixo.sign(b"payload") == signer.sign(b"payload")
    assert ixo.format() == signer.format()
    assert signer.did() == SEED_DID  # the original is unchanged
    assert ixo.with_did("did:web:example.com").did() == "did:web:example.com"


# ---------------------------------------------------------------------------
# Verifiers from DIDs (UCAN-14)
# ---------------------------------------------------------------------------


def test_from_did_reads_an_ed25519_did_key() -> None:
    assert Ed25519Verifier.from_did(SEED_DID) == Ed25519Verifier(public_key_of(SEED))


@pytest.mark.parametrize(("did", "code"), [(SECP256K1_DID, 0xE7), (P256_DID, 0x1200)])
def test_other_key_types_decode_but_cannot_verify(did: str, code: int) -> None:
    parsed_code, key = parse_did_key(did)
    assert parsed_code == code
    assert len(key) == 33
    assert key[0] in (2, 3)  # compressed point
    with pytest.raises(SignatureError, match="unsupported key type") as caught:
        Ed25519Verifier.from_did(did)
    assert caught.value.code == "INVALID_SIGNATURE"


def test_a_secp256k1_did_key_built_from_bytes_is_unsupported() -> None:
    did = "did:key:z" + base58btc(b"\xe7\x01\x02" + bytes(range(32)))
    assert did.startswith("did:key:zQ3s")
    with pytest.raises(SignatureError, match="unsupported key type"):
        Ed25519Verifier.from_did(did)


def test_an_ed25519_did_key_of_the_wrong_length_is_unsupported() -> None:
    did = "did:key:z" + base58btc(b"\xed\x01" + bytes(31))
    with pytest.raises(SignatureError, match="unsupported key type"):
        Ed25519Verifier.from_did(did)


@pytest.mark.parametrize(
    "did",
    [
        "",
        "did:ixo:ixo1abc",
        "did:key:",
        "did:key:6Mkeh",  # no multibase prefix
        "did:key:z",
        "did:key:z0OIl",  # not base58
        "did:key:zé",
        "key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd",
    ],
)
def test_from_did_rejects_what_is_not_a_did_key(did: str) -> None:
    with pytest.raises(InvalidFormat):
        Ed25519Verifier.from_did(did)


# ---------------------------------------------------------------------------
# Principal bytes (UCAN-7)
# ---------------------------------------------------------------------------


def test_did_key_principal_bytes_are_ed01_and_the_key() -> None:
    raw = encode_principal(SEED_DID)
    assert raw == b"\xed\x01" + public_key_of(SEED)
    assert len(raw) == 34
    assert decode_principal(raw) == SEED_DID


@pytest.mark.parametrize(
    "did", ["did:ixo:ixo1abc", "did:web:example.com:user:alice", "did:ixo:entity:é", "did:x:y"]
)
def test_other_dids_are_9d1a_and_utf8_without_did_prefix(did: str) -> None:
    raw = encode_principal(did)
    assert raw == b"\x9d\x1a" + did[4:].encode()
    assert decode_principal(raw) == did


def test_principal_bytes_of_other_key_types_round_trip() -> None:
    assert decode_principal(encode_principal(SECP256K1_DID)) == SECP256K1_DID
    assert encode_principal(SECP256K1_DID)[:2] == b"\xe7\x01"


@pytest.mark.parametrize("did", ["", "did:", "did", "ixo:ixo1abc", "DID:ixo:x"])
def test_encode_principal_rejects_non_dids(did: str) -> None:
    with pytest.raises(InvalidFormat):
        encode_principal(did)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty principal"),
        (b"\x9d\x1a", "invalid principal DID"),
        (b"\x9d\x1aixo", "invalid principal DID"),
        (b"\x9d\x1a\xff:x", "not UTF-8"),
        (b"\x80", "truncated varint"),
        (b"\x80\x00", "not minimally encoded"),
    ],
)
def test_decode_principal_rejects_malformed_bytes(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidFormat, match=message):
        decode_principal(raw)


@BOUNDED
@given(
    seed=st.binary(min_size=32, max_size=32), method=st.from_regex(r"[a-z]{1,8}", fullmatch=True)
)
def test_principal_round_trip_property(seed: bytes, method: str) -> None:
    did = did_key_of(seed)
    assert decode_principal(encode_principal(did)) == did
    other = f"did:{method}:{seed.hex()}"
    assert decode_principal(encode_principal(other)) == other


@BOUNDED
@given(raw=st.binary(max_size=40))
def test_decoding_arbitrary_principal_bytes_raises_only_typed_errors(raw: bytes) -> None:
    try:
        did = decode_principal(raw)
    except InvalidFormat:  # any other error escapes and fails
        return
    assert did.startswith("did:")
