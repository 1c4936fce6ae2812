"""Blocksync rows as answer data: statuses as words, coins in base units, text trimmed."""

from __future__ import annotations

from typing import Any

from oracle_plugins.ixo_chain._messages import summarize_message
from oracle_plugins.ixo_chain._text import EXCERPT_LENGTH
from oracle_plugins.ixo_chain._values import (
    Trim,
    as_dict,
    coins,
    collection_state,
    cw20_coins,
    cw1155_payment,
    evaluation_status,
    payment_status,
    whole_number,
)

__all__ = [
    "ENTITY_STATUS_NOTE",
    "claim_data",
    "collection_data",
    "did_document_data",
    "entity_data",
    "token_balance_data",
    "transaction_data",
    "transaction_signers",
]

MAX_TX_MESSAGES = 10
ENTITY_STATUS_NOTE = (
    "The chain's own number; the chain gives entity status no fixed meaning, so do not "
    "read it as active or inactive."
)


def _drop_empty(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v not in (None, [], {}, "")}


def claim_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """A claim with its current evaluation and payment statuses."""
    evaluation = node.get("evaluation")
    payments = node.get("paymentsStatus")
    data: dict[str, Any] = {
        "claimId": trim.text(node.get("claimId")),
        "collectionId": trim.text(node.get("collectionId")),
        "agentAddress": trim.text(node.get("agentAddress")),
        "agentDid": trim.text(node.get("agentDid")),
        "submissionDate": trim.text(node.get("submissionDate")),
        "status": evaluation_status(evaluation.get("status"))
        if isinstance(evaluation, dict)
        else "pending",
        "paymentsStatus": {k: payment_status(v) for k, v in payments.items()}
        if isinstance(payments, dict)
        else None,
        "amount": coins(node.get("amount"), trim),
        "cw20Payment": cw20_coins(node.get("cw20Payment"), trim),
        "cw1155Payment": cw1155_payment(node.get("cw1155Payment"), trim),
    }
    if isinstance(evaluation, dict):
        data["evaluation"] = _drop_empty(
            {
                "status": evaluation_status(evaluation.get("status")),
                "evaluationDate": trim.text(evaluation.get("evaluationDate")),
                "oracle": trim.text(evaluation.get("oracle")),
                "evaluator": trim.text(evaluation.get("agentAddress")),
                "reason": whole_number(evaluation.get("reason")),
                "amount": coins(evaluation.get("amount"), trim),
                "cw20Payment": cw20_coins(evaluation.get("cw20Payment"), trim),
                "cw1155Payment": cw1155_payment(evaluation.get("cw1155Payment"), trim),
            }
        )
    return _drop_empty(data)


def _payment(value: Any, trim: Trim) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return _drop_empty(
        {
            "account": trim.text(value.get("account")),
            "amount": coins(value.get("amount"), trim),
            "cw20Payment": cw20_coins(value.get("cw20Payment") or value.get("cw20_payment"), trim),
            "cw1155Payment": cw1155_payment(
                value.get("contract1155Payment") or value.get("contract_1155_payment"), trim
            ),
        }
    )


def collection_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """A claim collection: state as a word, counts, payments in base units."""
    payments = as_dict(node.get("payments"))
    data: dict[str, Any] = {
        "id": trim.text(node.get("id")),
        "entity": trim.text(node.get("entity")),
        "admin": trim.text(node.get("admin")),
        "protocol": trim.text(node.get("protocol")),
        "state": collection_state(node.get("state")),
        "startDate": trim.text(node.get("startDate")),
        "endDate": trim.text(node.get("endDate")),
        "escrowAccount": trim.text(node.get("escrowAccount")),
    }
    counts = ("quota", "count", "evaluated", "approved", "rejected", "disputed")
    for count in (*counts, "invalidated", "flagged"):
        data[count] = whole_number(node.get(count))
    data["payments"] = _drop_empty(
        {
            kind: _payment(payments.get(kind), trim)
            for kind in ("submission", "evaluation", "approval", "rejection")
        }
    )
    return _drop_empty(data)


