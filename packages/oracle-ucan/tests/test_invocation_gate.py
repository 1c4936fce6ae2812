"""``InvocationGate``: the check service doubles run, as the real services do."""

from __future__ import annotations

import time

from oracle_ucan import CapabilityDef, Ed25519Signer, delegate, invoke
from oracle_ucan.testing import InvocationGate, did_web_document

SERVICE = "did:web:files.test"
FILES = CapabilityDef(can="fs/read", protocol="ixo:")


def _invocation(user: Ed25519Signer, oracle: Ed25519Signer, can: str = "fs/read") -> str:
    grant = delegate(
        user,
        audience=oracle.did(),
        capabilities=[{"with": "ixo:vfs", "can": "fs/*"}],
        expiration=int(time.time()) + 600,
    )
    return invoke(
        oracle,
        audience=SERVICE,
        capability={"with": "ixo:vfs", "can": can},
        expiration=int(time.time()) + 60,
        proofs=[grant],
    ).to_base64()


def _headers(token: str, auth_type: str | None = "ucan") -> dict[str, str]:
    headers = {"authorization": f"Bearer {token}"}
    if auth_type is not None:
        headers["x-auth-type"] = auth_type
    return headers


async def test_a_delegated_invocation_passes_with_its_chain() -> None:
    user, oracle = Ed25519Signer.generate(), Ed25519Signer.generate()
    gate = InvocationGate(SERVICE, "ixo:vfs", FILES, [user.did()])

    result = await gate.check(_headers(_invocation(user, oracle)))

    assert result.ok
    assert result.proof_chain[0] == user.did()
    assert result.invoker == oracle.did()
    assert gate.rejected == []


async def test_refusals_are_recorded_by_reason() -> None:
    user, oracle, stranger = (Ed25519Signer.generate() for _ in range(3))
    gate = InvocationGate(SERVICE, "ixo:vfs", FILES, [user.did()])
    token = _invocation(user, oracle)

    assert not (await gate.check({})).ok
    assert not (await gate.check(_headers(token, auth_type=None))).ok
    assert not (await gate.check(_headers(_invocation(stranger, oracle)))).ok
    assert not (await gate.check(_headers(_invocation(user, oracle, can="fs/write")))).ok

    assert gate.rejected[:2] == ["missing invocation", "missing invocation"]
    assert len(gate.rejected) == 4
    assert all(code == "UNAUTHORIZED" for code in gate.rejected[2:])


async def test_single_use_refuses_a_replay_and_reuse_admits_it() -> None:
    user, oracle = Ed25519Signer.generate(), Ed25519Signer.generate()
    token = _invocation(user, oracle)
    once = InvocationGate(SERVICE, "ixo:vfs", FILES, [user.did()], single_use=True)
    reusable = InvocationGate(SERVICE, "ixo:vfs", FILES, [user.did()])

    assert (await once.check_token(token)).ok
    assert not (await once.check_token(token)).ok
    assert once.rejected == ["REPLAY"]
    assert (await reusable.check_token(token)).ok
    assert (await reusable.check_token(token)).ok


async def test_bearer_alone_passes_when_no_auth_type_is_required() -> None:
    user, oracle = Ed25519Signer.generate(), Ed25519Signer.generate()
    gate = InvocationGate(SERVICE, "ixo:vfs", FILES, [user.did()], auth_type=None)

    assert (await gate.check(_headers(_invocation(user, oracle), auth_type=None))).ok
    assert did_web_document(SERVICE)["id"] == SERVICE
