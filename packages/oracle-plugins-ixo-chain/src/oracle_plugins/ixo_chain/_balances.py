"""``get_account_balances``: one page of bank balances, shown through the chain's metadata."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx

from oracle_plugins.ixo_chain._http import Budget, ReadFailure, read_with_retry
from oracle_plugins.ixo_chain._ids import CheckedId
from oracle_plugins.ixo_chain._text import clean_text

__all__ = [
    "PAGE_LIMIT",
    "DenomDisplay",
    "MetadataCache",
    "display_from_metadata",
    "format_amount",
    "read_balances",
    "sort_tokens",
]

UIXO = "uixo"
PAGE_LIMIT = 50
MAX_EXPONENT = 18
METADATA_CONCURRENCY = 8
METADATA_CACHE_SECONDS = 300.0
MAX_SYMBOL = 32
GATEWAY = "The chain REST gateway"
# Cosmos SDK's denom rule; anything else is never looked up.
_DENOM = re.compile(r"[a-zA-Z][a-zA-Z0-9/:._-]{2,127}")


@dataclass(frozen=True)
class DenomDisplay:
    """How a denom is shown."""

    symbol: str
    decimals: int
    verified: bool
    metadata_unavailable: bool = False
    truncated: bool = False


IXO = DenomDisplay("IXO", 6, True)


def _exponent(unit: dict[str, Any]) -> int | None:
    raw = unit.get("exponent", 0)  # proto3 JSON may omit a zero exponent
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    return None


def display_from_metadata(denom: str, metadata: Any) -> DenomDisplay:
    """Apply the display rules to one denom's bank metadata (``None``: none exists).

    Verified when the metadata lists its ``display`` unit in ``denom_units`` with an
    exponent of 0 to 18: that exponent is the decimals and the symbol is the metadata
    symbol, else the display unit upper-cased. Otherwise unverified, in base units,
    named by the full denom.
    """
    unverified = DenomDisplay(denom, 0, False)
    if not isinstance(metadata, dict):
        return unverified
    display = metadata.get("display")
    units = metadata.get("denom_units")
    if not isinstance(display, str) or not display or not isinstance(units, list):
        return unverified
    for unit in units:
        if not isinstance(unit, dict):
            continue
        raw_aliases = unit.get("aliases")
        aliases = raw_aliases if isinstance(raw_aliases, list) else []
        if unit.get("denom") != display and display not in aliases:
            continue
        exponent = _exponent(unit)
        if exponent is None or not 0 <= exponent <= MAX_EXPONENT:
            return unverified
        raw_symbol = metadata.get("symbol")
        if isinstance(raw_symbol, str) and raw_symbol.strip():
            symbol, cut = clean_text(raw_symbol, MAX_SYMBOL)
        else:
            symbol, cut = clean_text(display.upper(), MAX_SYMBOL)
        return DenomDisplay(symbol or denom, exponent, True, truncated=cut)
    return unverified


def format_amount(base_units: str, decimals: int) -> str:
    """``base_units`` in display units as a plain decimal string (9000000, 6 → ``"9"``)."""
    if not base_units.isdigit():
        return base_units
    whole, fraction = divmod(int(base_units), 10**decimals)
    digits = str(fraction).rjust(decimals, "0").rstrip("0") if decimals else ""
    return f"{whole}.{digits}" if digits else str(whole)


def sort_tokens(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """uixo first, then verified tokens, then by amount (largest first), then denom."""

    def key(token: dict[str, Any]) -> tuple[bool, bool, Decimal, str]:
        try:
            amount = Decimal(token["amount"])
        except ArithmeticError:
            amount = Decimal(0)
        return (token["denom"] != UIXO, not token["verified"], amount.copy_negate(), token["denom"])

    return sorted(tokens, key=key)


class MetadataCache:
    """Denom metadata (and its absence) per gateway, kept a few minutes."""

    def __init__(self, ttl_seconds: float = METADATA_CACHE_SECONDS) -> None:
        self._ttl = ttl_seconds
        self._entries: dict[tuple[str, str], tuple[float, Any]] = {}

    def get(self, gateway: str, denom: str) -> tuple[bool, Any]:
        """``(hit, metadata)``; ``metadata`` is ``None`` for a denom known to have none."""
        entry = self._entries.get((gateway, denom))
        if entry is None or entry[0] < time.monotonic():
            return False, None
        return True, entry[1]

    def put(self, gateway: str, denom: str, metadata: Any) -> None:
        """Remember a read that answered (found or not found)."""
        self._entries[(gateway, denom)] = (time.monotonic() + self._ttl, metadata)


_UNAVAILABLE = object()


async def _read_metadata(
    client: httpx.AsyncClient,
    gateway: str,
    denom: str,
    cache: MetadataCache,
    logger: logging.Logger,
) -> Any:
    """The denom's metadata, ``None`` when it has none, ``_UNAVAILABLE`` when unread."""
    hit, cached = cache.get(gateway, denom)
    if hit:
        return cached
    url = f"{gateway}/cosmos/bank/v1beta1/denoms_metadata/{quote(denom, safe='')}"
    try:
        response = await client.get(url)
    except httpx.TransportError as exc:
        logger.warning("[ixo-chain] denom metadata attempt 1 failed: %s", type(exc).__name__)
        return _UNAVAILABLE
    # The SDK answers NotFound (HTTP 404, gRPC code 5) for a denom without metadata.
    if response.status_code == 404:
        cache.put(gateway, denom, None)
        return None
    if response.status_code != 200:
        logger.warning("[ixo-chain] denom metadata attempt 1 failed: %s", response.status_code)
        return _UNAVAILABLE
    try:
        metadata = response.json().get("metadata")
    except (ValueError, AttributeError):
        logger.warning("[ixo-chain] denom metadata attempt 1 failed: invalid JSON")
        return _UNAVAILABLE
    cache.put(gateway, denom, metadata)
    return metadata


