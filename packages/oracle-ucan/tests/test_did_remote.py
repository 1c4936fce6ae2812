"""did:ixo, did:web, the composite cache and service DIDs, against a loopback HTTP server.

The server speaks HTTP/1.1 on 127.0.0.1 and answers Blocksync GraphQL (checking the
exact query text and variables of UCAN-20) and static ``did.json`` documents.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from multiformats import multibase

from oracle_ucan.did import (
    MAX_DOCUMENT_BYTES,
    CompositeResolver,
    IxoResolver,
    KeyResolver,
    LocalResolver,
    ServiceDidResolver,
    WebResolver,
    clear_service_did_cache,
    default_resolver,
    resolve_service_did,
)
from oracle_ucan.did.web import MAX_REDIRECTS, did_web_document_url, redirect_allowed
from oracle_ucan.errors import DidResolutionError, NotHandled
from oracle_ucan.principal import Ed25519Signer

# Copied from the spec (UCAN-20), not imported: the server must catch any drift.
EXPECTED_QUERY = (
    "query GetDIDDocument($id: String!) { iids(filter: { id: { equalTo: $id } }) "
    "{ nodes { id verificationMethod } } }"
)
ORACLE = "did:ixo:ixo1oracle0000000000000000000000000000"
BASE58BTC = multibase.Multibase.BASE58BTC


# --- a loopback server speaking Blocksync GraphQL and serving did.json ------------------


@dataclass
class Reply:
    """What the server answers to one request."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    chunk_size: int = 0  # > 0: send the body in chunks of this size...
    chunk_delay: float = 0.0  # ...this many seconds apart
    declare_length: bool = True  # False: no Content-Length, the body ends with the connection

    @classmethod
    def json(cls, value: object, status: int = 200) -> Reply:
        return cls(status=status, body=json.dumps(value).encode())


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class DidServer:
    """Blocksync at ``POST /graphql`` and DID documents at ``GET <path>``, one request per
    connection, in the test's own event loop."""

    def __init__(self, host: str = "127.0.0.1", *, tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.tls = tls
        self.ixo_documents: dict[str, object] = {}  # DID -> its verificationMethod value
        self.ixo_replies: dict[str, Reply] = {}  # DID -> a canned answer instead
        self.files: dict[str, object] = {}  # path -> JSON document
        self.file_replies: dict[str, Reply] = {}  # path -> a canned answer instead
        self.ixo_hits: Counter[str] = Counter()
        self.file_hits: Counter[str] = Counter()
        self.received: list[Received] = []
        self.violations: list[str] = []
        self.tls_attempts = 0
        self.hold: asyncio.Event | None = None  # when set, answers wait for this event
        self.arrived = asyncio.Event()  # set by every request
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> DidServer:
        self._server = await asyncio.start_server(self._connection, self.host, 0, ssl=self.tls)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def graphql_url(self) -> str:
        return f"{self.origin}/graphql"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            first = await reader.readexactly(1)
            if first == b"\x16":  # a TLS ClientHello: this server speaks plain HTTP only
                self.tls_attempts += 1
                return
            head = (first + await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *header_lines = head.split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers = {}
            for line in header_lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            request = Received(method, target, headers, body)
            self.received.append(request)
            self.arrived.set()
            reply = self._route(request)
            if self.hold is not None:
                await self.hold.wait()
            if reply.delay:
                await asyncio.sleep(reply.delay)
            await self._send(writer, reply)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            ssl.SSLError,
        ):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._connections.discard(task)

    def _route(self, request: Received) -> Reply:
        if request.method == "POST" and request.path == "/graphql":
            return self._graphql(request)
        if request.method == "GET":
            self.file_hits[request.path] += 1
            if request.path in self.file_replies:
                return self.file_replies[request.path]
            if request.path in self.files:
                return Reply.json(self.files[request.path])
            return Reply.json({"message": "not found"}, status=404)
        return Reply.json({"message": "method not allowed"}, status=405)

    def _graphql(self, request: Received) -> Reply:
        if request.headers.get("content-type") != "application/json":
            self.violations.append(f"content-type {request.headers.get('content-type')!r}")
        try:
            payload = json.loads(request.body)
        except ValueError:
            self.violations.append("GraphQL body is not JSON")
            return Reply.json({"errors": [{"message": "bad JSON"}]}, status=400)
        variables = payload.get("variables") if isinstance(payload, dict) else None
        if (
            not isinstance(payload, dict)
            or set(payload) != {"query", "variables"}
            or payload["query"] != EXPECTED_QUERY
            or not isinstance(variables, dict)
            or set(variables) != {"id"}
            or not isinstance(variables["id"], str)
        ):
            self.violations.append(f"unexpected GraphQL request {payload!r}")
            return Reply.json({"errors": [{"message": "unexpected request"}]}, status=400)
        did = variables["id"]
        self.ixo_hits[did] += 1
        if did in self.ixo_replies:
            return self.ixo_replies[did]
        nodes = []
        if did in self.ixo_documents:
            nodes.append({"id": did, "verificationMethod": self.ixo_documents[did]})
        return Reply.json({"data": {"iids": {"nodes": nodes}}})

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        lines = [f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}", "Connection: close"]
        lines.append("Content-Type: application/json")
        if reply.declare_length:
            lines.append(f"Content-Length: {len(reply.body)}")
        lines += [f"{name}: {value}" for name, value in reply.headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if reply.chunk_size:
            for start in range(0, len(reply.body), reply.chunk_size):
                writer.write(reply.body[start : start + reply.chunk_size])
                await writer.drain()
                await asyncio.sleep(reply.chunk_delay)
        else:
            writer.write(reply.body)
        await writer.drain()


@pytest.fixture
async def server() -> AsyncIterator[DidServer]:
    """A DID server on 127.0.0.1; the test fails if a request broke the protocol."""
    async with DidServer() as running:
        yield running
    assert running.violations == []


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _z(raw: bytes) -> str:
    return multibase.encode(BASE58BTC, raw)


def _multibase(signer: Ed25519Signer) -> str:
    """The multicodec form, as IXO documents carry it: a did:key without ``did:key:``."""
    return signer.did().removeprefix("did:key:")


def _ed25519_method(did: str, fragment: str, signer: Ed25519Signer) -> dict[str, str]:
    return {
        "id": f"{did}#{fragment}",
        "type": "Ed25519VerificationKey2018",
        "controller": did,
        "publicKeyMultibase": _multibase(signer),
    }


def _secp256k1_method(did: str, fragment: str) -> dict[str, str]:
    return {
        "id": f"{did}#{fragment}",
        "type": "EcdsaSecp256k1VerificationKey2019",
        "controller": did,
        "publicKeyMultibase": _z(b"\xe7\x01\x02" + bytes(range(32))),
    }


def _resolution_error(caught: pytest.ExceptionInfo[DidResolutionError]) -> DidResolutionError:
    """The error, checked to be a real failure rather than "not my method"."""
    assert type(caught.value) is DidResolutionError
    assert caught.value.code == "UNAUTHORIZED"
    return caught.value


# --- did:ixo ---------------------------------------------------------------------------


async def test_ixo_single_key(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [_ed25519_method(ORACLE, "key-1", signer)]

    assert await IxoResolver(server.graphql_url).resolve(ORACLE) == [signer.did()]

    [request] = server.received
    assert (request.method, request.path) == ("POST", "/graphql")
    assert json.loads(request.body) == {"query": EXPECTED_QUERY, "variables": {"id": ORACLE}}
    assert server.ixo_hits == Counter({ORACLE: 1})


async def test_ixo_returns_every_signing_key_in_document_order(server: DidServer) -> None:
    first, second, third, fourth = (Ed25519Signer.generate() for _ in range(4))
    decoy = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [
        _secp256k1_method(ORACLE, "secp"),
        _ed25519_method(ORACLE, "key-1", first),
        # A valid-looking 32-byte key, but for key agreement: never a signing key.
        {
            "id": f"{ORACLE}#agreement",
            "type": "X25519KeyAgreementKey2019",
            "controller": ORACLE,
            "publicKeyMultibase": _z(decoy.verifier.public_key),
        },
        # Not an Ed25519 type, but its id says signing.
        {
            "id": f"{ORACLE}#signing-2",
            "type": "CustomVerificationKey",
            "controller": ORACLE,
            "publicKeyHex": second.verifier.public_key.hex(),
        },
        {"id": f"{ORACLE}#service", "type": "LinkedDomains", "serviceEndpoint": "https://x"},
        # Ed25519 type, but a JWK that is not even JSON.
        {"id": f"{ORACLE}#broken", "type": "Ed25519VerificationKey2018", "publicKeyJwk": "{"},
        # A signing id with a secp256k1 key: kept by the filter, skipped as not Ed25519.
        _secp256k1_method(ORACLE, "signing-secp"),
        {
            "id": f"{ORACLE}#key-3",
            "type": "Ed25519VerificationKey2020",
            "controller": ORACLE,
            "publicKeyBase58": _z(third.verifier.public_key)[1:],
        },
        {
            "id": f"{ORACLE}#jwk",
            "type": "JsonWebKey2020",
            "controller": ORACLE,
            "publicKeyJwk": {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": base64.urlsafe_b64encode(fourth.verifier.public_key).decode().rstrip("="),
            },
        },
    ]

    keys = await IxoResolver(server.graphql_url).resolve(ORACLE)

    assert keys == [first.did(), second.did(), third.did(), fourth.did()]
    assert decoy.did() not in keys


async def test_ixo_verification_method_as_json_text(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = json.dumps([_ed25519_method(ORACLE, "key-1", signer)])
    assert await IxoResolver(server.graphql_url).resolve(ORACLE) == [signer.did()]


@pytest.mark.parametrize(
    "material",
    [
        pytest.param(lambda key: {"publicKeyMultibase": _z(key)}, id="bare-32-byte-multibase"),
        pytest.param(lambda key: {"publicKeyHex": key.hex()}, id="hex"),
        pytest.param(lambda key: {"publicKeyBase58": _z(key)[1:]}, id="base58"),
        pytest.param(
            lambda key: {
                "publicKeyJwk": json.dumps(
                    {"kty": "OKP", "crv": "Ed25519", "x": base64.urlsafe_b64encode(key).decode()}
                )
            },
            id="jwk-as-json-text",
        ),
    ],
)
async def test_ixo_key_representations(
    server: DidServer, material: Callable[[bytes], dict[str, str]]
) -> None:
    signer = Ed25519Signer.generate()
    method = {"id": f"{ORACLE}#key-1", "type": "Ed25519VerificationKey2018"}
    method.update(material(signer.verifier.public_key))
    server.ixo_documents[ORACLE] = [method]
    assert await IxoResolver(server.graphql_url).resolve(ORACLE) == [signer.did()]


async def test_ixo_same_key_twice_is_returned_once(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [
        _ed25519_method(ORACLE, "key-1", signer),
        {"id": f"{ORACLE}#signing", "type": "X", "publicKeyHex": signer.verifier.public_key.hex()},
    ]
    assert await IxoResolver(server.graphql_url).resolve(ORACLE) == [signer.did()]


async def test_ixo_first_key_field_present_decides(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [
        {
            "id": f"{ORACLE}#key-1",
            "type": "Ed25519VerificationKey2018",
            "publicKeyMultibase": "z0OIl",
            "publicKeyHex": signer.verifier.public_key.hex(),
        }
    ]
    with pytest.raises(DidResolutionError, match="no Ed25519 verification key") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_no_node_is_an_error(server: DidServer) -> None:
    with pytest.raises(DidResolutionError, match="not found") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)
    assert server.ixo_hits == Counter({ORACLE: 1})


async def test_ixo_node_of_another_did_is_not_accepted(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    other = ORACLE + "x"
    node = {"id": other, "verificationMethod": [_ed25519_method(other, "key-1", signer)]}
    server.ixo_replies[ORACLE] = Reply.json({"data": {"iids": {"nodes": [node]}}})
    with pytest.raises(DidResolutionError, match="not found") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_document_without_signing_keys_is_an_error(server: DidServer) -> None:
    server.ixo_documents[ORACLE] = [_secp256k1_method(ORACLE, "secp")]
    with pytest.raises(DidResolutionError, match="no Ed25519 verification key") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_graphql_errors(server: DidServer) -> None:
    server.ixo_replies[ORACLE] = Reply.json(
        {"errors": [{"message": "relation iids does not exist"}], "data": None}
    )
    with pytest.raises(DidResolutionError, match="GraphQL error: relation iids") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_http_500(server: DidServer) -> None:
    server.ixo_replies[ORACLE] = Reply.json({"message": "boom"}, status=500)
    with pytest.raises(DidResolutionError, match="HTTP 500") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>gateway</html>", id="html"),
        pytest.param(b'{"data":', id="truncated"),
        pytest.param(b"\xff\xfe\x00", id="not-utf8"),
        pytest.param(b"[" * 200_000, id="nested-beyond-the-parser-stack"),
    ],
)
async def test_ixo_invalid_json(server: DidServer, body: bytes) -> None:
    server.ixo_replies[ORACLE] = Reply(body=body)
    with pytest.raises(DidResolutionError, match="invalid JSON") as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([], "non-object"),
        ({"data": None}, "no data.iids.nodes"),
        ({"data": {"iids": {"nodes": {}}}}, "no data.iids.nodes"),
        ({"errors": "denied"}, "GraphQL error: unknown error"),
        ({"data": {"iids": {"nodes": [{"id": ORACLE}]}}}, "no verificationMethod list"),
        (
            {"data": {"iids": {"nodes": [{"id": ORACLE, "verificationMethod": "[{"}]}}},
            "verificationMethod is not valid JSON",
        ),
        (
            {"data": {"iids": {"nodes": [{"id": ORACLE, "verificationMethod": [1, "x", None]}]}}},
            "no Ed25519 verification key",
        ),
    ],
)
async def test_ixo_malformed_answers(server: DidServer, answer: object, message: str) -> None:
    server.ixo_replies[ORACLE] = Reply.json(answer)
    with pytest.raises(DidResolutionError, match=message) as caught:
        await IxoResolver(server.graphql_url).resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_timeout(server: DidServer) -> None:
    server.ixo_replies[ORACLE] = Reply.json({"data": {"iids": {"nodes": []}}})
    server.ixo_replies[ORACLE].delay = 5.0
    started = time.monotonic()
    with pytest.raises(DidResolutionError, match=r"did not answer within 0\.3 s") as caught:
        await IxoResolver(server.graphql_url, timeout=0.3).resolve(ORACLE)
    _resolution_error(caught)
    assert time.monotonic() - started < 2.0


async def test_ixo_deadline_covers_a_trickling_body(server: DidServer) -> None:
    # Each chunk arrives well within the per-read timeout; only the overall deadline stops it.
    server.ixo_replies[ORACLE] = Reply(
        body=b" " * 40 + b"{}", chunk_size=2, chunk_delay=0.1, declare_length=True
    )
    started = time.monotonic()
    with pytest.raises(DidResolutionError, match="did not answer within") as caught:
        await IxoResolver(server.graphql_url, timeout=0.5).resolve(ORACLE)
    _resolution_error(caught)
    assert time.monotonic() - started < 1.5


def _padded_answer(size: int) -> bytes:
    """A valid empty Blocksync answer padded with whitespace to exactly ``size`` bytes."""
    answer = json.dumps({"data": {"iids": {"nodes": []}}}).encode()
    return answer + b" " * (size - len(answer))


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "undeclared"])
async def test_ixo_response_size_limit(server: DidServer, declare_length: bool) -> None:
    resolver = IxoResolver(server.graphql_url)
    server.ixo_replies[ORACLE] = Reply(
        body=_padded_answer(MAX_DOCUMENT_BYTES), declare_length=declare_length
    )
    # Exactly at the limit: read and parsed (an empty answer, so "not found").
    with pytest.raises(DidResolutionError, match="not found"):
        await resolver.resolve(ORACLE)
    server.ixo_replies[ORACLE] = Reply(
        body=_padded_answer(MAX_DOCUMENT_BYTES + 1), declare_length=declare_length
    )
    with pytest.raises(DidResolutionError, match="exceeds 1048576 bytes") as caught:
        await resolver.resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_unreachable_indexer() -> None:
    # A port that was just free: nothing listens on it.
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(DidResolutionError, match=r"request failed \(ConnectError\)") as caught:
        await IxoResolver(f"http://127.0.0.1:{port}/graphql").resolve(ORACLE)
    _resolution_error(caught)


