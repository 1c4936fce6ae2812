"""ucanto auth invocations from ``did:ixo`` signers pass ``validate_auth_invocation``
(UCAN-20, 24, UCAN-36 (2)).

The client signs with ``signer.withDID("did:ixo:…")``; Python resolves that DID through a
Blocksync GraphQL double on loopback whose document lists the client's Ed25519 key after
decoys (a secp256k1 key, an X25519 key and an unrelated Ed25519 key), and tries each
Ed25519 key in turn.

Lifetime bound: UCAN-24 defines it as ``exp - max(now, nbf) <= max_ttl + skew`` with the
60 s clock-skew tolerance of UCAN-23, so with ``max_ttl=900`` a 901 s token passes and the
first refused lifetime is 961 s. (UCAN-36 (2) says "901 s lifetime with max 900 fails",
which holds only without the skew; these tests follow the normative UCAN-24 rule.)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from multiformats import multibase

from oracle_ucan import (
    CLOCK_SKEW_SECONDS,
    ChainVerifier,
    Delegation,
    Ed25519Signer,
    IxoResolver,
    validate_auth_invocation,
)

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

# Copied from the spec (UCAN-20), not imported: the double must catch any drift.
EXPECTED_QUERY = (
    "query GetDIDDocument($id: String!) { iids(filter: { id: { equalTo: $id } }) "
    "{ nodes { id verificationMethod } } }"
)
CLIENT_SEED = bytes([0x21]) * 32
CLIENT_KEY = Ed25519Signer(CLIENT_SEED)
CLIENT = "did:ixo:ixo1interopclient000000000000000000000"
STRANGER = "did:ixo:ixo1interopstranger0000000000000000000"  # lists only the decoys
DECOY_KEY = Ed25519Signer(bytes([0x22]) * 32)
ORACLE = "did:ixo:ixo1interoporacle0000000000000000000000"
MAX_TTL = 900


def _multibase(raw: bytes) -> str:
    return multibase.encode("base58btc", raw)


def _methods(did: str, *, with_client_key: bool) -> list[dict[str, Any]]:
    """A Blocksync ``verificationMethod`` list: decoys first, then the client's key."""
    methods: list[dict[str, Any]] = [
        {
            "id": f"{did}#secp256k1-1",
            "type": "EcdsaSecp256k1VerificationKey2019",
            "controller": did,
            "publicKeyMultibase": _multibase(bytes.fromhex("e701") + b"\x02" + b"\x5a" * 32),
        },
        {
            "id": f"{did}#key-agreement-1",
            "type": "X25519KeyAgreementKey2019",
            "controller": did,
            "publicKeyMultibase": _multibase(bytes.fromhex("ec01") + b"\x33" * 32),
        },
        {
            "id": f"{did}#signing-old",
            "type": "Ed25519VerificationKey2018",
            "controller": did,
            "publicKeyMultibase": DECOY_KEY.did().removeprefix("did:key:"),
        },
    ]
    if with_client_key:
        methods.append(
            {
                "id": f"{did}#signing",
                "type": "Ed25519VerificationKey2020",
                "controller": did,
                "publicKeyMultibase": CLIENT_KEY.did().removeprefix("did:key:"),
            }
        )
    return methods


DOCUMENTS = {
    CLIENT: _methods(CLIENT, with_client_key=True),
    STRANGER: _methods(STRANGER, with_client_key=False),
}


