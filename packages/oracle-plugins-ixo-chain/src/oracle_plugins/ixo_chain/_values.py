"""Small converters from Blocksync values to answer values, recording what was cut."""

from __future__ import annotations

from typing import Any

from oracle_plugins.ixo_chain._text import clean_text

__all__ = [
    "CLAIM_STATUS_CODES",
    "Trim",
    "as_dict",
    "coins",
    "collection_state",
    "cw20_coins",
    "cw1155_payment",
    "evaluation_status",
    "payment_status",
    "whole_number",
]

MAX_ID = 160
MAX_LIST = 10

# ixo.claims EvaluationStatus; INVALIDATED and FLAGGED follow DISPUTED in the chain's
# later versions (Blocksync counts both per collection).
EVALUATION_STATUS = ("pending", "approved", "rejected", "disputed", "invalidated", "flagged")
CLAIM_STATUS_CODES = {word: code for code, word in enumerate(EVALUATION_STATUS)}
COLLECTION_STATE = ("open", "paused", "closed")
PAYMENT_STATUS = (
    "no_payment",
    "promised",
    "authorized",
    "guaranteed",
    "paid",
    "failed",
    "disputed",
)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


class Trim:
    """Cuts chain text and lists to size and remembers whether anything was cut."""

    def __init__(self) -> None:
        self.cut = False

    def text(self, value: Any, limit: int = MAX_ID) -> str | None:
        """Cleaned text, ``None`` for a missing or non-text value."""
        if value is None or isinstance(value, dict | list):
            return None
        text, cut = clean_text(str(value), limit)
        self.cut = self.cut or cut
        return text

    def items(self, value: Any, limit: int = MAX_LIST) -> list[Any]:
        """The first ``limit`` entries of a list (empty for anything else)."""
        if not isinstance(value, list):
            return []
        if len(value) > limit:
            self.cut = True
        return value[:limit]


def _word(table: tuple[str, ...], value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < len(table):
        return table[value]
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isdigit():
            return _word(table, int(text))
        text = text.removeprefix("evaluation_status_").removeprefix("collection_state_")
        if text == "gauranteed":  # the chain's own spelling
            return "guaranteed"
        return text if text in table else None
    return None


def evaluation_status(value: Any) -> str:
    """A claim/evaluation status as a word (``unknown`` for a value the chain added later)."""
    return _word(EVALUATION_STATUS, value) or "unknown"


def collection_state(value: Any) -> str:
    """A collection state as ``open``, ``paused`` or ``closed``."""
    return _word(COLLECTION_STATE, value) or "unknown"


def payment_status(value: Any) -> str:
    """A claim payment status as a word."""
    return _word(PAYMENT_STATUS, value) or "unknown"


def whole_number(value: Any) -> Any:
    """Counts Blocksync sends as BigFloat strings (``"12"``), as integers."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if text.endswith(".0") and text[:-2].isdigit():
            return int(text[:-2])
    return value


def _amount(value: Any) -> str:
    return str(value) if isinstance(value, int | str) and not isinstance(value, bool) else "?"


def coins(value: Any, trim: Trim) -> list[dict[str, str]]:
    """Bank coins as ``{denom, amountBaseUnits}`` (never converted)."""
    out = []
    for coin in trim.items(value):
        if isinstance(coin, dict) and coin.get("denom") is not None:
            out.append(
                {
                    "denom": trim.text(coin.get("denom")) or "?",
                    "amountBaseUnits": _amount(coin.get("amount")),
                }
            )
    return out


def cw20_coins(value: Any, trim: Trim) -> list[dict[str, str]]:
    """cw20 payments as ``{denom, amountBaseUnits}``; the denom is the token contract."""
    entries = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    out = []
    for entry in trim.items(entries):
        if isinstance(entry, dict):
            contract = entry.get("address") or entry.get("contractAddress")
            out.append(
                {
                    "denom": trim.text(contract) or "?",
                    "amountBaseUnits": _amount(entry.get("amount")),
                }
            )
    return out


def cw1155_payment(value: Any, trim: Trim) -> dict[str, Any] | None:
    """A cw1155 payment; 1155 tokens are whole units."""
    if not isinstance(value, dict):
        return None
    return {
        "contractAddress": trim.text(value.get("address") or value.get("contractAddress")),
        "tokenId": trim.text(value.get("tokenId") or value.get("token_id")),
        "amount": whole_number(value.get("amount")),
    }
