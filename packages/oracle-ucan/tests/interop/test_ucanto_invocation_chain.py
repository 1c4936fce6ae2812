"""ucanto delegation chains pass ``validate_invocation`` as they pass ucanto's ``access``
(UCAN-26, 27, UCAN-36 (3)).

root -> alice -> bob, all minted by ucanto: root grants ``mcp/*`` on a ``/*`` resource
with ``nb.limit`` 10, alice narrows it to ``mcp/call`` on a sub-path with limit 5, bob
invokes. Each token is judged by Python (a ``CapabilityDef`` whose ``derives`` enforces
``claimed.limit <= granted.limit``) and by ``@ucanto/validator``'s ``access`` with the
same rule, and the verdicts must agree.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from oracle_ucan import (
    CapabilityDef,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    cid_for,
    dag_cbor,
    encode_car,
    validate_invocation,
)

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

ROOT_SEED = bytes([0x31]) * 32
ALICE_SEED = bytes([0x32]) * 32
BOB_SEED = bytes([0x33]) * 32
ORACLE_SEED = bytes([0x34]) * 32
ROOT = Ed25519Signer(ROOT_SEED).did()
ALICE = Ed25519Signer(ALICE_SEED).did()
BOB = Ed25519Signer(BOB_SEED).did()
ORACLE = "did:ixo:ixo1interoporacle0000000000000000000000"
ENTITY = "did:ixo:entity:interop0000000000000000000000000"
TOOLS = f"ixo:oracle:{ENTITY}:mcp/"
SEARCH_WEB = f"{TOOLS}search/web"


def limit_within_grant(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
    """``claimed.nb.limit`` must be present and at most ``granted.nb.limit`` when granted."""
    granted_limit = (granted.get("nb") or {}).get("limit")
    if granted_limit is None:
        return None
    claimed_limit = (claimed.get("nb") or {}).get("limit")
    if claimed_limit is None or claimed_limit > granted_limit:
        return f"limit {claimed_limit} exceeds the delegated {granted_limit}"
    return None


MCP_CALL = CapabilityDef("mcp/call", protocol="ixo:", derives=limit_within_grant)


def _issue(
    name: str,
    now: int,
    seed: bytes,
    audience: str,
    capability: dict[str, Any],
    *,
    lifetime: int,
    proofs: tuple[str, ...] = (),
    invocation: bool = False,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "id": name,
        "op": "invoke" if invocation else "delegate",
        "issuer": {"seed": seed.hex()},
        "audience": audience,
        "expiration": now + lifetime,
        "proofs": [f"@{proof}" for proof in proofs],
    }
    if invocation:
        request["capability"] = capability
    else:
        request["capabilities"] = [capability]
    return request


def _bob_calls(name: str, now: int, resource: str, limit: int) -> dict[str, Any]:
    return _issue(
        name,
        now,
        BOB_SEED,
        ORACLE,
        {"with": resource, "can": "mcp/call", "nb": {"limit": limit}},
        lifetime=600,
        proofs=("alice_to_bob",),
        invocation=True,
    )


INVOCATIONS = {
    # name: (resource, Python's error code or None for ok, what ucanto's refusal says)
    "within_limit": (SEARCH_WEB, None, ""),
    "at_limit": (SEARCH_WEB, None, ""),
    "over_limit": (SEARCH_WEB, "CAVEAT_VIOLATION", "limit 7 exceeds the delegated 5"),
    "outside_resource": (f"{TOOLS}files/read", "UNAUTHORIZED", "does not match delegated"),
}
LIMITS = {"within_limit": 3, "at_limit": 5, "over_limit": 7, "outside_resource": 3}


def _ucanto_check(name: str, can: str, caveat: str) -> dict[str, Any]:
    return {
        "id": f"access:{name}",
        "op": "claim",
        "mode": "access",
        "token": f"@{name}",
        "can": can,
        "caveat": caveat,
        "authority": {"key": Ed25519Signer(ORACLE_SEED).did(), "did": ORACLE},
        "root_issuers": [ROOT],
    }


@pytest.fixture(scope="module")
def made(ucanto: Ucanto, now: int) -> dict[str, Any]:
    """The chain, bob's invocations and ucanto's verdict on each, in one Node run."""
    requests = [
        _issue(
            "root_to_alice",
            now,
            ROOT_SEED,
            ALICE,
            {"with": f"{TOOLS}*", "can": "mcp/*", "nb": {"limit": 10}},
            lifetime=3600,
        ),
        _issue(
            "alice_to_bob",
            now,
            ALICE_SEED,
            BOB,
            {"with": f"{TOOLS}search/*", "can": "mcp/call", "nb": {"limit": 5}},
            lifetime=1800,
            proofs=("root_to_alice",),
        ),
        *(
            _bob_calls(name, now, resource, LIMITS[name])
            for name, (resource, _, _) in INVOCATIONS.items()
        ),
        _issue(
            "root_memory_to_alice",
            now,
            ROOT_SEED,
            ALICE,
            {"with": "ixo:memory", "can": "memory/*"},
            lifetime=3600,
        ),
        _issue(
            "alice_claims_star",
            now,
            ALICE_SEED,
            ORACLE,
            {"with": "ixo:memory", "can": "*"},
            lifetime=600,
            proofs=("root_memory_to_alice",),
            invocation=True,
        ),
        _issue(
            "alice_reads_memory",
            now,
            ALICE_SEED,
            ORACLE,
            {"with": "ixo:memory", "can": "memory/read"},
            lifetime=600,
            proofs=("root_memory_to_alice",),
            invocation=True,
        ),
        {
            **_issue(
                "alice_reads_memory_empty_nonce",
                now,
                ALICE_SEED,
                ORACLE,
                {"with": "ixo:memory", "can": "memory/read"},
                lifetime=600,
                proofs=("root_memory_to_alice",),
                invocation=True,
            ),
            "nonce": "",
        },
    ]
    requests += [_ucanto_check(name, "mcp/call", "limit") for name in INVOCATIONS]
    requests += [
        _ucanto_check("alice_claims_star", "*", "default"),
        _ucanto_check("alice_reads_memory", "memory/read", "default"),
    ]
    return ucanto(requests)


async def _validate(
    token: str,
    capability: CapabilityDef,
    resource: str,
    now: int,
    store: InMemoryInvocationStore | None = None,
) -> Any:
    return await validate_invocation(
        token,
        capability,
        resource,
        audience=ORACLE,
        root_issuers=[ROOT],
        store=store if store is not None else InMemoryInvocationStore(),
        now=now,
    )


async def test_chain_validates_like_ucanto(made: dict[str, Any], now: int) -> None:
    result = await _validate(made["within_limit"]["token"], MCP_CALL, SEARCH_WEB, now)
    assert result.ok, result.error
    assert result.invoker == BOB
    assert result.capability == {"with": SEARCH_WEB, "can": "mcp/call", "nb": {"limit": 3}}
    assert result.proof_chain == (ROOT, ALICE, BOB)
    assert result.expiration == now + 600
    ucanto_verdict = made["access:within_limit"]
    assert ucanto_verdict["valid"], ucanto_verdict
    assert ucanto_verdict["chain"] == [BOB, ALICE, ROOT]
    assert ucanto_verdict["nb"] == {"limit": 3}


@pytest.mark.parametrize("name", INVOCATIONS)
async def test_verdicts_agree_with_ucanto(made: dict[str, Any], now: int, name: str) -> None:
    resource, code, reason = INVOCATIONS[name]
    result = await _validate(made[name]["token"], MCP_CALL, resource, now)
    ucanto_verdict = made[f"access:{name}"]
    assert ucanto_verdict["valid"] is (code is None), ucanto_verdict
    assert reason in ucanto_verdict.get("message", "")
    assert result.ok is (code is None), result.error
    if code is not None:
        assert result.error is not None
        assert result.error.code == code


async def test_replay_is_refused(made: dict[str, Any], now: int) -> None:
    store = InMemoryInvocationStore()
    token = made["at_limit"]["token"]
    first = await _validate(token, MCP_CALL, SEARCH_WEB, now, store)
    assert first.ok, first.error
    second = await _validate(token, MCP_CALL, SEARCH_WEB, now, store)
    assert not second.ok
    assert second.error is not None
    assert second.error.code == "REPLAY"
    fresh = await _validate(token, MCP_CALL, SEARCH_WEB, now)  # another store: accepted
    assert fresh.ok, fresh.error


def _reencoded(token: str, change: Callable[[dict[str, Any]], None]) -> str:
    """``token`` with its UCAN block re-encoded after ``change``, signature kept."""
    delegation = Delegation.from_base64(token)
    fields = dag_cbor.decode(delegation.ucan.block)
    change(fields)
    block = dag_cbor.encode(fields)
    variant = dag_cbor.encode({"ucan@0.9.1": cid_for(block)})
    proofs = [(cid, data) for cid, data in delegation.iterate_blocks() if cid != delegation.cid]
    blocks = [*proofs, (cid_for(block), block), (cid_for(variant), variant)]
    return base64.b64encode(encode_car([cid_for(variant)], blocks)).decode()


def _add_empty_nonce(fields: dict[str, Any]) -> None:
    assert "nnc" not in fields
    fields["nnc"] = ""


def _drop_empty_nonce(fields: dict[str, Any]) -> None:
    # ucanto writes the empty nonce it was given into the block, not into the signed payload.
    assert fields.pop("nnc") == ""


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("alice_reads_memory", _add_empty_nonce),
        ("alice_reads_memory_empty_nonce", _drop_empty_nonce),
    ],
)
async def test_a_ucanto_invocation_reencoded_with_another_cid_is_a_replay(
    made: dict[str, Any], now: int, name: str, change: Callable[[dict[str, Any]], None]
) -> None:
    memory_read = CapabilityDef("memory/read", protocol="ixo:")
    token = made[name]["token"]
    variant = _reencoded(token, change)
    assert Delegation.from_base64(variant).cid != Delegation.from_base64(token).cid
    store = InMemoryInvocationStore()

    first = await _validate(token, memory_read, "ixo:memory", now, store)
    again = await _validate(variant, memory_read, "ixo:memory", now, store)
    alone = await _validate(variant, memory_read, "ixo:memory", now)

    assert first.ok, first.error
    assert again.error is not None
    assert again.error.code == "REPLAY"
    assert alone.ok, alone.error  # the same signed invocation: valid, once


async def test_star_claimed_on_a_namespace_grant_is_unauthorized(
    made: dict[str, Any], now: int
) -> None:
    result = await _validate(
        made["alice_claims_star"]["token"], CapabilityDef("*", protocol="ixo:"), "ixo:memory", now
    )
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "UNAUTHORIZED"
    ucanto_verdict = made["access:alice_claims_star"]
    assert not ucanto_verdict["valid"], ucanto_verdict
    assert "Delegated capability not found" in ucanto_verdict["message"]


async def test_namespace_grant_covers_an_ability_in_it(made: dict[str, Any], now: int) -> None:
    result = await _validate(
        made["alice_reads_memory"]["token"],
        CapabilityDef("memory/read", protocol="ixo:"),
        "ixo:memory",
        now,
    )
    assert result.ok, result.error
    assert result.proof_chain == (ROOT, ALICE)
    ucanto_verdict = made["access:alice_reads_memory"]
    assert ucanto_verdict["valid"], ucanto_verdict


def test_ucanto_fixtures_reencode_byte_identically(made: dict[str, Any]) -> None:
    tokens = {name: value["token"] for name, value in made.items() if "token" in value}
    assert len(tokens) == 10
    for name, token in tokens.items():
        assert Delegation.from_base64(token).to_base64() == token, name
