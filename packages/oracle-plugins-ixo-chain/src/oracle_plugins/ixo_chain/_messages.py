"""Transaction messages as short summaries: message values are never returned raw."""

from __future__ import annotations

from typing import Any

from oracle_plugins.ixo_chain._text import json_excerpt
from oracle_plugins.ixo_chain._values import (
    Trim,
    coins,
    evaluation_status,
    whole_number,
)

__all__ = ["MAX_EXEC_MESSAGES", "summarize_message"]

MAX_EXEC_MESSAGES = 5

MSG_SEND = "/cosmos.bank.v1beta1.MsgSend"
MSG_TRANSFER_TOKEN = "/ixo.token.v1beta1.MsgTransferToken"
MSG_SUBMIT_CLAIM = "/ixo.claims.v1beta1.MsgSubmitClaim"
MSG_EVALUATE_CLAIM = "/ixo.claims.v1beta1.MsgEvaluateClaim"
MSG_EXEC = "/cosmos.authz.v1beta1.MsgExec"


def _field(value: dict[str, Any], *names: str) -> Any:
    """The first present of ``names`` (Blocksync decodes with camelCase, proto JSON
    uses snake_case)."""
    for name in names:
        if name in value:
            return value[name]
    return None


def _tokens(value: Any, trim: Trim) -> list[dict[str, Any]]:
    return [
        {"id": trim.text(_field(t, "id")), "amount": whole_number(_field(t, "amount"))}
        for t in trim.items(value)
        if isinstance(t, dict)
    ]


def _inner_summary(message: Any, trim: Trim) -> dict[str, Any]:
    """An authz inner message: ``{typeUrl, value}`` (Blocksync) or ``{"@type", …}``."""
    if not isinstance(message, dict):
        return {"type": "unknown", "excerpt": json_excerpt(message)}
    type_url = _field(message, "typeUrl", "type_url", "@type")
    inner_value = message.get("value", message)
    return summarize_message(type_url, inner_value, trim, nested=True)


def summarize_message(
    type_url: Any, value: Any, trim: Trim, *, nested: bool = False
) -> dict[str, Any]:
    """One message as its summary.

    ``MsgSend`` → ``{from, to, amount}``; ``MsgTransferToken`` → ``{from, to, tokens}``;
    ``MsgSubmitClaim``/``MsgEvaluateClaim`` → ``{claimId, collectionId, status?}``; an
    authz ``MsgExec`` → its first five inner summaries; anything else → a 240-character
    JSON excerpt. Every summary names its ``type``.
    """
    kind = type_url if isinstance(type_url, str) else ""
    body = value if isinstance(value, dict) else {}
    short = trim.text(kind.rsplit(".", 1)[-1]) or "unknown"
    if kind == MSG_SEND:
        return {
            "type": short,
            "from": trim.text(_field(body, "fromAddress", "from_address")),
            "to": trim.text(_field(body, "toAddress", "to_address")),
            "amount": coins(_field(body, "amount"), trim),
        }
    if kind == MSG_TRANSFER_TOKEN:
        return {
            "type": short,
            "from": trim.text(_field(body, "owner")),
            "to": trim.text(_field(body, "recipient")),
            "tokens": _tokens(_field(body, "tokens"), trim),
        }
    if kind in (MSG_SUBMIT_CLAIM, MSG_EVALUATE_CLAIM):
        summary: dict[str, Any] = {
            "type": short,
            "claimId": trim.text(_field(body, "claimId", "claim_id")),
            "collectionId": trim.text(_field(body, "collectionId", "collection_id")),
        }
        if kind == MSG_EVALUATE_CLAIM:
            summary["status"] = evaluation_status(_field(body, "status"))
        return summary
    if kind == MSG_EXEC and not nested:
        inner = _field(body, "msgs") or []
        summaries = [
            _inner_summary(m, trim)
            for m in (inner if isinstance(inner, list) else [])[:MAX_EXEC_MESSAGES]
        ]
        exec_summary: dict[str, Any] = {
            "type": short,
            "grantee": trim.text(_field(body, "grantee")),
            "messages": summaries,
        }
        if isinstance(inner, list) and len(inner) > MAX_EXEC_MESSAGES:
            exec_summary["messageCount"] = len(inner)
            trim.cut = True
        return exec_summary
    return {"type": trim.text(kind) or "unknown", "excerpt": json_excerpt(value)}
