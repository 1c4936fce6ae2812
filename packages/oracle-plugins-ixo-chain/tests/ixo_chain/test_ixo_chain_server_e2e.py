"""One turn through the HTTP server: a did:ixo user, the model double, the chain double.

The server resolves the user's ``did:ixo`` through Blocksync (the chain double answers
that query too), the model loads the plugin and calls both tools, and the answers name
the user's account without the user ever giving it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from oracle_plugins.ixo_chain import IxoChainPlugin
from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, Step, ToolCalls, auth_headers, serving
from oracle_ucan import Ed25519Signer

if TYPE_CHECKING:
    from tests.ixo_chain.conftest import ChainDouble

ORACLE_DID = "did:ixo:ixo1ixochaine2eoracle"


def publish_user(chain: ChainDouble) -> Ed25519Signer:
    """Alice's DID document with a key the test signs with."""
    signer = Ed25519Signer.generate()
    did = f"did:ixo:{chain.alice}"
    document = next(row for row in chain.tables["iids"] if row["id"] == did)
    document["verificationMethod"] = [
        {
            "id": f"{did}#signing",
            "type": "Ed25519VerificationKey2018",
            "controller": did,
            "publicKeyMultibase": signer.did().removeprefix("did:key:"),
        }
    ]
    return signer.with_did(did)


def tool_result(llm: OpenAIDouble, request: int) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(llm.requests[request].messages[-1]["content"])
    return answer


async def test_a_turn_reads_the_users_chain_data_over_http(
    chain: ChainDouble, tmp_path: Path
) -> None:
    user = publish_user(chain)
    steps: list[Step] = [
        ToolCalls([("load_capability", {"names": ["ixo-chain"]})]),
        ToolCalls([("get_account_balances", {})]),
        ToolCalls([("chain_lookup", {"requests": [{"kind": "claims", "status": "approved"}]})]),
        "You hold 9 IXO and 5.74 PAY on testnet; 3 of your claims were approved.",
    ]
    env = {
        "ORACLE_BACKEND": "ixo",
        "MATRIX_ENABLED": "false",
        "ORACLE_NAME": "Chain Oracle",
        "ORACLE_DID": ORACLE_DID,
        "ORACLE_ENTITY_DID": "did:ixo:entity:chainoracle",
        "SECP_MNEMONIC": "unused",
        "RPC_URL": "http://127.0.0.1:9",
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
        "THROTTLE_LIMIT": "1000",
        **chain.env(),
    }
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "Chain Oracle"},
            plugins=[IxoChainPlugin()],
            env={**env, **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        headers = auth_headers(user, ORACLE_DID)
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
        ):
            created = await http.post("/sessions")
            assert created.status_code == 201, created.text
            session = created.json()["sessionId"]
            reply = await http.post(f"/messages/{session}", json={"message": "My IXO?"})
            assert reply.status_code == 200, reply.text
    # The server resolved the did:ixo user through the double's iids query.
    assert any("GetDIDDocument" in q for q in chain.queries)
    assert "get_account_balances" not in llm.requests[0].tool_names
    balances = tool_result(llm, 2)
    assert balances["address"] == chain.alice
    assert balances["subject"] == "user"
    assert balances["network"] == "testnet"
    assert [(t["symbol"], t["amount"]) for t in balances["tokens"][:2]] == [
        ("IXO", "9"),
        ("PAY", "5.74"),
    ]
    lookup = tool_result(llm, 3)
    (claims,) = lookup["results"]
    assert claims["subject"] == "user"
    assert [c["claimId"] for c in claims["data"]["claims"]] == [
        "bafkclaim02",
        "bafkclaim01",
        "bafkclaim00",
    ]
    assert all(c["paymentsStatus"]["approval"] == "paid" for c in claims["data"]["claims"])
    # The operating guide is not in the prompt of the loading turn's first call.
    assert "never as instructions" not in (llm.requests[0].system_prompt or "")
