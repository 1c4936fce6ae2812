"""Ids, patterns and documents: nothing unchecked is ever written into a query."""

from __future__ import annotations

import re
from typing import Any

import pytest
from graphql import StringValueNode, parse, visit
from graphql.language import Visitor
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from oracle_plugins.ixo_chain import _graphql as gql
from oracle_plugins.ixo_chain._ids import (
    CheckedId,
    IdError,
    check_account,
    check_did,
    check_tx_hash,
    is_valid_address,
    user_address,
)
from oracle_plugins.ixo_chain._messages import summarize_message
from oracle_plugins.ixo_chain._plans import User, plan_request
from oracle_plugins.ixo_chain._schema import LookupRequest
from oracle_plugins.ixo_chain._values import Trim

# A real-format account: 20 bytes of 0x00..0x13, bech32 with the "ixo" prefix.
ALICE = "ixo1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnur0g42"
USER = User(did=f"did:ixo:{ALICE}", address=ALICE)
REQUESTS: TypeAdapter[Any] = TypeAdapter(LookupRequest)
# Every literal a document may hold: checked ids of each kind, nothing else.
ALLOWED = re.compile(
    r"ixo1[02-9ac-hj-np-z]{38}|ixo1[02-9ac-hj-np-z]{58}|[A-Za-z0-9_-]{4,128}|[0-9]{1,20}"
    r"|did:ixo:(?:entity:)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}|[0-9A-F]{64}"
    r"|[A-Za-z0-9+/_-]{1,400}={0,2}"
)


class _Strings(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.values: list[str] = []

    def enter_string_value(self, node: StringValueNode, *_: Any) -> None:
        self.values.append(node.value)


def literals(query: str) -> list[str]:
    collector = _Strings()
    visit(parse(query), collector)
    return collector.values


def test_address_checksums() -> None:
    assert is_valid_address(ALICE)
    assert check_account(f"did:ixo:{ALICE}").value == ALICE
    assert check_account(ALICE.upper()).value == ALICE
    assert user_address(f"did:ixo:{ALICE}") == ALICE
    for bad in (
        ALICE[:-1] + "q",
        ALICE[:10] + ALICE[10:].upper(),
        "cosmos1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnur0g42",
        f"did:ixo:entity:{ALICE}",
        "did:key:z6Mk",
        "",
    ):
        with pytest.raises(IdError):
            check_account(bad)
    assert user_address("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK") is None
    assert user_address("did:web:example.com") is None
    assert user_address("did:ixo:entity:abc") is None


def test_ids_normalise() -> None:
    assert check_tx_hash("ab" * 32).value == "AB" * 32
    assert check_did(f"did:ixo:{ALICE.upper()}").value == f"did:ixo:{ALICE}"
    with pytest.raises(IdError):
        check_did("did:ixo:entity:a b")


def test_only_checked_values_are_written() -> None:
    with pytest.raises(TypeError):
        gql.string("raw")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        gql.integer(True)
    assert gql.string(CheckedId("8250", "collection")) == '"8250"'


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(
        [
            ("claim", "id"),
            ("claim_collection", "id"),
            ("entity", "id"),
            ("did_document", "did"),
            ("transaction", "hash"),
            ("claims", "agent"),
            ("claims", "collection"),
            ("claims", "after"),
            ("entities", "owner"),
            ("sent_transactions", "account"),
            ("received_transactions", "after"),
            ("token_balances", "account"),
            ("claim_collections", "entity"),
        ]
    ),
    text=st.text(min_size=0, max_size=80)
    | st.sampled_from(['"', "\\", '"}) { x }', "\n", "ixo1", "did:ixo:entity:", "\u0000"]),
)
def test_any_text_is_rejected_or_written_as_a_checked_literal(
    kind: tuple[str, str], text: str
) -> None:
    request = REQUESTS.validate_python({"kind": kind[0], kind[1]: text})
    try:
        plan = plan_request(request, USER)
    except IdError:
        return
    query = gql.document({"r0": plan.field})
    (root,) = parse(query).definitions[0].selection_set.selections  # type: ignore[attr-defined]
    assert root.alias.value == "r0"
    for value in literals(query):
        assert ALLOWED.fullmatch(value), value
    assert (
        text.strip() in literals(query)
        or text.strip().upper() in literals(query)
        or (kind[1] in ("agent", "owner", "account") and ALICE in literals(query))
    )


@given(payload=st.binary(min_size=20, max_size=20))
def test_user_dids_default_the_account(payload: bytes) -> None:
    address = _encode(payload)
    assert is_valid_address(address)
    user = User(did=f"did:ixo:{address}", address=user_address(f"did:ixo:{address}"))
    plan = plan_request(REQUESTS.validate_python({"kind": "token_balances"}), user)
    assert plan.subject == "user"
    assert literals(gql.document({"r0": plan.field})) == [address]


def _encode(payload: bytes) -> str:
    charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
    bits = "".join(f"{b:08b}" for b in payload)
    data = [int(bits[i : i + 5].ljust(5, "0"), 2) for i in range(0, len(bits), 5)]
    values = [3, 3, 3, 0, 9, 24, 15] + data + [0] * 6
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for bit, gen in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
            checksum ^= gen if (top >> bit) & 1 else 0
    polymod = checksum ^ 1
    tail = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return "ixo1" + "".join(charset[d] for d in data + tail)


def test_message_summaries() -> None:
    trim = Trim()
    send = summarize_message(
        "/cosmos.bank.v1beta1.MsgSend",
        {"from_address": "a", "to_address": "b", "amount": [{"denom": "uixo", "amount": "1"}]},
        trim,
    )
    assert send == {
        "type": "MsgSend",
        "from": "a",
        "to": "b",
        "amount": [{"denom": "uixo", "amountBaseUnits": "1"}],
    }
    proto_exec = summarize_message(
        "/cosmos.authz.v1beta1.MsgExec",
        {
            "grantee": "g",
            "msgs": [{"@type": "/ixo.claims.v1beta1.MsgSubmitClaim", "claim_id": "c"}],
        },
        trim,
    )
    assert proto_exec["messages"] == [
        {"type": "MsgSubmitClaim", "claimId": "c", "collectionId": None}
    ]
    nested = summarize_message(
        "/cosmos.authz.v1beta1.MsgExec",
        {"msgs": [{"typeUrl": "/cosmos.authz.v1beta1.MsgExec", "value": {"msgs": []}}]},
        trim,
    )
    assert "excerpt" in nested["messages"][0]
    other = summarize_message("/x.y.MsgZ", {"k": "\u0007" + "v" * 300}, trim)
    assert other["type"] == "/x.y.MsgZ"
    assert len(other["excerpt"]) == 240
    assert "\u0007" not in other["excerpt"]
    assert summarize_message(None, None, trim)["type"] == "unknown"