class _Blocksync(BaseHTTPRequestHandler):
    """Blocksync's GraphQL endpoint at ``POST /graphql``, answering from ``DOCUMENTS``."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append(body)
        if self.path != "/graphql" or body.get("query") != EXPECTED_QUERY:
            self._answer(HTTPStatus.BAD_REQUEST, {"errors": [{"message": "unexpected query"}]})
            return
        did = body["variables"]["id"]
        nodes = [{"id": did, "verificationMethod": DOCUMENTS[did]}] if did in DOCUMENTS else []
        self._answer(HTTPStatus.OK, {"data": {"iids": {"nodes": nodes}}})

    def _answer(self, status: HTTPStatus, value: object) -> None:
        payload = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""


@pytest.fixture(scope="module")
def blocksync() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The double's GraphQL URL and the request bodies it has received."""
    received: list[dict[str, Any]] = []
    handler = type("Blocksync", (_Blocksync,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/graphql", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _verifier(blocksync: tuple[str, list[dict[str, Any]]]) -> ChainVerifier:
    return ChainVerifier(IxoResolver(blocksync[0]))


LIFETIMES = [
    # (name, nbf relative to now or None, lifetime from max(now, nbf), accepted)
    ("at_max", 0, MAX_TTL, True),
    ("one_over_max", 0, MAX_TTL + 1, True),
    ("at_max_plus_skew", 0, MAX_TTL + CLOCK_SKEW_SECONDS, True),
    ("over_max_plus_skew", 0, MAX_TTL + CLOCK_SKEW_SECONDS + 1, False),
    ("no_nbf_at_max_plus_skew", None, MAX_TTL + CLOCK_SKEW_SECONDS, True),
    ("no_nbf_over_max_plus_skew", None, MAX_TTL + CLOCK_SKEW_SECONDS + 1, False),
    ("future_nbf_at_max_plus_skew", 30, MAX_TTL + CLOCK_SKEW_SECONDS, True),
    ("future_nbf_over_max_plus_skew", 30, MAX_TTL + CLOCK_SKEW_SECONDS + 1, False),
    ("past_nbf_over_max_plus_skew", -600, MAX_TTL + CLOCK_SKEW_SECONDS + 1, False),
]


def _invocation(
    name: str,
    now: int,
    *,
    issuer: str = CLIENT,
    audience: str = ORACLE,
    expiration: int | None,
    not_before: int | None = None,
) -> dict[str, Any]:
    return {
        "id": name,
        "op": "invoke",
        "issuer": {"seed": CLIENT_SEED.hex(), "did": issuer},
        "audience": audience,
        "capability": {"with": issuer, "can": "oracle/auth", "nb": {"session": "s-1"}},
        "expiration": expiration,
        "not_before": not_before,
    }


@pytest.fixture(scope="module")
def made(ucanto: Ucanto, now: int) -> dict[str, Any]:
    """The module's ucanto invocations, minted in one Node run."""
    requests = [
        _invocation("valid", now, expiration=now + 300),
        _invocation("stranger", now, issuer=STRANGER, expiration=now + 300),
        _invocation("other_audience", now, audience=CLIENT, expiration=now + 300),
        _invocation("never_expires", now, expiration=None),
        _invocation("expired", now, expiration=now - 1),
    ]
    for name, nbf, lifetime, _ in LIFETIMES:
        start = now if nbf is None else max(now, now + nbf)
        requests.append(
            _invocation(
                f"lifetime:{name}",
                now,
                expiration=start + lifetime,
                not_before=None if nbf is None else now + nbf,
            )
        )
    return ucanto(requests)


async def test_resolver_returns_every_ed25519_key_in_order(
    blocksync: tuple[str, list[dict[str, Any]]],
) -> None:
    keys = await IxoResolver(blocksync[0]).resolve(CLIENT)
    assert keys == [DECOY_KEY.did(), CLIENT_KEY.did()]


async def test_ixo_auth_invocation_validates(
    made: dict[str, Any], now: int, blocksync: tuple[str, list[dict[str, Any]]]
) -> None:
    seen = len(blocksync[1])
    result = await validate_auth_invocation(
        made["valid"]["token"],
        audience=ORACLE,
        max_ttl=MAX_TTL,
        now=now,
        verifier=_verifier(blocksync),
    )
    assert result.ok, result.error
    assert result.invoker == CLIENT
    assert result.expiration == now + 300
    assert result.capability == {"with": CLIENT, "can": "oracle/auth", "nb": {"session": "s-1"}}
    assert result.proof_chain == (CLIENT,)
    assert blocksync[1][seen:] == [{"query": EXPECTED_QUERY, "variables": {"id": CLIENT}}]


async def test_reuse_succeeds(
    made: dict[str, Any], now: int, blocksync: tuple[str, list[dict[str, Any]]]
) -> None:
    """No replay store for auth invocations: the same token works until it expires."""
    verifier = _verifier(blocksync)
    for _ in range(2):
        result = await validate_auth_invocation(
            made["valid"]["token"], audience=ORACLE, max_ttl=MAX_TTL, now=now, verifier=verifier
        )
        assert result.ok, result.error
    again = await validate_auth_invocation(
        made["valid"]["token"],
        audience=ORACLE,
        max_ttl=MAX_TTL,
        now=now + 60,
        verifier=_verifier(blocksync),
    )
    assert again.ok, again.error


async def test_key_missing_from_the_document_is_invalid_signature(
    made: dict[str, Any], now: int, blocksync: tuple[str, list[dict[str, Any]]]
) -> None:
    result = await validate_auth_invocation(
        made["stranger"]["token"],
        audience=ORACLE,
        max_ttl=MAX_TTL,
        now=now,
        verifier=_verifier(blocksync),
    )
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "INVALID_SIGNATURE"


async def test_without_a_resolver_the_ixo_issuer_cannot_verify(
    made: dict[str, Any], now: int
) -> None:
    result = await validate_auth_invocation(
        made["valid"]["token"], audience=ORACLE, max_ttl=MAX_TTL, now=now
    )
    assert not result.ok
    assert result.error is not None
    assert result.error.code == "INVALID_SIGNATURE"


@pytest.mark.parametrize(
    ("name", "code"),
    [("other_audience", "UNAUTHORIZED"), ("never_expires", "UNAUTHORIZED"), ("expired", "EXPIRED")],
)
async def test_refusals(
    made: dict[str, Any],
    now: int,
    blocksync: tuple[str, list[dict[str, Any]]],
    name: str,
    code: str,
) -> None:
    result = await validate_auth_invocation(
        made[name]["token"],
        audience=ORACLE,
        max_ttl=MAX_TTL,
        now=now,
        verifier=_verifier(blocksync),
    )
    assert not result.ok
    assert result.error is not None
    assert result.error.code == code


@pytest.mark.parametrize(
    ("name", "accepted"), [(name, accepted) for name, _, _, accepted in LIFETIMES]
)
async def test_lifetime_bound_is_max_ttl_plus_skew(
    made: dict[str, Any],
    now: int,
    blocksync: tuple[str, list[dict[str, Any]]],
    name: str,
    accepted: bool,
) -> None:
    result = await validate_auth_invocation(
        made[f"lifetime:{name}"]["token"],
        audience=ORACLE,
        max_ttl=MAX_TTL,
        now=now,
        verifier=_verifier(blocksync),
    )
    assert result.ok is accepted, result.error
    if not accepted:
        assert result.error is not None
        assert result.error.code == "UNAUTHORIZED"
        assert result.error.message == "lifetime exceeds UCAN_AUTH_MAX_TTL_SECONDS"


def test_ucanto_fixtures_reencode_byte_identically(made: dict[str, Any]) -> None:
    for name, value in made.items():
        token = value["token"]
        assert Delegation.from_base64(token).to_base64() == token, name