async def test_ixo_unusable_url() -> None:
    with pytest.raises(DidResolutionError, match="request failed") as caught:
        await IxoResolver("blocksync.example/graphql").resolve(ORACLE)
    _resolution_error(caught)


@pytest.mark.parametrize("did", ["did:key:z6Mkabc", "did:web:example.com", "did:ixo:", "ixo:x"])
async def test_ixo_does_not_handle_other_dids(server: DidServer, did: str) -> None:
    with pytest.raises(NotHandled):
        await IxoResolver(server.graphql_url).resolve(did)
    assert server.received == []


async def test_ixo_uses_the_given_client(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [_ed25519_method(ORACLE, "key-1", signer)]
    async with httpx.AsyncClient(headers={"x-client": "shared"}) as client:
        resolver = IxoResolver(server.graphql_url, client=client)
        assert await resolver.resolve(ORACLE) == [signer.did()]
        assert await resolver.resolve(ORACLE) == [signer.did()]
        assert not client.is_closed
    assert [request.headers.get("x-client") for request in server.received] == ["shared"] * 2


# --- did:web ---------------------------------------------------------------------------


def _web_did(server: DidServer, *segments: str) -> str:
    return ":".join([f"did:web:localhost%3A{server.port}", *segments])


def _web_document(did: str, *methods: dict[str, str]) -> dict[str, object]:
    return {"@context": ["https://www.w3.org/ns/did/v1"], "id": did, "verificationMethod": methods}


async def test_web_well_known_document(server: DidServer) -> None:
    first, second = Ed25519Signer.generate(), Ed25519Signer.generate()
    did = _web_did(server)
    server.files["/.well-known/did.json"] = _web_document(
        did,
        _secp256k1_method(did, "secp"),
        _ed25519_method(did, "key-1", first),
        # Ed25519, but without publicKeyMultibase: did:web reads multibase only (UCAN-21).
        {"id": f"{did}#hex", "type": "Ed25519VerificationKey2018", "publicKeyHex": "00" * 32},
        {"id": f"{did}#bad", "type": "Ed25519VerificationKey2018", "publicKeyMultibase": "z0OIl"},
        {
            "id": f"{did}#key-2",
            "type": "Ed25519VerificationKey2020",
            "publicKeyMultibase": _z(second.verifier.public_key),  # bare 32-byte key
        },
    )

    assert await WebResolver().resolve(did) == [first.did(), second.did()]
    assert [(r.method, r.path) for r in server.received] == [("GET", "/.well-known/did.json")]


async def test_web_path_segments(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    did = _web_did(server, "users", "alice")
    server.files["/users/alice/did.json"] = _web_document(
        did, _ed25519_method(did, "key-1", signer)
    )
    assert await WebResolver().resolve(did) == [signer.did()]
    assert server.file_hits == Counter({"/users/alice/did.json": 1})


async def test_web_percent_encoded_segment(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    did = _web_did(server, "team%20a")
    server.files["/team%20a/did.json"] = _web_document(did, _ed25519_method(did, "k", signer))
    assert await WebResolver().resolve(did) == [signer.did()]


async def test_web_id_mismatch_is_an_error(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    did = _web_did(server)
    other = "did:web:elsewhere.example"
    server.files["/.well-known/did.json"] = _web_document(
        other, _ed25519_method(other, "k", signer)
    )
    with pytest.raises(DidResolutionError, match="id does not match") as caught:
        await WebResolver().resolve(did)
    _resolution_error(caught)


async def test_web_follows_redirects(server: DidServer) -> None:
    signer = Ed25519Signer.generate()
    did = _web_did(server)
    server.file_replies["/.well-known/did.json"] = Reply(
        status=302, headers={"Location": "/moved/did.json"}
    )
    server.files["/moved/did.json"] = _web_document(did, _ed25519_method(did, "k", signer))
    assert await WebResolver().resolve(did) == [signer.did()]
    assert server.file_hits == Counter({"/.well-known/did.json": 1, "/moved/did.json": 1})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(lambda did: None, "HTTP 404", id="missing"),
        pytest.param(lambda did: [], "not a JSON object", id="array"),
        pytest.param(lambda did: {"verificationMethod": []}, "id does not match", id="no-id"),
        pytest.param(lambda did: {"id": did}, "no verificationMethod list", id="no-methods"),
        pytest.param(
            lambda did: {"id": did, "verificationMethod": [_secp256k1_method(did, "s"), "junk"]},
            "lists no Ed25519 key",
            id="no-ed25519",
        ),
    ],
)
async def test_web_unusable_documents(
    server: DidServer, document: Callable[[str], object], message: str
) -> None:
    did = _web_did(server)
    served = document(did)
    if served is not None:
        server.files["/.well-known/did.json"] = served
    with pytest.raises(DidResolutionError, match=message) as caught:
        await WebResolver().resolve(did)
    _resolution_error(caught)
    assert server.file_hits["/.well-known/did.json"] == 1


async def test_web_does_not_handle_other_dids(server: DidServer) -> None:
    with pytest.raises(NotHandled):
        await WebResolver().resolve(ORACLE)
    assert server.received == []


@pytest.mark.parametrize(
    "did",
    [
        "did:web:",
        "did:web:evil.example%2Fpath",
        "did:web:user%40evil.example",
        "did:web:evil.example%3Fq",
        "did:web:exa mple.com",
        "did:web:-bad.example",
        "did:web:localhost%3A1:..",
        "did:web:localhost%3A1::x",
        "did:web:localhost%3A1:a%2Fb",
        "did:web:localhost%3A1:a%23b",
    ],
)
async def test_web_malformed_did_fails_without_a_request(did: str) -> None:
    with pytest.raises(DidResolutionError, match="invalid did:web") as caught:
        await WebResolver().resolve(did)
    _resolution_error(caught)


@pytest.mark.parametrize(
    ("did", "url"),
    [
        ("did:web:example.com", "https://example.com/.well-known/did.json"),
        ("did:web:example.com%3A8443", "https://example.com:8443/.well-known/did.json"),
        ("did:web:example.com:users:alice", "https://example.com/users/alice/did.json"),
        ("did:web:localhost", "http://localhost/.well-known/did.json"),
        ("did:web:localhost%3A3000:a", "http://localhost:3000/a/did.json"),
        # Names under .localhost may be resolved through DNS: they keep https.
        ("did:web:api.localhost%3A3000", "https://api.localhost:3000/.well-known/did.json"),
        ("did:web:a.b.localhost", "https://a.b.localhost/.well-known/did.json"),
        ("did:web:LOCALHOST%3A3000", "http://LOCALHOST:3000/.well-known/did.json"),
        ("did:web:127.0.0.1%3A9", "http://127.0.0.1:9/.well-known/did.json"),
        ("did:web:%5B%3A%3A1%5D%3A9", "http://[::1]:9/.well-known/did.json"),
        # A public name that merely starts with "localhost" keeps https.
        ("did:web:localhost.example.com", "https://localhost.example.com/.well-known/did.json"),
        ("did:web:127.0.0.2", "https://127.0.0.2/.well-known/did.json"),
    ],
)
def test_web_document_urls(did: str, url: str) -> None:
    assert did_web_document_url(did) == url


async def test_web_fallback_to_http() -> None:
    # 127.0.0.2 is loopback on Linux but not on the plain-http list, so https comes first.
    async with DidServer(host="127.0.0.2") as plain:
        signer = Ed25519Signer.generate()
        did = f"did:web:127.0.0.2%3A{plain.port}"
        plain.files["/.well-known/did.json"] = _web_document(did, _ed25519_method(did, "k", signer))

        with pytest.raises(DidResolutionError, match="request failed") as caught:
            await WebResolver().resolve(did)
        _resolution_error(caught)
        assert (plain.tls_attempts, plain.file_hits["/.well-known/did.json"]) == (1, 0)

        assert await WebResolver(fallback_to_http=True).resolve(did) == [signer.did()]
        assert (plain.tls_attempts, plain.file_hits["/.well-known/did.json"]) == (2, 1)
    assert plain.violations == []


# --- redirects: never from https down to http ------------------------------------------

# 127.0.0.2 is loopback on Linux but not on the plain-http list: its did:web uses https.
TLS_HOST = "127.0.0.2"


@dataclass(frozen=True)
class Tls:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """A self-signed certificate for ``TLS_HOST``, and a client context that trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_HOST)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(TLS_HOST))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return Tls(server=server, client=ssl.create_default_context(cafile=str(cert_file)))


@contextlib.asynccontextmanager
async def _secure_and_plain(tls: Tls) -> AsyncIterator[tuple[DidServer, DidServer]]:
    async with DidServer(TLS_HOST, tls=tls.server) as secure, DidServer(TLS_HOST) as plain:
        yield secure, plain
    assert secure.violations == plain.violations == []


async def test_web_follows_a_redirect_within_https(tls: Tls) -> None:
    async with (
        _secure_and_plain(tls) as (secure, _),
        httpx.AsyncClient(verify=tls.client) as client,
    ):
        signer = Ed25519Signer.generate()
        did = f"did:web:{TLS_HOST}%3A{secure.port}"
        secure.file_replies["/.well-known/did.json"] = Reply(
            status=301, headers={"Location": f"{secure.origin}/moved/did.json"}
        )
        secure.files["/moved/did.json"] = _web_document(did, _ed25519_method(did, "k", signer))

        assert await WebResolver(client=client).resolve(did) == [signer.did()]
        assert secure.file_hits == Counter({"/.well-known/did.json": 1, "/moved/did.json": 1})


async def test_web_refuses_a_redirect_from_https_to_http(tls: Tls) -> None:
    async with (
        _secure_and_plain(tls) as (secure, plain),
        httpx.AsyncClient(verify=tls.client) as client,
    ):
        did = f"did:web:{TLS_HOST}%3A{secure.port}"
        secure.file_replies["/.well-known/did.json"] = Reply(
            status=302, headers={"Location": f"{plain.origin}/did.json"}
        )
        intruder = Ed25519Signer.generate()
        plain.files["/did.json"] = _web_document(did, _ed25519_method(did, "k", intruder))

        with pytest.raises(DidResolutionError, match="redirected from https to http") as caught:
            await WebResolver(client=client).resolve(did)

        _resolution_error(caught)
        assert secure.file_hits == Counter({"/.well-known/did.json": 1})
        assert plain.received == []


async def test_service_did_refuses_a_redirect_from_https_to_http(tls: Tls) -> None:
    async with (
        _secure_and_plain(tls) as (secure, plain),
        httpx.AsyncClient(verify=tls.client) as client,
    ):
        secure.files["/moved/did.json"] = {"id": SERVICE_DID}
        plain.files["/did.json"] = {"id": "did:web:intruder.example"}
        resolver = ServiceDidResolver(client=client, failure_ttl_seconds=0)

        secure.file_replies["/.well-known/did.json"] = Reply(
            status=307, headers={"Location": "/moved/did.json"}
        )
        assert await resolver.resolve(f"{secure.origin}/mcp") == SERVICE_DID
        resolver.clear()
        secure.file_replies["/.well-known/did.json"] = Reply(
            status=307, headers={"Location": f"{plain.origin}/did.json"}
        )
        assert await resolver.resolve(f"{secure.origin}/mcp") is None
        assert plain.received == []


async def test_web_stops_after_too_many_redirects(server: DidServer) -> None:
    did = _web_did(server)
    server.file_replies["/.well-known/did.json"] = Reply(
        status=302, headers={"Location": "/.well-known/did.json"}
    )
    with pytest.raises(DidResolutionError, match=f"more than {MAX_REDIRECTS} times") as caught:
        await WebResolver().resolve(did)
    _resolution_error(caught)
    assert server.file_hits["/.well-known/did.json"] == MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("https://a.example/x", "https://b.example/y", True),
        ("http://localhost/x", "http://localhost/y", True),
        ("http://localhost:3000/x", "http://localhost:4000/y", True),
        ("http://localhost/x", "https://a.example/y", True),
        ("http://localhost/x", "http://a.example/y", False),
        ("http://127.0.0.1/x", "http://localhost/y", False),
        ("https://a.example/x", "http://a.example/y", False),
        ("https://a.example/x", "ftp://a.example/y", False),
        ("https://a.example/x", "file:///etc/passwd", False),
    ],
)
def test_redirect_policy(source: str, target: str, allowed: bool) -> None:
    assert redirect_allowed(httpx.URL(source), httpx.URL(target)) is allowed


# --- CompositeResolver -----------------------------------------------------------------


def _serve_oracle(server: DidServer) -> Ed25519Signer:
    signer = Ed25519Signer.generate()
    server.ixo_documents[ORACLE] = [_ed25519_method(ORACLE, "key-1", signer)]
    return signer


async def test_composite_skips_resolvers_that_do_not_handle_the_method(server: DidServer) -> None:
    signer = _serve_oracle(server)
    user = Ed25519Signer.generate()
    composite = CompositeResolver([KeyResolver(), IxoResolver(server.graphql_url)])

    assert await composite.resolve(ORACLE) == [signer.did()]
    assert await composite.resolve(user.did()) == [user.did()]
    assert server.ixo_hits == Counter({ORACLE: 1})
    with pytest.raises(NotHandled, match="no resolver handles did:web"):
        await composite.resolve("did:web:example.com")
    with pytest.raises(NotHandled, match="no resolver handles non-DID"):
        await composite.resolve("mailto:someone")


async def test_composite_first_handling_resolver_decides(server: DidServer) -> None:
    on_chain = _serve_oracle(server)
    registered = Ed25519Signer.generate()
    local = LocalResolver()
    local.register(ORACLE, _multibase(registered))
    ixo = IxoResolver(server.graphql_url)

    assert await CompositeResolver([local, ixo]).resolve(ORACLE) == [registered.did()]
    assert server.ixo_hits[ORACLE] == 0
    assert await CompositeResolver([ixo, local]).resolve(ORACLE) == [on_chain.did()]
    assert server.ixo_hits[ORACLE] == 1


async def test_composite_does_not_fall_through_on_a_real_failure(server: DidServer) -> None:
    server.ixo_replies[ORACLE] = Reply.json({}, status=500)
    registered = Ed25519Signer.generate()
    local = LocalResolver()
    local.register(ORACLE, _multibase(registered))
    with pytest.raises(DidResolutionError, match="HTTP 500") as caught:
        await CompositeResolver([IxoResolver(server.graphql_url), local]).resolve(ORACLE)
    _resolution_error(caught)


async def test_default_resolver_chain(server: DidServer) -> None:
    signer = _serve_oracle(server)
    registered = Ed25519Signer.generate()
    local = LocalResolver()
    local.register("did:ixo:ixo1local", _multibase(registered))
    user = Ed25519Signer.generate()
    web_did = _web_did(server)
    server.files["/.well-known/did.json"] = _web_document(
        web_did, _ed25519_method(web_did, "k", user)
    )

    resolver = default_resolver(blocksync_graphql_url=server.graphql_url, local=local)

    assert [type(r) for r in resolver.resolvers] == [
        LocalResolver,
        KeyResolver,
        IxoResolver,
        WebResolver,
    ]
    assert resolver.resolvers[0] is local
    assert await resolver.resolve("did:ixo:ixo1local") == [registered.did()]
    assert await resolver.resolve(ORACLE) == [signer.did()]
    assert await resolver.resolve(user.did()) == [user.did()]
    assert await resolver.resolve(web_did) == [user.did()]
    assert server.ixo_hits == Counter({ORACLE: 1})

    without_ixo = default_resolver()
    assert [type(r) for r in without_ixo.resolvers] == [LocalResolver, KeyResolver, WebResolver]
    with pytest.raises(NotHandled):
        await without_ixo.resolve(ORACLE)


async def test_composite_caches_results_for_the_ttl(server: DidServer) -> None:
    signer = _serve_oracle(server)
    clock = FakeClock()
    composite = CompositeResolver([IxoResolver(server.graphql_url)], clock=clock)

    assert await composite.resolve(ORACLE) == [signer.did()]
    clock.now += 299.9
    assert await composite.resolve(ORACLE) == [signer.did()]
    assert server.ixo_hits[ORACLE] == 1

    clock.now += 0.1
    assert await composite.resolve(ORACLE) == [signer.did()]
    assert server.ixo_hits[ORACLE] == 2


async def test_composite_returns_copies_of_cached_keys(server: DidServer) -> None:
    signer = _serve_oracle(server)
    composite = CompositeResolver([IxoResolver(server.graphql_url)], clock=FakeClock())
    keys = await composite.resolve(ORACLE)
    keys.append("did:key:tampered")
    assert await composite.resolve(ORACLE) == [signer.did()]


async def test_composite_caches_failures_for_30_seconds(server: DidServer) -> None:
    server.ixo_replies[ORACLE] = Reply.json({"message": "down"}, status=503)
    clock = FakeClock()
    composite = CompositeResolver([IxoResolver(server.graphql_url)], clock=clock)

    with pytest.raises(DidResolutionError, match="HTTP 503") as first:
        await composite.resolve(ORACLE)
    clock.now += 29.9
    with pytest.raises(DidResolutionError, match="HTTP 503") as second:
        await composite.resolve(ORACLE)
    assert server.ixo_hits[ORACLE] == 1
    assert _resolution_error(second) is not _resolution_error(first)

    del server.ixo_replies[ORACLE]
    signer = _serve_oracle(server)
    clock.now += 0.1
    assert await composite.resolve(ORACLE) == [signer.did()]
    assert server.ixo_hits[ORACLE] == 2


async def test_composite_cached_not_handled_stays_not_handled() -> None:
    clock = FakeClock()
    composite = CompositeResolver([KeyResolver()], clock=clock)
    for _ in range(2):
        with pytest.raises(NotHandled):
            await composite.resolve(ORACLE)


async def test_composite_single_flight(server: DidServer) -> None:
    signer = _serve_oracle(server)
    composite = CompositeResolver([IxoResolver(server.graphql_url)])
    server.hold = asyncio.Event()

    first = asyncio.create_task(composite.resolve(ORACLE))
    second = asyncio.create_task(composite.resolve(ORACLE))
    await asyncio.wait_for(server.arrived.wait(), 5)
    await asyncio.sleep(0.05)  # time for a second request, if one were sent
    server.hold.set()

    assert await first == [signer.did()]
    assert await second == [signer.did()]
    assert server.ixo_hits[ORACLE] == 1


async def test_composite_one_caller_cancelling_does_not_cancel_the_lookup(
    server: DidServer,
) -> None:
    signer = _serve_oracle(server)
    composite = CompositeResolver([IxoResolver(server.graphql_url)])
    server.hold = asyncio.Event()

    impatient = asyncio.create_task(composite.resolve(ORACLE))
    patient = asyncio.create_task(composite.resolve(ORACLE))
    await asyncio.wait_for(server.arrived.wait(), 5)
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    server.hold.set()

    assert await patient == [signer.did()]
    assert server.ixo_hits[ORACLE] == 1


async def test_composite_evicts_the_least_recently_used(server: DidServer) -> None:
    dids = [f"{ORACLE}{suffix}" for suffix in "abc"]
    for did in dids:
        server.ixo_documents[did] = [_ed25519_method(did, "k", Ed25519Signer.generate())]
    a, b, c = dids
    composite = CompositeResolver([IxoResolver(server.graphql_url)], max_entries=2)

    await composite.resolve(a)
    await composite.resolve(b)
    await composite.resolve(a)  # hit: b is now the least recently used
    await composite.resolve(c)  # evicts b
    assert server.ixo_hits == Counter({a: 1, b: 1, c: 1})

    await composite.resolve(a)
    await composite.resolve(c)
    assert server.ixo_hits == Counter({a: 1, b: 1, c: 1})
    await composite.resolve(b)
    assert server.ixo_hits == Counter({a: 1, b: 2, c: 1})


async def test_composite_invalidate(server: DidServer) -> None:
    _serve_oracle(server)
    composite = CompositeResolver([IxoResolver(server.graphql_url)])
    await composite.resolve(ORACLE)
    composite.invalidate(ORACLE)
    await composite.resolve(ORACLE)
    composite.invalidate()
    await composite.resolve(ORACLE)
    assert server.ixo_hits[ORACLE] == 3


async def test_composite_zero_ttl_disables_the_cache(server: DidServer) -> None:
    _serve_oracle(server)
    composite = CompositeResolver([IxoResolver(server.graphql_url)], ttl_seconds=0)
    await composite.resolve(ORACLE)
    await composite.resolve(ORACLE)
    assert server.ixo_hits[ORACLE] == 2


class _BrokenResolver:
    """A third-party resolver with a bug."""

    async def resolve(self, did: str) -> list[str]:
        raise KeyError(did)


class _EmptyResolver:
    """A third-party resolver that breaks the contract by returning no keys."""

    async def resolve(self, did: str) -> list[str]:
        return []


async def test_composite_turns_foreign_exceptions_into_resolution_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    composite = CompositeResolver([_BrokenResolver()])
    with pytest.raises(DidResolutionError, match=r"_BrokenResolver failed \(KeyError\)") as caught:
        await composite.resolve(ORACLE)
    _resolution_error(caught)
    assert "_BrokenResolver raised KeyError" in caplog.text
    assert ORACLE not in caplog.text


async def test_composite_refuses_an_empty_key_list() -> None:
    with pytest.raises(DidResolutionError, match="returned no did:key") as caught:
        await CompositeResolver([_EmptyResolver()]).resolve(ORACLE)
    _resolution_error(caught)


class _StallingResolver:
    """Never answers its first lookup; answers every later one."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.calls = 0

    async def resolve(self, did: str) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()
        return [self.key]


def test_composite_survives_a_lookup_stranded_on_another_loop() -> None:
    key = Ed25519Signer.generate().did()
    resolver = _StallingResolver(key)
    composite = CompositeResolver([resolver])
    first_loop = asyncio.new_event_loop()

    async def give_up_waiting() -> None:
        caller = asyncio.create_task(composite.resolve(ORACLE))
        await asyncio.sleep(0.01)
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller

    try:
        first_loop.run_until_complete(give_up_waiting())
        stranded = asyncio.all_tasks(first_loop)
        assert len(stranded) == 1  # the shielded lookup, still pending on the first loop

        assert asyncio.run(composite.resolve(ORACLE)) == [key]
        assert resolver.calls == 2
    finally:
        for task in asyncio.all_tasks(first_loop):
            task.cancel()
        first_loop.run_until_complete(asyncio.sleep(0))
        first_loop.close()
    # The stranded lookup ending late does not disturb the cache.
    assert asyncio.run(composite.resolve(ORACLE)) == [key]
    assert resolver.calls == 2


@pytest.mark.parametrize(
    ("ttl", "failure_ttl", "max_entries", "message"),
    [(-1, 30, 10, "TTLs"), (300, -0.5, 10, "TTLs"), (300, 30, 0, "max_entries")],
)
def test_composite_refuses_bad_settings(
    ttl: float, failure_ttl: float, max_entries: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CompositeResolver(
            [KeyResolver()],
            ttl_seconds=ttl,
            failure_ttl_seconds=failure_ttl,
            max_entries=max_entries,
        )


# --- service DIDs ----------------------------------------------------------------------


@pytest.fixture
def shared_service_cache() -> Iterator[None]:
    clear_service_did_cache()
    yield
    clear_service_did_cache()


SERVICE_DID = "did:web:sandbox.example"


async def test_service_did_from_the_well_known_document(
    server: DidServer, shared_service_cache: None
) -> None:
    server.files["/.well-known/did.json"] = {"id": SERVICE_DID, "verificationMethod": []}
    assert await resolve_service_did(f"{server.origin}/mcp/tools?x=1#top") == SERVICE_DID
    assert [(r.method, r.path) for r in server.received] == [("GET", "/.well-known/did.json")]


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply.json({"verificationMethod": []}), id="no-id"),
        pytest.param(Reply.json({"id": 42}), id="id-not-text"),
        pytest.param(Reply.json({"id": "sandbox"}), id="id-not-a-did"),
        pytest.param(Reply.json(["did:web:x"]), id="not-an-object"),
        pytest.param(Reply.json({"message": "not found"}, status=404), id="404"),
        pytest.param(Reply(body=b"<html></html>"), id="invalid-json"),
    ],
)
async def test_service_did_is_none_when_unusable(
    server: DidServer, shared_service_cache: None, reply: Reply
) -> None:
    server.file_replies["/.well-known/did.json"] = reply
    assert await resolve_service_did(server.origin) is None
    assert server.file_hits["/.well-known/did.json"] == 1


