"""Authentication with tokens minted by JavaScript ucanto (the clients' own library).

The bridge script and its pinned packages are oracle-ucan's interoperability kit
(``packages/oracle-ucan/tests/interop/js``); ``npm ci`` installs them when needed.
Missing Node or npm fails these tests.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from oracle_server import OracleApp
from oracle_server.testing import OpenAIDouble
from oracle_ucan.testing import NodeSetupError, node_with_locked_packages

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "packages" / "oracle-ucan" / "tests" / "interop" / "js"
BRIDGE = JS_DIR / "ucanto_bridge.mjs"
USER_SEED = "11" * 32

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


@pytest.fixture(scope="module")
def ucanto() -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    try:
        node = node_with_locked_packages(JS_DIR, code="auth", purpose="these tests")
    except NodeSetupError as exc:
        pytest.fail(str(exc), pytrace=False)

    def run(requests: list[dict[str, Any]]) -> dict[str, Any]:
        done = subprocess.run(
            [node, str(BRIDGE)],
            cwd=JS_DIR,
            input=json.dumps(requests),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        responses = json.loads(done.stdout)
        errors = [r for r in responses if "error" in r]
        assert not errors, errors
        return {r["id"]: r["ok"] for r in responses}

    return run


def _invocation(audience: str, *, expiration: int, issuer_seed: str = USER_SEED) -> dict[str, Any]:
    return {
        "op": "invoke",
        "issuer": {"seed": issuer_seed},
        "audience": audience,
        "capability": {"with": "did:key:placeholder", "can": "*"},
        "expiration": expiration,
    }


def _flip_signature(token: str) -> str:
    """The same archive with one bit of the UCAN's signature flipped (still decodable)."""
    from oracle_ucan import Delegation, dag_cbor, encode_car
    from oracle_ucan.cid import cid_for

    delegation = Delegation.from_base64(token)
    block = dag_cbor.decode(delegation.ucan.block)
    signature = bytearray(block["s"])
    signature[-1] ^= 0x01
    block["s"] = bytes(signature)
    ucan_bytes = dag_cbor.encode(block)
    ucan_cid = cid_for(ucan_bytes)
    variant = dag_cbor.encode({"ucan@0.9.1": ucan_cid})
    root = cid_for(variant)
    import base64

    return base64.b64encode(encode_car([root], [(ucan_cid, ucan_bytes), (root, variant)])).decode()


async def test_401_for_missing_bad_expired_and_misaddressed_tokens(
    serve: Serve, llm: OpenAIDouble, ucanto: Callable[[list[dict[str, Any]]], dict[str, Any]]
) -> None:
    now = int(time.time())
    async with serve() as (app, base_url), httpx.AsyncClient(base_url=base_url) as client:
        oracle = app.state.oracle_did
        minted = ucanto(
            [
                {"id": "good", **_invocation(oracle, expiration=now + 600)},
                {"id": "expired", **_invocation(oracle, expiration=now - 10)},
                {
                    "id": "elsewhere",
                    **_invocation(
                        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
                        expiration=now + 600,
                    ),
                },
            ]
        )

        def bearer(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}

        good = await client.post("/sessions", headers=bearer(minted["good"]["token"]))
        assert good.status_code == 201
        assert good.json()["sessionId"]

        missing = await client.post("/sessions")
        assert missing.status_code == 401
        assert missing.json()["message"].startswith("Missing UCAN authentication")

        for name, token in (
            ("bad signature", _flip_signature(minted["good"]["token"])),
            ("expired", minted["expired"]["token"]),
            ("wrong audience", minted["elsewhere"]["token"]),
            ("garbage", "not-a-token"),
        ):
            refused = await client.post("/sessions", headers=bearer(token))
            assert refused.status_code == 401, name
            assert refused.json() == {
                "statusCode": 401,
                "message": "Invalid UCAN invocation",
                "error": "Unauthorized",
                "requestId": refused.headers["x-request-id"],
            }, name

        # A bearer without X-Auth-Type: ucan is not an authentication.
        plain = await client.post(
            "/sessions", headers={"Authorization": f"Bearer {minted['good']['token']}"}
        )
        assert plain.status_code == 401
