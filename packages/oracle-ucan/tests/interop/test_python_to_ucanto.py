"""Python-minted delegations and invocations pass ``@ucanto/validator`` (UCAN-36 (4)).

ucanto judges them with the options ``@ixo/ucan`` passes: the service's verifier as
``authority``, ``principal: Verifier``, a ``resolveDIDKey`` stub mapping each ``did:ixo``
to its ``did:key``, a ``canIssue`` accepting the root issuer and an accepting
``validateAuthorization``. Issuers are ``did:key``s and ``did:ixo``s (``with_did``). Every
token also survives ucanto's ``Delegation.extract`` -> ``archive`` byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from oracle_ucan import (
    CapabilityDef,
    ChainVerifier,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    LocalResolver,
    delegate,
    invoke,
    mint_invocation,
    validate_invocation,
)

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

USER = Ed25519Signer(bytes([0x41]) * 32)
ORACLE_KEY = Ed25519Signer(bytes([0x42]) * 32)
ROOT_KEY = Ed25519Signer(bytes([0x43]) * 32)
ALICE = Ed25519Signer(bytes([0x44]) * 32)
SERVICE = Ed25519Signer(bytes([0x45]) * 32)
FORGER = Ed25519Signer(bytes([0x46]) * 32)
ORACLE = "did:ixo:ixo1interoporacle0000000000000000000000"
ROOT = "did:ixo:ixo1interoproot00000000000000000000000"
DID_KEYS = {ORACLE: [ORACLE_KEY.did()], ROOT: [ROOT_KEY.did()]}
TOOLS = "ixo:oracle:did:ixo:entity:interop0000000000000000000000000:mcp/"
SEARCH_WEB = f"{TOOLS}search/web"


def _tokens(now: int) -> dict[str, Delegation]:
    """Every token of this module, minted by oracle_ucan."""
    user_to_oracle = delegate(
        USER,
        audience=ORACLE,
        capabilities=[
            {"with": "ixo:memory", "can": "memory/*"},
            {"with": "ixo:sandbox", "can": "sandbox/run", "nb": {"room": "!é✓🙂:localhost"}},
        ],
        expiration=now + 3600,
        not_before=now - 60,
        nonce="py-nonce-1",
        facts=[{"purpose": "interop ✓", "n": 1}],
    )
    ixo_root_to_alice = delegate(
        ROOT_KEY.with_did(ROOT),
        audience=ALICE.did(),
        capabilities=[{"with": f"{TOOLS}*", "can": "mcp/*", "nb": {"limit": 10}}],
        expiration=now + 3600,
    )
    key_root_to_alice = delegate(
        ROOT_KEY,
        audience=ALICE.did(),
        capabilities=[{"with": f"{TOOLS}*", "can": "mcp/*", "nb": {"limit": 10}}],
        expiration=None,
    )

    def alice_calls(proof: Delegation, limit: int, signer: Ed25519Signer = ALICE) -> Delegation:
        return invoke(
            signer,
            audience=SERVICE.did(),
            capability={"with": SEARCH_WEB, "can": "mcp/call", "nb": {"limit": limit}},
            expiration=now + 600,
            proofs=[proof],
        )

    return {
        "user_to_oracle": user_to_oracle,
        "oracle_invokes": mint_invocation(
            ORACLE_KEY,
            user_to_oracle,
            oracle_did=ORACLE,
            audience=SERVICE.did(),
            with_="ixo:memory",
            can="memory/read",
            now=now,
        ),
        "ixo_root_to_alice": ixo_root_to_alice,
        "alice_calls_via_ixo_root": alice_calls(ixo_root_to_alice, 4),
        "alice_calls_over_limit": alice_calls(ixo_root_to_alice, 11),
        "key_root_to_alice": key_root_to_alice,
        "alice_calls_via_key_root": alice_calls(key_root_to_alice, 10),
        "forged_alice_call": alice_calls(key_root_to_alice, 4, FORGER.with_did(ALICE.did())),
    }


CHECKS: dict[str, dict[str, Any]] = {
    # check name: bridge "claim" request fields, plus "expect" (valid, chain or reason)
    "user_to_oracle": {
        "token": "user_to_oracle",
        "mode": "claim",
        "can": "sandbox/run",
        "caveat": "default",
        "authority": ORACLE,
        "roots": [USER.did()],
        "expect": (True, [USER.did()]),
    },
    "oracle_invokes": {
        "token": "oracle_invokes",
        "mode": "access",
        "can": "memory/read",
        "caveat": "default",
        "roots": [USER.did()],
        "expect": (True, [ORACLE, USER.did()]),
    },
    "oracle_invokes_unresolved": {
        "token": "oracle_invokes",
        "mode": "access",
        "can": "memory/read",
        "caveat": "default",
        "roots": [USER.did()],
        "did_keys": {},
        "expect": (False, "Unable to resolve"),
    },
    "alice_calls_via_ixo_root": {
        "token": "alice_calls_via_ixo_root",
        "mode": "access",
        "can": "mcp/call",
        "caveat": "limit",
        "roots": [ROOT],
        "expect": (True, [ALICE.did(), ROOT]),
    },
    "alice_calls_over_limit": {
        "token": "alice_calls_over_limit",
        "mode": "access",
        "can": "mcp/call",
        "caveat": "limit",
        "roots": [ROOT],
        "expect": (False, "limit 11 exceeds the delegated 10"),
    },
    "alice_calls_via_key_root": {
        "token": "alice_calls_via_key_root",
        "mode": "access",
        "can": "mcp/call",
        "caveat": "limit",
        "roots": [ROOT_KEY.did()],
        "expect": (True, [ALICE.did(), ROOT_KEY.did()]),
    },
    "alice_calls_unknown_root": {
        "token": "alice_calls_via_key_root",
        "mode": "access",
        "can": "mcp/call",
        "caveat": "limit",
        "roots": [ROOT],
        "expect": (False, "can not be (self) issued"),
    },
    "forged_alice_call": {
        "token": "forged_alice_call",
        "mode": "access",
        "can": "mcp/call",
        "caveat": "limit",
        "roots": [ROOT_KEY.did()],
        "expect": (False, "valid signature from"),
    },
}


TOKEN_NAMES = (
    "user_to_oracle",
    "oracle_invokes",
    "ixo_root_to_alice",
    "alice_calls_via_ixo_root",
    "alice_calls_over_limit",
    "key_root_to_alice",
    "alice_calls_via_key_root",
    "forged_alice_call",
)


@pytest.fixture(scope="module")
def tokens(now: int) -> dict[str, Delegation]:
    minted = _tokens(now)
    assert tuple(minted) == TOKEN_NAMES
    return minted


def _first_occurrences(blocks: list[list[str]]) -> list[list[str]]:
    """Blocks in archive order: ucanto's ``export()`` repeats a block reached twice; its
    archive, like a CAR writer, keeps the first."""
    first: dict[str, list[str]] = {}
    for block in blocks:
        first.setdefault(block[0], block)
    return list(first.values())


def _archive_order(delegation: Delegation) -> list[list[str]]:
    return _first_occurrences([[str(cid), data.hex()] for cid, data in delegation.iterate_blocks()])


@pytest.fixture(scope="module")
def judged(ucanto: Ucanto, tokens: dict[str, Delegation]) -> dict[str, Any]:
    """ucanto's round trip of every token and its verdict on every check, in one Node run."""
    requests: list[dict[str, Any]] = [
        {"id": f"roundtrip:{name}", "op": "roundtrip", "token": token.to_base64()}
        for name, token in tokens.items()
    ]
    for name, check in CHECKS.items():
        authority = check.get("authority", SERVICE.did())
        key = ORACLE_KEY.did() if authority == ORACLE else authority
        requests.append(
            {
                "id": f"check:{name}",
                "op": "claim",
                "mode": check["mode"],
                "token": tokens[check["token"]].to_base64(),
                "can": check["can"],
                "caveat": check["caveat"],
                "authority": {"key": key, "did": authority},
                "root_issuers": check["roots"],
                "did_keys": check.get("did_keys", DID_KEYS),
            }
        )
    return ucanto(requests)


