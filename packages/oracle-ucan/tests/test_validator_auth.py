"""Auth invocations (UCAN-23, UCAN-24): the bearer token a client authenticates with.

``did:ixo`` issuers are resolved through the local table, or through a loopback HTTP
server answering Blocksync GraphQL (UCAN-20) when a document must list several keys.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiformats import multibase

from oracle_ucan import (
    CLOCK_SKEW_SECONDS,
    MAX_CAR_BYTES,
    CapabilityDef,
    ChainVerifier,
    CompositeResolver,
    Delegation,
    Ed25519Signer,
    InMemoryInvocationStore,
    IxoResolver,
    LocalResolver,
    Ucan,
    ValidateResult,
    cid_for,
    dag_cbor,
    encode_car,
    invoke,
    issue,
    validate_auth_invocation,
    validate_delegation,
    validate_invocation,
    varint,
)

NOW = 1_700_000_000
ORACLE = "did:ixo:ixo1oracle00000000000000000000000000000"
USER_IXO = "did:ixo:ixo1user0000000000000000000000000000000"
MAX_TTL = 900
CODES = {
    "INVALID_FORMAT",
    "INVALID_SIGNATURE",
    "UNAUTHORIZED",
    "REPLAY",
    "EXPIRED",
    "CAVEAT_VIOLATION",
}
EXPECTED_QUERY = (
    "query GetDIDDocument($id: String!) { iids(filter: { id: { equalTo: $id } }) "
    "{ nodes { id verificationMethod } } }"
)


def _auth(
    signer: Ed25519Signer,
    *,
    audience: str = ORACLE,
    expiration: int | None = NOW + 300,
    not_before: int | None = None,
    facts: tuple[dict[str, Any], ...] = (),
) -> Delegation:
    return invoke(
        signer,
        audience=audience,
        capability={"with": signer.did(), "can": "*"},
        expiration=expiration,
        not_before=not_before,
        facts=facts,
    )


async def _check(token: str | bytes | Delegation, **options: Any) -> ValidateResult:
    options.setdefault("audience", ORACLE)
    options.setdefault("now", NOW)
    return await validate_auth_invocation(token, **options)


def _refused(result: ValidateResult, code: str) -> str:
    """The refusal message, after checking the result is a refusal with ``code``."""
    assert result.ok is False
    assert result.error is not None
    assert result.error.code == code
    assert result.invoker is None
    assert result.to_dict() == {
        "ok": False,
        "error": {"code": code, "message": result.error.message},
    }
    return result.error.message


def _multibase(signer: Ed25519Signer) -> str:
    return signer.did().removeprefix("did:key:")


def _local_verifier(did: str, signer: Ed25519Signer) -> ChainVerifier:
    local = LocalResolver()
    local.register(did, _multibase(signer))
    return ChainVerifier(CompositeResolver([local]))


def _archive(block: bytes) -> bytes:
    """A ucanto archive around a (possibly tampered) UCAN block."""
    cid = cid_for(block)
    variant = dag_cbor.encode({"ucan@0.9.1": cid})
    root = cid_for(variant)
    return encode_car([root], [(cid, block), (root, variant)])


def _with_flipped_signature(delegation: Delegation) -> Delegation:
    model = dag_cbor.decode(delegation.ucan.block)
    signature = bytearray(model["s"])
    signature[-1] ^= 0x01
    model["s"] = bytes(signature)
    block = dag_cbor.encode(model)
    return Delegation(Ucan.decode(block, cid_for(block)))


# --- a loopback Blocksync GraphQL endpoint ----------------------------------------------


class Blocksync:
    """Answers the UCAN-20 query over HTTP/1.1 on 127.0.0.1, one request per connection."""

    def __init__(self) -> None:
        self.documents: dict[str, list[dict[str, str]]] = {}
        self.queried: list[str] = []
        self.violations: list[str] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Blocksync:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/graphql"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *lines = head.split("\r\n")
            headers = {}
            for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status, answer = self._graphql(request_line, body)
            payload = json.dumps(answer).encode()
            writer.write(
                (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Bad Request'}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
                ).encode()
                + payload
            )
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _graphql(self, request_line: str, body: bytes) -> tuple[int, object]:
        request = json.loads(body)
        if not request_line.startswith("POST /graphql ") or request.get("query") != (
            EXPECTED_QUERY
        ):
            self.violations.append(f"{request_line}: {request!r}")
            return 400, {"errors": [{"message": "unexpected request"}]}
        did = request["variables"]["id"]
        self.queried.append(did)
        methods = self.documents.get(did)
        nodes = [] if methods is None else [{"id": did, "verificationMethod": methods}]
        return 200, {"data": {"iids": {"nodes": nodes}}}


@pytest.fixture
async def blocksync() -> AsyncIterator[Blocksync]:
    async with Blocksync() as server:
        yield server
    assert server.violations == []


def _method(did: str, fragment: str, signer: Ed25519Signer) -> dict[str, str]:
    return {
        "id": f"{did}#{fragment}",
        "type": "Ed25519VerificationKey2018",
        "controller": did,
        "publicKeyMultibase": _multibase(signer),
    }


# --- valid tokens ------------------------------------------------------------------------


async def test_valid_auth_invocation() -> None:
    user = Ed25519Signer.generate()
    token = _auth(user, facts=({"session": "abc"},))

    result = await _check(token.to_base64())

    assert result.ok is True
    assert result.error is None
    assert result.invoker == user.did()
    assert result.capability == {"with": user.did(), "can": "*"}
    assert result.expiration == NOW + 300
    assert result.proof_chain == (user.did(),)
    assert result.facts == ({"session": "abc"},)
    assert result.delegation is not None
    assert result.delegation.cid == token.cid
    assert result.to_dict() == {
        "ok": True,
        "invoker": user.did(),
        "capability": {"with": user.did(), "can": "*"},
        "expiration": NOW + 300,
        "proof_chain": [user.did()],
        "facts": [{"session": "abc"}],
    }


async def test_accepts_archive_bytes_and_decoded_delegations() -> None:
    user = Ed25519Signer.generate()
    token = _auth(user)
    from_bytes = await _check(token.archive())
    from_object = await _check(token)
    assert from_bytes.ok is True
    assert from_object.ok is True
    assert from_bytes.invoker == from_object.invoker == user.did()


async def test_accepts_url_safe_unpadded_base64() -> None:
    token = _auth(Ed25519Signer.generate()).to_base64()
    url_safe = token.replace("+", "-").replace("/", "_").rstrip("=")
    assert (await _check(url_safe)).ok is True


async def test_a_token_is_reusable_until_it_expires() -> None:
    token = _auth(Ed25519Signer.generate()).to_base64()
    first = await _check(token)
    second = await _check(token)
    later = await _check(token, now=NOW + 299)
    assert (first.ok, second.ok, later.ok) == (True, True, True)
    _refused(await _check(token, now=NOW + 300), "EXPIRED")


async def test_capabilities_and_proofs_are_not_inspected() -> None:
    user = Ed25519Signer.generate()
    expired_proof = invoke(
        Ed25519Signer.generate(),
        audience=user.did(),
        capability={"with": "urn:other", "can": "other/thing"},
        expiration=NOW - 1000,
    )
    with_expired_proof = invoke(
        user,
        audience=ORACLE,
        capability={"with": "urn:anything", "can": "nothing/at-all"},
        expiration=NOW + 60,
        proofs=[expired_proof],
    )
    # A proof whose block is not in the archive at all.
    dangling = Delegation(
        issue(
            user,
            audience=ORACLE,
            capabilities=[],
            expiration=NOW + 60,
            proofs=[expired_proof.cid],
        )
    )
    assert (await _check(with_expired_proof.to_base64())).ok is True
    result = await _check(dangling.to_base64())
    assert result.ok is True
    assert result.capability is None


# --- audience and time bounds ------------------------------------------------------------


async def test_wrong_audience_is_unauthorized() -> None:
    token = _auth(Ed25519Signer.generate(), audience="did:ixo:ixo1someoneelse")
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == f"invocation is addressed to did:ixo:ixo1someoneelse, not {ORACLE}"


async def test_audience_must_match_exactly() -> None:
    token = _auth(Ed25519Signer.generate(), audience=ORACLE + "0")
    _refused(await _check(token), "UNAUTHORIZED")
    _refused(await _check(token, audience=ORACLE.upper()), "UNAUTHORIZED")


async def test_an_auth_invocation_must_expire() -> None:
    token = _auth(Ed25519Signer.generate(), expiration=None)
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == "an auth invocation must expire"


@pytest.mark.parametrize("expiration", [NOW, NOW - 1, NOW - 86_400])
async def test_expired_token(expiration: int) -> None:
    token = _auth(Ed25519Signer.generate(), expiration=expiration)
    message = _refused(await _check(token.to_base64()), "EXPIRED")
    assert message == f"UCAN {token.cid} expired at {expiration}"


async def test_expiry_has_no_skew_tolerance() -> None:
    token = _auth(Ed25519Signer.generate(), expiration=NOW + 1)
    assert (await _check(token)).ok is True
    _refused(await _check(token, now=NOW + 1), "EXPIRED")


async def test_not_before_beyond_the_skew_is_refused() -> None:
    nbf = NOW + CLOCK_SKEW_SECONDS + 1
    token = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=nbf + 100)
    message = _refused(await _check(token.to_base64()), "UNAUTHORIZED")
    assert message == f"UCAN {token.cid} is not valid before {nbf}"


@pytest.mark.parametrize("nbf", [NOW + CLOCK_SKEW_SECONDS, NOW + 1, NOW, NOW - 1000])
async def test_not_before_within_the_skew_is_accepted(nbf: int) -> None:
    token = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=NOW + 300)
    result = await _check(token.to_base64())
    assert result.ok is True
    assert result.delegation is not None
    assert result.delegation.ucan.not_before == nbf


def test_clock_skew_is_sixty_seconds() -> None:
    assert CLOCK_SKEW_SECONDS == 60


# --- lifetime ----------------------------------------------------------------------------


async def test_lifetime_at_the_limit_plus_skew_is_accepted() -> None:
    token = _auth(Ed25519Signer.generate(), expiration=NOW + MAX_TTL + CLOCK_SKEW_SECONDS)
    assert (await _check(token.to_base64(), max_ttl=MAX_TTL)).ok is True


async def test_lifetime_over_the_limit_is_unauthorized() -> None:
    token = _auth(Ed25519Signer.generate(), expiration=NOW + MAX_TTL + CLOCK_SKEW_SECONDS + 1)
    message = _refused(await _check(token.to_base64(), max_ttl=MAX_TTL), "UNAUTHORIZED")
    assert message == "lifetime exceeds UCAN_AUTH_MAX_TTL_SECONDS"


async def test_default_max_ttl_is_900_seconds() -> None:
    at_limit = _auth(Ed25519Signer.generate(), expiration=NOW + 900 + CLOCK_SKEW_SECONDS)
    over = _auth(Ed25519Signer.generate(), expiration=NOW + 900 + CLOCK_SKEW_SECONDS + 1)
    assert (await _check(at_limit)).ok is True
    assert _refused(await _check(over), "UNAUTHORIZED") == (
        "lifetime exceeds UCAN_AUTH_MAX_TTL_SECONDS"
    )


@pytest.mark.parametrize("max_ttl", [30, 3600])
async def test_max_ttl_is_configurable(max_ttl: int) -> None:
    limit = NOW + max_ttl + CLOCK_SKEW_SECONDS
    assert (await _check(_auth(Ed25519Signer.generate(), expiration=limit), max_ttl=max_ttl)).ok
    over = _auth(Ed25519Signer.generate(), expiration=limit + 1)
    _refused(await _check(over, max_ttl=max_ttl), "UNAUTHORIZED")


async def test_lifetime_is_measured_from_not_before_when_it_is_later() -> None:
    nbf = NOW + 50
    # exp - now = 1010 exceeds 960, but exp - nbf = 960 is within the limit.
    within = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=nbf + 960)
    over = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=nbf + 961)
    assert (await _check(within, max_ttl=MAX_TTL)).ok is True
    _refused(await _check(over, max_ttl=MAX_TTL), "UNAUTHORIZED")


async def test_lifetime_is_measured_from_now_when_not_before_is_past() -> None:
    nbf = NOW - 5000
    within = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=NOW + 960)
    over = _auth(Ed25519Signer.generate(), not_before=nbf, expiration=NOW + 961)
    assert (await _check(within, max_ttl=MAX_TTL)).ok is True
    _refused(await _check(over, max_ttl=MAX_TTL), "UNAUTHORIZED")


# --- signatures --------------------------------------------------------------------------


async def test_signature_of_another_key_is_invalid() -> None:
    victim = Ed25519Signer.generate()
    forger = Ed25519Signer.generate().with_did(victim.did())
    token = _auth(forger)
    assert token.issuer == victim.did()
    message = _refused(await _check(token.to_base64()), "INVALID_SIGNATURE")
    assert message == f"UCAN {token.cid} from {victim.did()}: signature does not verify"


async def test_flipped_signature_byte_is_invalid() -> None:
    genuine = _auth(Ed25519Signer.generate())
    tampered = _with_flipped_signature(genuine)
    assert (await _check(genuine)).ok is True
    assert tampered.cid != genuine.cid
    _refused(await _check(tampered.to_base64()), "INVALID_SIGNATURE")


async def test_unsupported_key_type_is_an_invalid_signature() -> None:
    secp256k1_key = varint.encode(0xE7) + b"\x02" + bytes(range(32))
    secp256k1_did = "did:key:" + multibase.encode("base58btc", secp256k1_key)
    token = _auth(Ed25519Signer.generate().with_did(secp256k1_did))
    assert token.issuer == secp256k1_did
    message = _refused(await _check(token.to_base64()), "INVALID_SIGNATURE")
    assert "unsupported key type 0xe7" in message


async def test_ixo_issuer_verifies_through_the_local_table() -> None:
    key = Ed25519Signer.generate()
    token = _auth(key.with_did(USER_IXO))
    assert token.issuer == USER_IXO

    result = await _check(token.to_base64(), verifier=_local_verifier(USER_IXO, key))

    assert result.ok is True
    assert result.invoker == USER_IXO
    assert result.proof_chain == (USER_IXO,)


async def test_ixo_issuer_listing_another_key_is_an_invalid_signature() -> None:
    token = _auth(Ed25519Signer.generate().with_did(USER_IXO))
    verifier = _local_verifier(USER_IXO, Ed25519Signer.generate())
    _refused(await _check(token, verifier=verifier), "INVALID_SIGNATURE")


async def test_ixo_issuer_without_a_resolver_is_an_invalid_signature() -> None:
    token = _auth(Ed25519Signer.generate().with_did(USER_IXO))
    message = _refused(await _check(token.to_base64()), "INVALID_SIGNATURE")
    assert message == f"cannot resolve the keys of {USER_IXO}"


async def test_unresolvable_ixo_issuer_is_an_invalid_signature() -> None:
    token = _auth(Ed25519Signer.generate().with_did(USER_IXO))
    verifier = _local_verifier("did:ixo:ixo1somebodyelse", Ed25519Signer.generate())
    message = _refused(await _check(token, verifier=verifier), "INVALID_SIGNATURE")
    assert message.startswith(f"cannot resolve {USER_IXO}: ")


async def test_every_listed_key_is_tried(blocksync: Blocksync) -> None:
    wrong, right = Ed25519Signer.generate(), Ed25519Signer.generate()
    blocksync.documents[USER_IXO] = [
        _method(USER_IXO, "key-1", wrong),
        _method(USER_IXO, "key-2", right),
    ]
    verifier = ChainVerifier(CompositeResolver([IxoResolver(blocksync.url)]))
    token = _auth(right.with_did(USER_IXO))

    result = await _check(token.to_base64(), verifier=verifier)

    assert result.ok is True
    assert result.invoker == USER_IXO
    assert blocksync.queried == [USER_IXO]


async def test_no_listed_key_verifies(blocksync: Blocksync) -> None:
    signer = Ed25519Signer.generate()
    blocksync.documents[USER_IXO] = [
        _method(USER_IXO, "key-1", Ed25519Signer.generate()),
        _method(USER_IXO, "key-2", Ed25519Signer.generate()),
    ]
    verifier = ChainVerifier(CompositeResolver([IxoResolver(blocksync.url)]))
    token = _auth(signer.with_did(USER_IXO))
    message = _refused(await _check(token, verifier=verifier), "INVALID_SIGNATURE")
    assert message.endswith("signature does not verify")


async def test_ixo_document_not_on_blocksync(blocksync: Blocksync) -> None:
    verifier = ChainVerifier(CompositeResolver([IxoResolver(blocksync.url)]))
    token = _auth(Ed25519Signer.generate().with_did(USER_IXO))
    message = _refused(await _check(token, verifier=verifier), "INVALID_SIGNATURE")
    assert message == f"cannot resolve {USER_IXO}: DID document not found on Blocksync"


async def test_resolved_key_verifications_are_remembered_for_five_minutes() -> None:
    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    key = Ed25519Signer.generate()
    local = LocalResolver()
    local.register(USER_IXO, _multibase(key))
    resolver = CompositeResolver([local], ttl_seconds=0)  # no resolution cache
    verifier = ChainVerifier(resolver, clock=clock)
    token = _auth(key.with_did(USER_IXO))
    assert (await _check(token, verifier=verifier)).ok is True

    # The DID document rotates to another key: the verified block stays trusted a while.
    local.register(USER_IXO, _multibase(Ed25519Signer.generate()))
    clock.now += 299
    assert (await _check(token, verifier=verifier)).ok is True
    clock.now += 1
    _refused(await _check(token, verifier=verifier), "INVALID_SIGNATURE")


async def test_verified_blocks_beyond_the_cache_size_are_verified_again(
    blocksync: Blocksync,
) -> None:
    key = Ed25519Signer.generate()
    blocksync.documents[USER_IXO] = [_method(USER_IXO, "key-1", key)]
    resolver = CompositeResolver([IxoResolver(blocksync.url)], ttl_seconds=0)
    first, second = _auth(key.with_did(USER_IXO)), _auth(key.with_did(USER_IXO), facts=({},))
    roomy = ChainVerifier(resolver, cache_size=2)
    tight = ChainVerifier(resolver, cache_size=1)

    for token in (first, second, first):
        assert (await _check(token, verifier=roomy)).ok is True
    assert len(blocksync.queried) == 2  # the third check reused the verified block
    for token in (first, second, first):
        assert (await _check(token, verifier=tight)).ok is True
    assert len(blocksync.queried) == 5  # "first" was forgotten when "second" came


class EmptyDocuments:
    """A third-party resolver that finds documents listing no key at all."""

    async def resolve(self, did: str) -> list[str]:
        return []


async def test_a_document_without_keys_is_an_invalid_signature() -> None:
    token = _auth(Ed25519Signer.generate().with_did(USER_IXO))
    message = _refused(
        await _check(token, verifier=ChainVerifier(EmptyDocuments())), "INVALID_SIGNATURE"
    )
    assert message == f"{USER_IXO} has no verification keys"


# --- malformed input never raises ------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "",
        "   ",
        "not base64 at all!",
        "====",
        "é" * 10,
        base64.b64encode(b"\x00\x01\x02 garbage").decode(),
        base64.b64encode(b"\xa1\x61\x61\x01").decode(),
        "A" * (MAX_CAR_BYTES * 4),
        b"",
        b"\x00",
        b"\xff" * 64,
        b"\x0a" + b"\x00" * (MAX_CAR_BYTES + 1),
    ],
    ids=[
        "empty",
        "blank",
        "not-base64",
        "padding",
        "non-ascii",
        "junk-bytes",
        "cbor-not-car",
        "huge-text",
        "empty-bytes",
        "zero-byte",
        "ff-bytes",
        "huge-bytes",
    ],
)
async def test_garbage_is_invalid_format_for_every_validator(token: str | bytes) -> None:
    auth = await _check(token)
    delegation = await validate_delegation(token, audience=ORACLE, now=NOW)
    store = InMemoryInvocationStore()
    invocation = await validate_invocation(
        token,
        CapabilityDef("mcp/call"),
        "urn:x",
        audience=ORACLE,
        root_issuers=["*"],
        store=store,
        now=NOW,
    )
    for result in (auth, delegation, invocation):
        _refused(result, "INVALID_FORMAT")
        assert result.delegation is None
    assert len(store) == 0


async def test_archive_of_something_else_is_invalid_format() -> None:
    variant = dag_cbor.encode({"not-a-ucan": 1})
    root = cid_for(variant)
    car = encode_car([root], [(root, variant)])
    message = _refused(await _check(car), "INVALID_FORMAT")
    assert message == "CAR archive does not contain a delegation"


async def test_every_single_byte_corruption_is_refused_without_raising() -> None:
    user = Ed25519Signer.generate()
    block = _auth(user, not_before=NOW - 10, facts=({"k": "v"},)).ucan.block
    codes: set[str] = set()
    for index in range(len(block)):
        for mask in (0x01, 0x80):
            corrupted = bytearray(block)
            corrupted[index] ^= mask
            result = await _check(_archive(bytes(corrupted)))
            assert result.ok is False, (index, mask)
            assert result.error is not None
            codes.add(result.error.code)
    assert codes <= CODES
    # Most corruptions break the encoding; those inside signed values break the signature.
    assert {"INVALID_FORMAT", "INVALID_SIGNATURE"} <= codes


@settings(max_examples=150, deadline=None)
@given(token=st.one_of(st.binary(max_size=600), st.text(max_size=600)))
def test_arbitrary_input_never_raises(token: str | bytes) -> None:
    async def run() -> list[ValidateResult]:
        return [
            await _check(token),
            await validate_delegation(token, audience=ORACLE, now=NOW),
        ]

    for result in asyncio.run(run()):
        assert result.ok is False
        assert result.error is not None
        assert result.error.code in CODES
