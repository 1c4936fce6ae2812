"""ucanto delegations pass ``validate_delegation`` (UCAN-25, UCAN-36 (1)).

A user (``did:key``) delegates to the oracle (``did:ixo``) with ucanto, setting ``nb``,
``fct``, ``nbf``, ``nnc`` and ``exp``. Python accepts it, and refuses a flipped signature
byte (``INVALID_SIGNATURE``), another audience (``UNAUTHORIZED``) and a past ``exp``
(``EXPIRED``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from oracle_ucan import (
    CLOCK_SKEW_SECONDS,
    Delegation,
    Ed25519Signer,
    cid_for,
    dag_cbor,
    encode_car,
    validate_delegation,
)

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

USER_SEED = bytes([0x11]) * 32
DEPUTY_SEED = bytes([0x12]) * 32
USER = Ed25519Signer(USER_SEED)
DEPUTY = Ed25519Signer(DEPUTY_SEED)
ORACLE = "did:ixo:ixo1interoporacle0000000000000000000000"
CAPABILITIES: list[dict[str, Any]] = [
    {"with": "ixo:sandbox", "can": "*", "nb": {"room": "!abc:localhost", "maxRuns": 3}},
    {"with": "ixo:memory", "can": "memory/*"},
]
FACTS = [{"purpose": "interop", "origin": "ucanto"}]
NONCE = "c0ffee00d15ea5e"


def _delegation(
    name: str,
    now: int,
    *,
    issuer: bytes = USER_SEED,
    audience: str = ORACLE,
    lifetime: int = 3600,
    not_before: int | None = -60,
    capabilities: list[dict[str, Any]] = CAPABILITIES,
    proofs: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A bridge request for a delegation; ``lifetime`` and ``not_before`` count from ``now``."""
    return {
        "id": name,
        "op": "delegate",
        "issuer": {"seed": issuer.hex()},
        "audience": audience,
        "capabilities": capabilities,
        "expiration": now + lifetime,
        "not_before": None if not_before is None else now + not_before,
        "nonce": NONCE,
        "facts": FACTS,
        "proofs": [f"@{proof}" for proof in proofs],
    }


@pytest.fixture(scope="module")
def made(ucanto: Ucanto, now: int) -> dict[str, Any]:
    """The module's ucanto delegations, minted in one Node run."""
    return ucanto(
        [
            _delegation("valid", now),
            _delegation("expired", now, lifetime=-5, not_before=None),
            _delegation("not_yet_valid", now, lifetime=7200, not_before=3600),
            _delegation(
                "unicode_caveat_keys",
                now,
                capabilities=[
                    {"with": "ixo:memory", "can": "memory/*", "nb": {"room": "a", "é": 1}}
                ],
            ),
            # user -> deputy -> oracle: a two-link chain ending at the oracle
            _delegation("to_deputy", now, audience=DEPUTY.did()),
            _delegation(
                "via_deputy", now, issuer=DEPUTY_SEED, lifetime=1800, proofs=("to_deputy",)
            ),
        ]
    )


def _token(made: dict[str, Any], name: str) -> str:
    token = made[name]["token"]
    assert isinstance(token, str)
    return token


def _with_flipped_signature(token: str, index: int) -> str:
    """The archive re-built around a UCAN block whose signature has one byte flipped."""
    ucan = Delegation.from_base64(token).ucan
    model = dag_cbor.decode(ucan.block)
    signature = bytearray(model["s"])
    signature[index] ^= 0x01
    model["s"] = bytes(signature)
    block = dag_cbor.encode(model)
    cid = cid_for(block)
    variant = dag_cbor.encode({"ucan@0.9.1": cid})
    root = cid_for(variant)
    return base64.b64encode(encode_car([root], [(cid, block), (root, variant)])).decode()


async def test_ucanto_delegation_validates(made: dict[str, Any], now: int) -> None:
    result = await validate_delegation(_token(made, "valid"), audience=ORACLE, now=now)
    assert result.ok, result.error
    assert result.error is None
    assert result.invoker == USER.did()
    assert result.capability == CAPABILITIES[0]
    assert result.expiration == now + 3600
    assert result.proof_chain == (USER.did(),)
    assert result.facts == tuple(FACTS)
    assert result.delegation is not None
    assert result.delegation.ucan.nonce == NONCE
    assert result.delegation.ucan.not_before == now - 60
    assert [dict(c) for c in result.delegation.capabilities] == CAPABILITIES


async def test_ucanto_chain_validates(made: dict[str, Any], now: int) -> None:
    result = await validate_delegation(_token(made, "via_deputy"), audience=ORACLE, now=now)
    assert result.ok, result.error
    assert result.invoker == DEPUTY.did()
    assert result.proof_chain == (USER.did(), DEPUTY.did())
    assert result.expiration == now + 1800


SIGNATURE_BYTES = [4, 35, 67]  # the first, a middle and the last byte after the varsig header