@pytest.mark.parametrize("name", CHECKS)
def test_ucanto_validator_verdict(name: str, judged: dict[str, Any]) -> None:
    verdict = judged[f"check:{name}"]
    valid, detail = CHECKS[name]["expect"]
    assert verdict["valid"] is valid, verdict
    if valid:
        assert verdict["chain"] == detail
    else:
        assert detail in verdict["message"]


def test_ucanto_reads_the_caveats_python_wrote(judged: dict[str, Any]) -> None:
    verdict = judged["check:alice_calls_via_ixo_root"]
    assert verdict["can"] == "mcp/call"
    assert verdict["with"] == SEARCH_WEB
    assert verdict["nb"] == {"limit": 4}


@pytest.mark.parametrize("name", TOKEN_NAMES)
def test_ucanto_archive_round_trip_is_byte_identical(
    name: str, tokens: dict[str, Delegation], judged: dict[str, Any]
) -> None:
    token = tokens[name]
    back = judged[f"roundtrip:{name}"]
    assert back["token"] == token.to_base64()
    assert back["cid"] == str(token.cid)
    assert back["block"] == token.ucan.block.hex()
    assert _archive_order(token) == _first_occurrences(back["blocks"])


@pytest.mark.parametrize("name", TOKEN_NAMES)
def test_ucanto_reads_what_python_wrote(
    name: str, tokens: dict[str, Delegation], judged: dict[str, Any]
) -> None:
    ucan = tokens[name].ucan
    back = judged[f"roundtrip:{name}"]
    assert back["version"] == ucan.version
    assert back["issuer"] == ucan.issuer
    assert back["audience"] == ucan.audience
    assert back["capabilities"] == [dict(c) for c in ucan.capabilities]
    assert back["expiration"] == ucan.expiration
    assert back["not_before"] == ucan.not_before
    assert back["nonce"] == ucan.nonce
    assert back["facts"] == [dict(f) for f in ucan.facts]
    assert back["proofs"] == [str(p) for p in ucan.proofs]


