"""did:key resolution, the key formats of DID documents, and the local resolver (UCAN-19)."""

from __future__ import annotations

import base64

import pytest
from multiformats import multibase

from oracle_ucan.did import KeyResolver, LocalResolver, ed25519_did_key
from oracle_ucan.did.key import (
    did_key_from_base58,
    did_key_from_hex,
    did_key_from_jwk,
    did_key_from_multibase,
)
from oracle_ucan.errors import DidResolutionError, InvalidFormat, NotHandled, SignatureError
from oracle_ucan.principal import Ed25519Signer, Ed25519Verifier

BASE58BTC = multibase.Multibase.BASE58BTC


def _z(raw: bytes) -> str:
    return multibase.encode(BASE58BTC, raw)


@pytest.fixture
def signer() -> Ed25519Signer:
    return Ed25519Signer.generate()


# --- key formats -----------------------------------------------------------------------


def test_ed25519_did_key_matches_the_principal_did(signer: Ed25519Signer) -> None:
    assert ed25519_did_key(signer.verifier.public_key) == signer.did()
    assert signer.did().startswith("did:key:z6Mk")


def test_ed25519_did_key_refuses_other_lengths() -> None:
    with pytest.raises(InvalidFormat, match="32 bytes"):
        ed25519_did_key(b"\x01" * 33)


def test_multibase_multicodec_form_is_the_did_key(signer: Ed25519Signer) -> None:
    value = signer.did().removeprefix("did:key:")
    assert did_key_from_multibase(value) == signer.did()


def test_multibase_bare_key_gets_the_ed25519_prefix(signer: Ed25519Signer) -> None:
    bare = _z(signer.verifier.public_key)
    assert bare != signer.did().removeprefix("did:key:")
    assert did_key_from_multibase(bare) == signer.did()


@pytest.mark.parametrize(
    "value",
    [
        "",
        "f" + "00" * 34,  # base16, not base58btc
        "z0OIl",  # not in the bitcoin alphabet
        "z" + "1" * 10,  # decodes, but to 10 zero bytes
        _z(b"\xe7\x01" + b"\x02" * 33),  # secp256k1 multicodec key
        _z(b"\xec\x01" + b"\x03" * 32),  # X25519 multicodec key
        _z(b"\x04" * 31),
    ],
)
def test_multibase_that_is_not_an_ed25519_key_is_none(value: str) -> None:
    assert did_key_from_multibase(value) is None


def test_hex_and_base58_of_a_raw_key(signer: Ed25519Signer) -> None:
    raw = signer.verifier.public_key
    assert did_key_from_hex(raw.hex()) == signer.did()
    assert did_key_from_hex(raw.hex().upper()) == signer.did()
    assert did_key_from_base58(_z(raw)[1:]) == signer.did()


@pytest.mark.parametrize("value", ["", "zz", "00" * 31, "00" * 33, "ed01" + "00" * 32])
def test_hex_that_is_not_32_bytes_is_none(value: str) -> None:
    assert did_key_from_hex(value) is None


@pytest.mark.parametrize("value", ["", "0OIl", _z(b"\x05" * 33)[1:], _z(b"\x05" * 31)[1:]])
def test_base58_that_is_not_32_bytes_is_none(value: str) -> None:
    assert did_key_from_base58(value) is None


