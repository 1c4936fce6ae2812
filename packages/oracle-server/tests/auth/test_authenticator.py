"""The request authenticator refuses every malformed or unverifiable token with 401 JSON.

Tokens are sent over real HTTP to the server on loopback; a token whose validation fails
in an unexpected way is refused like any other and logged with a stable code.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import cbor2
import httpx
import pytest

from oracle_server import Authenticator, HTTPError, OracleApp, create_oracle_app
from oracle_server._auth.authenticator import UNEXPECTED_CODE
from oracle_server.testing import serving
from oracle_ucan import ChainVerifier, Ed25519Signer, dag_cbor, encode_car, invoke
from oracle_ucan.cid import cid_for

ENV = {
    "ORACLE_BACKEND": "local",
    "THROTTLE_LIMIT": "1000",
    "LLM_PROVIDER": "openai-compatible",
    "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
    "OPENAI_COMPATIBLE_MODEL": "m",
}
USER = Ed25519Signer(b"\x07" * 32)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[OracleApp]:
    oracle = await create_oracle_app(
        {"name": "Auth Oracle"},
        env={**ENV, "SQLITE_DATABASE_PATH": str(tmp_path)},
        discover_entry_points=False,
        skip_graceful_shutdown=True,
    )
    try:
        yield oracle
    finally:
        await oracle.aclose()


def _archive(ucan_block: bytes) -> str:
    """A ucanto-shaped archive around any block, linked by its DAG-CBOR CIDv1."""
    link = cid_for(ucan_block)
    variant = dag_cbor.encode({"ucan@0.9.1": link})
    car = encode_car([cid_for(variant)], [(link, ucan_block), (cid_for(variant), variant)])
    return base64.b64encode(car).decode()


def _malformed_tokens(oracle_did: str) -> dict[str, str]:
    signed = invoke(
        USER,
        audience=oracle_did,
        capability={"with": USER.did(), "can": "*"},
        expiration=int(time.time()) + 600,
    )
    fields = cbor2.loads(signed.ucan.block)

    def variant(**changes: object) -> str:
        return _archive(cbor2.dumps({**fields, **changes}))

    return {
        "integer key": _archive(cbor2.dumps({**fields, 1: 2})),
        "bytes key": _archive(cbor2.dumps({**fields, b"v": 2})),
        "array key": _archive(cbor2.dumps({**fields, (1, 2): 2})),
        "integer key in a capability": variant(att=[{**fields["att"][0], 1: 2}]),
        "integer key in the caveats": variant(att=[{"nb": {1: 2}, **fields["att"][0]}]),
        "integer key in a fact": variant(fct=[{2: 3}]),
        "a list for a UCAN": _archive(cbor2.dumps([fields])),
    }


async def test_malformed_tokens_get_401_json_over_http(app: OracleApp) -> None:
    async with serving(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        for name, token in _malformed_tokens(app.state.oracle_did).items():
            as_invocation = await client.get(
                "/sessions", headers={"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}
            )
            as_delegation = await client.get("/sessions", headers={"x-ucan-delegation": token})
            for answer, message in (
                (as_invocation, "Invalid UCAN invocation"),
                (as_delegation, "Invalid UCAN delegation"),
            ):
                assert answer.status_code == 401, name
                assert answer.headers["content-type"].startswith("application/json"), name
                body = answer.json()
                assert (body["statusCode"], body["message"], body["error"]) == (
                    401,
                    message,
                    "Unauthorized",
                ), name


class ExplodingResolver:
    """A DID resolver that fails with its own exception type, not a resolution error."""

    async def resolve(self, did: str) -> list[str]:
        raise RuntimeError(f"resolver crashed on {did}")


async def test_an_unexpected_validation_failure_is_a_logged_401(
    caplog: pytest.LogCaptureFixture,
) -> None:
    oracle = "did:ixo:ixo1oracle0000000000000000000000000000"
    ixo_user = USER.with_did("did:ixo:ixo1user00000000000000000000000000000")
    token = invoke(
        ixo_user,
        audience=oracle,
        capability={"with": ixo_user.did(), "can": "*"},
        expiration=int(time.time()) + 600,
    ).to_base64()
    authenticator = Authenticator(
        oracle_did=oracle, max_ttl=900, verifier=ChainVerifier(ExplodingResolver())
    )

    with caplog.at_level(logging.WARNING, logger="oracle.server.auth"):
        with pytest.raises(HTTPError) as as_invocation:
            await authenticator.authenticate(
                {"authorization": f"Bearer {token}", "x-auth-type": "ucan"}
            )
        with pytest.raises(HTTPError) as as_delegation:
            await authenticator.authenticate({"x-ucan-delegation": token})

    assert (as_invocation.value.status, as_invocation.value.message) == (
        401,
        "Invalid UCAN invocation",
    )
    assert (as_delegation.value.status, as_delegation.value.message) == (
        401,
        "Invalid UCAN delegation",
    )
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f"{UNEXPECTED_CODE}: the invocation was refused after RuntimeError",
        f"{UNEXPECTED_CODE}: the delegation was refused after RuntimeError",
    ]
    assert not any(token in message for message in messages)