def _limit_within_grant(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
    granted_limit = (granted.get("nb") or {}).get("limit")
    claimed_limit = (claimed.get("nb") or {}).get("limit")
    if granted_limit is not None and (claimed_limit is None or claimed_limit > granted_limit):
        return f"limit {claimed_limit} exceeds the delegated {granted_limit}"
    return None


@pytest.mark.parametrize(
    ("name", "roots"),
    [
        ("alice_calls_via_ixo_root", [ROOT]),
        ("alice_calls_over_limit", [ROOT]),
        ("alice_calls_via_key_root", [ROOT_KEY.did()]),
        ("forged_alice_call", [ROOT_KEY.did()]),
    ],
)
async def test_python_agrees_with_ucanto(
    name: str,
    roots: list[str],
    now: int,
    tokens: dict[str, Delegation],
    judged: dict[str, Any],
) -> None:
    local = LocalResolver()
    local.register(ROOT, ROOT_KEY.did().removeprefix("did:key:"))
    result = await validate_invocation(
        tokens[name].to_base64(),
        CapabilityDef("mcp/call", protocol="ixo:", derives=_limit_within_grant),
        SEARCH_WEB,
        audience=SERVICE.did(),
        root_issuers=roots,
        store=InMemoryInvocationStore(),
        now=now,
        verifier=ChainVerifier(local),
    )
    assert result.ok is judged[f"check:{name}"]["valid"], result.error