def _x(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_okp_ed25519_jwk(signer: Ed25519Signer) -> None:
    raw = signer.verifier.public_key
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": _x(raw)}
    assert did_key_from_jwk(jwk) == signer.did()
    padded = base64.urlsafe_b64encode(raw).decode()
    assert padded.endswith("=")
    assert did_key_from_jwk({**jwk, "x": padded}) == signer.did()


@pytest.mark.parametrize(
    "jwk",
    [
        None,
        "not a dict",
        {"kty": "EC", "crv": "secp256k1", "x": _x(b"\x01" * 32)},
        {"kty": "OKP", "crv": "X25519", "x": _x(b"\x01" * 32)},
        {"kty": "OKP", "crv": "Ed25519"},
        {"kty": "OKP", "crv": "Ed25519", "x": 5},
        {"kty": "OKP", "crv": "Ed25519", "x": _x(b"\x01" * 31)},
        # Standard base64 characters would be dropped silently by a lenient decoder.
        {"kty": "OKP", "crv": "Ed25519", "x": "+/" + _x(b"\x01" * 32)[2:]},
        {"kty": "OKP", "crv": "Ed25519", "x": "a"},
    ],
)
def test_jwk_that_is_not_an_okp_ed25519_key_is_none(jwk: object) -> None:
    assert did_key_from_jwk(jwk) is None


# --- KeyResolver -----------------------------------------------------------------------


async def test_did_key_resolves_to_itself(signer: Ed25519Signer) -> None:
    assert await KeyResolver().resolve(signer.did()) == [signer.did()]


async def test_other_key_types_resolve_and_fail_later_at_verification() -> None:
    secp = "did:key:" + _z(b"\xe7\x01" + b"\x02" * 33)
    assert await KeyResolver().resolve(secp) == [secp]
    with pytest.raises(SignatureError, match="unsupported key type"):
        Ed25519Verifier.from_did(secp)


@pytest.mark.parametrize("did", ["did:ixo:ixo1abc", "did:web:example.com", "key:z6Mk", ""])
async def test_key_resolver_does_not_handle_other_methods(did: str) -> None:
    with pytest.raises(NotHandled):
        await KeyResolver().resolve(did)


@pytest.mark.parametrize(
    "did", ["did:key:", "did:key:f00", "did:key:z0OIl", "did:key:z", "did:key:" + _z(b"\xed\x01")]
)
async def test_malformed_did_key_is_a_resolution_error(did: str) -> None:
    with pytest.raises(DidResolutionError) as caught:
        await KeyResolver().resolve(did)
    assert not isinstance(caught.value, NotHandled)
    assert caught.value.code == "UNAUTHORIZED"


# --- LocalResolver ---------------------------------------------------------------------


async def test_registered_did_resolves_to_its_key(signer: Ed25519Signer) -> None:
    local = LocalResolver()
    local.register("did:ixo:ixo1oracle", signer.did().removeprefix("did:key:"))
    assert await local.resolve("did:ixo:ixo1oracle") == [signer.did()]


async def test_registering_a_bare_key_stores_the_did_key(signer: Ed25519Signer) -> None:
    local = LocalResolver()
    local.register("did:ixo:ixo1oracle", _z(signer.verifier.public_key))
    assert await local.resolve("did:ixo:ixo1oracle") == [signer.did()]


async def test_registering_again_replaces_and_unregister_forgets(signer: Ed25519Signer) -> None:
    other = Ed25519Signer.generate()
    local = LocalResolver()
    local.register("did:ixo:ixo1oracle", signer.did().removeprefix("did:key:"))
    local.register("did:ixo:ixo1oracle", other.did().removeprefix("did:key:"))
    assert await local.resolve("did:ixo:ixo1oracle") == [other.did()]
    local.unregister("did:ixo:ixo1oracle")
    local.unregister("did:ixo:never-registered")
    with pytest.raises(NotHandled):
        await local.resolve("did:ixo:ixo1oracle")


async def test_unregistered_did_is_not_handled(signer: Ed25519Signer) -> None:
    local = LocalResolver()
    local.register("did:ixo:ixo1oracle", signer.did().removeprefix("did:key:"))
    with pytest.raises(NotHandled):
        await local.resolve("did:ixo:ixo1someone-else")


@pytest.mark.parametrize(
    ("did", "key", "message"),
    [
        ("ixo1oracle", None, "not a DID"),
        ("did:ixo", None, "not a DID"),
        ("did:ixo:ixo1oracle", "f" + "00" * 34, "base58btc"),
        ("did:ixo:ixo1oracle", _z(b"\xe7\x01" + b"\x02" * 33), "Ed25519"),
    ],
)
def test_register_refuses_bad_input(
    signer: Ed25519Signer, did: str, key: str | None, message: str
) -> None:
    local = LocalResolver()
    with pytest.raises(InvalidFormat, match=message):
        local.register(did, key if key is not None else signer.did().removeprefix("did:key:"))