async def _displays(
    client: httpx.AsyncClient,
    gateway: str,
    denoms: list[str],
    cache: MetadataCache,
    budget: Budget,
    logger: logging.Logger,
) -> dict[str, DenomDisplay]:
    """Displays of non-uixo denoms; unread ones are unverified with metadataUnavailable."""
    limit = asyncio.Semaphore(METADATA_CONCURRENCY)

    async def one(denom: str) -> Any:
        async with limit:
            return await _read_metadata(client, gateway, denom, cache, logger)

    lookups = {d: asyncio.create_task(one(d)) for d in denoms if _DENOM.fullmatch(d)}
    displays = {d: DenomDisplay(d, 0, False) for d in denoms if d not in lookups}
    done: set[asyncio.Task[Any]] = set()
    if lookups:
        done, pending = await asyncio.wait(lookups.values(), timeout=max(0, budget.remaining()))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for _ in pending:
            logger.warning("[ixo-chain] denom metadata attempt 1 failed: budget exhausted")
    for denom, task in lookups.items():
        result = task.result() if task in done and not task.cancelled() else _UNAVAILABLE
        if result is _UNAVAILABLE:
            displays[denom] = DenomDisplay(denom, 0, False, metadata_unavailable=True)
        else:
            displays[denom] = display_from_metadata(denom, result)
    return displays


async def read_balances(
    client: httpx.AsyncClient,
    gateway: str,
    address: CheckedId,
    *,
    cache: MetadataCache,
    budget: Budget,
    logger: logging.Logger,
) -> dict[str, Any]:
    """Tokens of one page (≤ 50 denoms) of the account's balances.

    Returns:
        ``{"tokens": [...], "moreDenoms": bool, "truncated": bool}``.

    Raises:
        ReadFailure: The balances could not be read (after the retry).
    """
    url = f"{gateway}/cosmos/bank/v1beta1/balances/{address.value}"
    response = await read_with_retry(
        lambda: client.get(url, params={"pagination.limit": str(PAGE_LIMIT)}),
        read="balances",
        service=GATEWAY,
        budget=budget,
        logger=logger,
    )
    try:
        if response.status_code != 200:
            raise ValueError(str(response.status_code))
        body = response.json()
        balances = body["balances"]
        if not isinstance(balances, list):
            raise TypeError("balances")
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("[ixo-chain] balances attempt 1 failed: %s", type(exc).__name__)
        raise ReadFailure(
            "upstream_error", f"{GATEWAY} gave an answer that is not a balance list.", False
        ) from exc
    coins = [
        (str(c["denom"]), str(c["amount"]))
        for c in balances[:PAGE_LIMIT]
        if isinstance(c, dict) and isinstance(c.get("denom"), str)
    ]
    others = sorted({denom for denom, _ in coins if denom != UIXO})
    displays = await _displays(client, gateway, others, cache, budget, logger)
    displays[UIXO] = IXO
    tokens = []
    for denom, amount in coins:
        shown = displays[denom]
        token: dict[str, Any] = {
            "denom": denom,
            "symbol": shown.symbol,
            "decimals": shown.decimals,
            "verified": shown.verified,
            "amountBaseUnits": amount,
            "amount": format_amount(amount, shown.decimals),
        }
        if shown.metadata_unavailable:
            token["metadataUnavailable"] = True
        tokens.append(token)
    pagination = body.get("pagination") if isinstance(body, dict) else None
    next_key = pagination.get("next_key") if isinstance(pagination, dict) else None
    return {
        "tokens": sort_tokens(tokens),
        "moreDenoms": bool(next_key) or len(balances) > PAGE_LIMIT,
        "truncated": any(displays[d].truncated for d, _ in coins),
    }
