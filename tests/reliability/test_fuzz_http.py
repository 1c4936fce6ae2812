"""Fuzz: any request to any route of the OpenAPI document answers below 500, in JSON.

The oracle is served in a thread of its own (its model a loopback OpenAI double), so that
hypothesis drives it from a plain test over real HTTP. The routes come from the document
the oracle serves, the bundled plugins' included, so a route added later is fuzzed
without a new test. Each example picks
an operation and sends it with generated path and query parameters, headers and a JSON
body built on the operation's request schema: the schema's own field names with values of
any JSON type, ``NaN``, ``Infinity``, ``1e400``, long digit strings and non-ASCII digits
among them. Every answer must be below 500, and every error must be the client's JSON
shape with ``statusCode`` equal to the status. ``HYPOTHESIS_PROFILE`` decides how many
examples run.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.threaded import ThreadServedOracle

from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, auth_headers
from oracle_ucan import Ed25519Signer, delegate

pytestmark = pytest.mark.fuzz

# Number literals that Python's json module reads into values a lenient server trips on.
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 400, "-0", "1E-400"]
NUMBERY_TEXT = [
    "0",
    "-1",
    "1e3",
    "²",
    "٣",
    "２",
    " 1",
    "1_000",
    "0x10",
    "9" * 30,
    "9" * 5000,
    "m1",
    "m²",
    "m" + "9" * 40,
]


FUZZED_HEADERS = [
    "x-request-id",
    "x-timezone",
    "x-did",
    "x-matrix-homeserver",
    "x-auth-type",
    "authorization",
    "x-ucan-delegation",
]
MESSAGE_FIELDS = [
    "stream",
    "returnAllMessages",
    "tools",
    "agActions",
    "attachments",
    "metadata",
    "model",
    "timezone",
    "mcpInvocations",
    "homeServer",
    "unknown",
]


@dataclass(frozen=True)
class Raw:
    """A JSON literal written into the body as is."""

    text: str


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(RAW_NUMBERS).map(Raw),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


def encode(value: Any) -> str:
    """``value`` as JSON text, each ``Raw`` written as its literal."""
    raws: list[str] = []

    def placeholder(item: Any) -> Any:
        if isinstance(item, Raw):
            raws.append(item.text)
            return f"\x00raw{len(raws) - 1}\x00"
        if isinstance(item, list):
            return [placeholder(x) for x in item]
        if isinstance(item, dict):
            return {k: placeholder(v) for k, v in item.items()}
        return item

    text = json.dumps(placeholder(value))
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}\x00"), raw)
    return text


@asynccontextmanager
async def fuzzed_oracle(data: Path) -> AsyncIterator[OracleApp]:
    """The oracle under fuzz, with a model double that answers every turn."""
    async with OpenAIDouble(auto_reply=lambda chat: "fuzzed") as llm:
        app = await create_oracle_app(
            {"name": "HTTP Fuzz"},
            env={
                "ORACLE_BACKEND": "local",
                "SQLITE_DATABASE_PATH": str(data),
                "THROTTLE_LIMIT": "100000000",
                "MEMORY_BACKEND": "embedded",
                **llm.env(),
            },
            skip_graceful_shutdown=True,
        )
        yield app


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    path_params: tuple[str, ...]
    query_params: tuple[str, ...]
    body_fields: tuple[str, ...] | None


@dataclass
class Served:
    client: httpx.Client
    signer: Ed25519Signer
    oracle_did: str
    session_id: str
    delegation: str = field(repr=False)
    operations: list[Operation] = field(repr=False)
    _headers: dict[str, str] | None = field(default=None, repr=False)
    _minted_at: float = 0.0
    last: str = ""

    @property
    def user(self) -> dict[str, str]:
        """The user's headers, minted again before they expire (chaos runs are long)."""
        if self._headers is None or time.monotonic() - self._minted_at > 600:
            self._headers = auth_headers(self.signer, self.oracle_did, ttl=900)
            self._minted_at = time.monotonic()
        return self._headers


def _resolve(document: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][str(schema["$ref"]).rsplit("/", 1)[-1]]
    return schema