@pytest.fixture(scope="module")
def ucanto_on_tampered(ucanto: Ucanto, made: dict[str, Any]) -> dict[str, Any]:
    """ucanto's verdict on the untouched delegation and on each flipped signature."""
    tokens = {"untouched": _token(made, "valid")}
    tokens.update(
        {f"flipped:{i}": _with_flipped_signature(tokens["untouched"], i) for i in SIGNATURE_BYTES}
    )
    return ucanto(
        [
            {
                "id": name,
                "op": "claim",
                "mode": "claim",
                "token": token,
                "can": "memory/*",
                "caveat": "default",
                "authority": {"key": DEPUTY.did()},
                "root_issuers": [USER.did()],
            }
            for name, token in tokens.items()
        ]
    )


@pytest.mark.parametrize("index", SIGNATURE_BYTES)
async def test_flipped_signature_byte_is_invalid_signature(
    made: dict[str, Any], now: int, index: int
) -> None:
    tampered = _with_flipped_signature(_token(made, "valid"), index)
    decoded = Delegation.from_base64(tampered)  # still a well-formed archive
    assert decoded.ucan.signature != Delegation.from_base64(_token(made, "valid")).ucan.signature
    result = await validate_delegation(tampered, audience=ORACLE, now=now)
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "INVALID_SIGNATURE"


@pytest.mark.parametrize("index", SIGNATURE_BYTES)
def test_ucanto_also_refuses_the_flipped_signature(
    ucanto_on_tampered: dict[str, Any], index: int
) -> None:
    assert ucanto_on_tampered["untouched"]["valid"], ucanto_on_tampered["untouched"]
    verdict = ucanto_on_tampered[f"flipped:{index}"]
    assert not verdict["valid"]
    # ucanto refuses with InvalidSignature, or throws when the flipped R is off the curve.
    assert "valid signature from" in verdict["message"] or verdict["name"] == "Thrown", verdict


async def test_flipped_signature_byte_in_car_is_refused(made: dict[str, Any], now: int) -> None:
    raw = bytearray(base64.b64decode(_token(made, "valid")))
    signature = Delegation.extract(bytes(raw)).ucan.signature
    offset = bytes(raw).index(signature)
    raw[offset + 10] ^= 0x80
    result = await validate_delegation(bytes(raw), audience=ORACLE, now=now)
    assert not result.ok
    assert result.error is not None
    # The block no longer hashes to its CID, which is caught before the signature.
    assert result.error.code in {"INVALID_FORMAT", "INVALID_SIGNATURE"}


@pytest.mark.parametrize(
    "audience",
    [
        "did:ixo:ixo1someotheroracle000000000000000000000",
        ORACLE.upper(),
        Ed25519Signer(bytes([0x13]) * 32).did(),
    ],
)
async def test_wrong_audience_is_unauthorized(
    made: dict[str, Any], now: int, audience: str
) -> None:
    result = await validate_delegation(_token(made, "valid"), audience=audience, now=now)
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "UNAUTHORIZED"


async def test_past_expiry_is_expired(made: dict[str, Any], now: int) -> None:
    result = await validate_delegation(_token(made, "expired"), audience=ORACLE, now=now)
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "EXPIRED"


@pytest.mark.parametrize(("offset", "ok"), [(-1, True), (0, False), (1, False)])
async def test_expiry_boundary_matches_ucanto(
    made: dict[str, Any], now: int, offset: int, ok: bool
) -> None:
    """ucanto's ``isExpired`` is ``exp <= now``: a token is dead at its ``exp`` second."""
    result = await validate_delegation(
        _token(made, "valid"), audience=ORACLE, now=now + 3600 + offset
    )
    assert result.ok is ok
    if not ok:
        assert result.error is not None
        assert result.error.code == "EXPIRED"


@pytest.mark.parametrize(
    ("early_by", "ok"), [(CLOCK_SKEW_SECONDS, True), (CLOCK_SKEW_SECONDS + 1, False)]
)
async def test_not_before_allows_the_clock_skew(
    made: dict[str, Any], now: int, early_by: int, ok: bool
) -> None:
    not_before = now + 3600
    result = await validate_delegation(
        _token(made, "not_yet_valid"), audience=ORACLE, now=not_before - early_by
    )
    assert result.ok is ok
    if not ok:
        assert result.error is not None
        assert result.error.code == "UNAUTHORIZED"


async def test_non_ascii_caveat_keys_validate(made: dict[str, Any], now: int) -> None:
    """ucanto signs caveats whose keys mix ASCII and non-ASCII; validators never raise."""
    result = await validate_delegation(
        _token(made, "unicode_caveat_keys"), audience=ORACLE, now=now
    )
    assert result.ok, result.error


def test_ucanto_principal_bytes(made: dict[str, Any]) -> None:
    model = dag_cbor.decode(bytes.fromhex(made["valid"]["block"]))
    assert model["aud"] == bytes.fromhex("9d1a") + ORACLE.removeprefix("did:").encode()
    assert model["iss"] == bytes.fromhex("ed01") + USER.verifier.public_key
    assert model["s"][:4] == bytes.fromhex("eda10340")


def test_ucanto_fixtures_reencode_byte_identically(made: dict[str, Any]) -> None:
    for name in made:
        token = _token(made, name)
        assert Delegation.from_base64(token).to_base64() == token, name