def entity_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """An entity; its status stays the chain's number, with a note."""
    metadata = as_dict(node.get("metadata"))
    accounts = [
        {"name": trim.text(a.get("name")), "address": trim.text(a.get("address"))}
        for a in trim.items(node.get("accounts"))
        if isinstance(a, dict)
    ]
    return _drop_empty(
        {
            "id": trim.text(node.get("id")),
            "type": trim.text(node.get("type")),
            "status": node.get("status"),
            "statusNote": ENTITY_STATUS_NOTE,
            "owner": trim.text(node.get("owner")),
            "startDate": trim.text(node.get("startDate")),
            "endDate": trim.text(node.get("endDate")),
            "verified": node.get("entityVerified"),
            "relayerNode": trim.text(node.get("relayerNode")),
            "externalId": trim.text(node.get("externalId")),
            "created": trim.text(metadata.get("created")),
            "updated": trim.text(metadata.get("updated")),
            "deactivated": metadata.get("deactivated"),
            "accounts": accounts,
        }
    )


def _entries(value: Any, trim: Trim, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        _drop_empty({k: trim.text(e.get(k), EXCERPT_LENGTH) for k in keys})
        for e in trim.items(value)
        if isinstance(e, dict)
    ]


def did_document_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """A DID document: controllers, keys (no key material), services, linked items."""
    metadata = as_dict(node.get("metadata"))
    controllers = [trim.text(c) for c in trim.items(node.get("controller"))]
    return _drop_empty(
        {
            "id": trim.text(node.get("id")),
            "controller": [c for c in controllers if c],
            "verificationMethod": _entries(
                node.get("verificationMethod"), trim, ("id", "type", "controller")
            ),
            "service": _entries(node.get("service"), trim, ("id", "type", "serviceEndpoint")),
            "linkedResource": _entries(
                node.get("linkedResource"),
                trim,
                ("id", "type", "description", "mediaType", "serviceEndpoint"),
            ),
            "linkedEntity": _entries(
                node.get("linkedEntity"), trim, ("id", "type", "relationship", "service")
            ),
            "alsoKnownAs": trim.text(node.get("alsoKnownAs")),
            "created": trim.text(metadata.get("created")),
            "updated": trim.text(metadata.get("updated")),
            "deactivated": metadata.get("deactivated"),
        }
    )


def transaction_signers(node: dict[str, Any]) -> set[str]:
    """Addresses that signed the transaction (its signers and fee payer)."""
    signers = node.get("transactionSignersByTransactionId")
    nodes = signers.get("nodes") if isinstance(signers, dict) else None
    found = {
        str(s["signerAddress"])
        for s in nodes or []
        if isinstance(s, dict) and isinstance(s.get("signerAddress"), str)
    }
    if isinstance(node.get("feePayer"), str):
        found.add(node["feePayer"])
    return found


def transaction_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """A transaction with its messages summarised (never raw)."""
    messages = node.get("messagesByTransactionHash")
    raw = messages.get("nodes") if isinstance(messages, dict) else None
    raw = raw if isinstance(raw, list) else []
    total = messages.get("totalCount") if isinstance(messages, dict) else None
    total = total if isinstance(total, int) else len(raw)
    shown = [
        summarize_message(m.get("typeUrl"), m.get("value"), trim)
        for m in raw[:MAX_TX_MESSAGES]
        if isinstance(m, dict)
    ]
    code = node.get("code")
    fee = as_dict(node.get("fee"))
    data: dict[str, Any] = {
        "hash": trim.text(node.get("hash")),
        "height": node.get("height"),
        "time": trim.text(node.get("time")),
        "code": code,
        "succeeded": code == 0,
        "memo": trim.text(node.get("memo"), EXCERPT_LENGTH) or None,
        "fee": coins(fee.get("amount"), trim),
        "messages": shown,
    }
    if total > len(shown):
        data["messageCount"] = total
        trim.cut = True
    return {k: v for k, v in data.items() if v is not None}


def token_balance_data(node: dict[str, Any], trim: Trim) -> dict[str, Any]:
    """A 1155 holding; amounts are whole units (the token module stores no decimals)."""
    token = as_dict(node.get("token"))
    token_class = as_dict(token.get("tokenClassByName"))
    return {
        "tokenId": trim.text(node.get("tokenId")),
        "name": trim.text(token.get("name")),
        "class": trim.text(token_class.get("class")),
        "collection": trim.text(token.get("collection")),
        "amount": whole_number(node.get("amount")),
        "retired": whole_number(node.get("retired")),
        "contractAddress": trim.text(token_class.get("contractAddress")),
    }