def operations_of(document: Mapping[str, Any]) -> list[Operation]:
    """Every operation of the document, with its parameter and body field names."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            parameters = [p for p in operation.get("parameters", []) if "$ref" not in p]
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema")
            fields = None
            if schema is not None:
                fields = tuple(_resolve(document, schema).get("properties", {}))
            found.append(
                Operation(
                    method=method.upper(),
                    path=path,
                    path_params=tuple(p["name"] for p in parameters if p["in"] == "path"),
                    query_params=tuple(p["name"] for p in parameters if p["in"] == "query"),
                    body_fields=fields,
                )
            )
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    oracle = ThreadServedOracle(partial(fuzzed_oracle, tmp_path_factory.mktemp("http-fuzz")))
    base_url, oracle_did = oracle.start()
    try:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            operations = operations_of(client.get("/openapi.json").json())
            # Swagger UI's assets are files, not an API.
            operations = [o for o in operations if not o.path.startswith("/docs")]
            assert any(o.body_fields for o in operations)
            signer = Ed25519Signer.generate()
            delegation = delegate(
                signer,
                audience=oracle_did,
                capabilities=[{"with": "ixo:memory", "can": "memory/*"}],
                expiration=int(time.time()) + 3600,
            ).to_base64()
            served = Served(client, signer, oracle_did, "", delegation, operations)
            created = client.post("/sessions", headers=served.user)
            assert created.status_code == 201, created.text
            served.session_id = created.json()["sessionId"]
            yield served
    finally:
        oracle.stop()


def param_values(session_id: str) -> st.SearchStrategy[str]:
    # Number-like text half the time: the parameters are cursors, limits and offsets.
    return st.sampled_from(NUMBERY_TEXT) | (
        st.just(session_id)
        | st.text(max_size=40)
        | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    )


HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60
) | st.sampled_from(NUMBERY_TEXT[:-3])


def good_values(served: Served) -> dict[str, Any]:
    """A valid value of each body field that has one: a fuzzed field next to valid ones
    reaches the checks behind validation."""
    return {
        "message": "hello",
        "sessionId": served.session_id,
        "raw": served.delegation,
        "stream": False,
    }


@st.composite
def bodies(draw: st.DrawFn, served: Served, fields: tuple[str, ...]) -> str:
    """JSON text: mostly an object of the schema's fields, some valid and some fuzzed."""
    good = good_values(served)
    kind = draw(st.sampled_from(["fields", "fields", "fields", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=60)).decode("latin-1")
    if kind == "json":
        return encode(draw(JSON_VALUES))
    body: dict[str, Any] = {}
    for name in fields:
        if draw(st.booleans()):
            fuzzed = name not in good or draw(st.booleans())
            body[name] = draw(JSON_VALUES) if fuzzed else good[name]
    for name in draw(st.lists(st.text(max_size=10), max_size=2)):
        body[name] = draw(JSON_VALUES)
    return encode(body)


@st.composite
def requests(draw: st.DrawFn, served: Served, operation: Operation) -> httpx.Request:
    values = param_values(served.session_id)
    url = operation.path
    for name in operation.path_params:
        # Never empty: an empty segment is another route, or a redirect.
        value = draw(values.filter(bool))
        url = url.replace("{" + name + "}", quote(value, safe=""))
    query = {
        name: draw(values)
        for name in operation.query_params
        if draw(st.booleans())  # each parameter present or absent
    }
    user = served.user if draw(st.integers(0, 9)) else {}
    headers = {name.lower().encode(): value.encode() for name, value in user.items()}
    for name in draw(st.sets(st.sampled_from(FUZZED_HEADERS))):
        # As bytes: UTF-8 beyond ASCII is legal on the wire (obs-text); h11 refuses only
        # surrounding whitespace.
        headers[name.encode()] = draw(HEADER_TEXT).strip().encode()
    content: bytes | None = None
    if operation.body_fields is not None:
        content = draw(bodies(served, operation.body_fields)).encode()
        headers[b"content-type"] = b"application/json"
    return served.client.build_request(
        operation.method, url, params=query, headers=headers, content=content
    )


def send(served: Served, request: httpx.Request) -> httpx.Response:
    """The answer; a dropped connection fails with the request that caused it."""
    try:
        answer = served.client.send(request)
    except httpx.TransportError as exc:
        content = request.content[:200]
        pytest.fail(
            f"{request.method} {request.url} {content!r}: no answer ({exc}); "
            f"the answer before: {served.last}"
        )
    served.last = (
        f"{request.method} {request.url} {request.content[:200]!r} -> {answer.status_code} "
        f"{dict(answer.headers)} {answer.text[:200]}"
    )
    return answer


def check(answer: httpx.Response) -> None:
    """Below 500; an error in the client's JSON shape."""
    where = f"{answer.request.method} {answer.request.url}"
    assert answer.status_code < 500, f"{where}: {answer.status_code} {answer.text[:500]}"
    if answer.status_code >= 400:
        body = answer.json()
        assert body["statusCode"] == answer.status_code, where
        assert body["requestId"] == answer.headers["x-request-id"], where


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_request_is_answered_with_a_server_error(served: Served, data: st.DataObject) -> None:
    # Every operation in each example, so that none waits for its turn to be drawn.
    for operation in served.operations:
        check(send(served, data.draw(requests(served, operation))))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_valid_bodies_with_any_one_field_changed_answer_below_500(
    served: Served, data: st.DataObject
) -> None:
    # Close to what a client sends, so the fuzzed field is what the checks meet.
    field = data.draw(st.sampled_from(MESSAGE_FIELDS))
    body = {"message": "hello", field: data.draw(JSON_VALUES)}
    request = served.client.build_request(
        "POST",
        f"/messages/{served.session_id}",
        headers={**served.user, "content-type": "application/json"},
        content=encode(body).encode(),
    )
    check(send(served, request))