@pytest.mark.parametrize("url", ["ftp://example.com/x", "not a url", "http://", "http://[::1"])
async def test_service_did_of_a_non_http_url_is_none(shared_service_cache: None, url: str) -> None:
    assert await resolve_service_did(url) is None


async def test_service_did_is_cached_per_origin(
    server: DidServer, shared_service_cache: None
) -> None:
    server.files["/.well-known/did.json"] = {"id": SERVICE_DID}
    assert await resolve_service_did(f"{server.origin}/a") == SERVICE_DID
    assert await resolve_service_did(f"{server.origin}/b?c=d") == SERVICE_DID
    assert server.file_hits["/.well-known/did.json"] == 1
    # Another origin (same server, other host name) is looked up on its own.
    assert await resolve_service_did(f"http://localhost:{server.port}/a") == SERVICE_DID
    assert server.file_hits["/.well-known/did.json"] == 2

    clear_service_did_cache()
    assert await resolve_service_did(server.origin) == SERVICE_DID
    assert server.file_hits["/.well-known/did.json"] == 3


async def test_service_did_cache_lifetimes(server: DidServer) -> None:
    clock = FakeClock()
    resolver = ServiceDidResolver(clock=clock)
    server.files["/.well-known/did.json"] = {"id": SERVICE_DID}

    assert await resolver.resolve(server.origin) == SERVICE_DID
    clock.now += 3599.9
    assert await resolver.resolve(server.origin) == SERVICE_DID
    assert server.file_hits["/.well-known/did.json"] == 1
    clock.now += 0.1
    server.file_replies["/.well-known/did.json"] = Reply.json({}, status=502)
    assert await resolver.resolve(server.origin) is None
    assert server.file_hits["/.well-known/did.json"] == 2

    # A failure is retried after 30 s, not an hour.
    clock.now += 29.9
    assert await resolver.resolve(server.origin) is None
    assert server.file_hits["/.well-known/did.json"] == 2
    del server.file_replies["/.well-known/did.json"]
    clock.now += 0.1
    assert await resolver.resolve(server.origin) == SERVICE_DID
    assert server.file_hits["/.well-known/did.json"] == 3


async def test_service_did_timeout_is_none(server: DidServer) -> None:
    server.file_replies["/.well-known/did.json"] = Reply(body=b"{}", delay=5.0)
    started = time.monotonic()
    assert await ServiceDidResolver(timeout=0.3).resolve(server.origin) is None
    assert time.monotonic() - started < 2.0


async def test_service_did_cache_is_bounded(server: DidServer) -> None:
    server.files["/.well-known/did.json"] = {"id": SERVICE_DID}
    resolver = ServiceDidResolver(max_entries=1)
    by_address, by_name = server.origin, f"http://localhost:{server.port}"
    for origin in (by_address, by_name, by_name, by_address):
        assert await resolver.resolve(origin) == SERVICE_DID
    # by_name evicted by_address, which then had to be fetched again.
    assert server.file_hits["/.well-known/did.json"] == 3


async def test_service_did_zero_failure_ttl_retries_every_time(server: DidServer) -> None:
    resolver = ServiceDidResolver(failure_ttl_seconds=0)
    assert await resolver.resolve(server.origin) is None
    assert await resolver.resolve(server.origin) is None
    assert server.file_hits["/.well-known/did.json"] == 2
