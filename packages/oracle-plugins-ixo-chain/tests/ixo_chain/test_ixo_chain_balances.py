"""get_account_balances against the Cosmos REST double: metadata rules, defaults, failures."""

from __future__ import annotations

import logging
from decimal import Decimal, localcontext
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle_core import UserInfo
from oracle_core.testing import create_test_runtime
from oracle_plugins.ixo_chain import IxoChainPlugin
from oracle_plugins.ixo_chain._balances import display_from_metadata, format_amount, sort_tokens

if TYPE_CHECKING:
    from tests.ixo_chain.conftest import Boot, ChainDouble, Invoke


def by_denom(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["denom"]: t for t in answer["tokens"]}


async def test_the_users_balances_through_the_chains_metadata(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    assert answer["ok"] is True
    assert answer["network"] == "testnet"
    assert answer["source"] == "chain"
    assert answer["fetchedAt"].endswith("Z")
    assert answer["address"] == chain.alice
    assert answer["subject"] == "user"
    assert "moreDenoms" not in answer
    tokens = by_denom(answer)
    assert tokens["uixo"] == {
        "denom": "uixo",
        "symbol": "IXO",
        "decimals": 6,
        "verified": True,
        "amountBaseUnits": "9000000",
        "amount": "9",
    }
    assert tokens["upay"]["symbol"] == "PAY"
    assert tokens["upay"]["decimals"] == 6
    assert tokens["upay"]["verified"] is True
    assert tokens["upay"]["amount"] == "5.74"
    # IBC metadata lists only the base unit: unverified, in base units, full denom.
    assert tokens[chain.ibc_usdc] == {
        "denom": chain.ibc_usdc,
        "symbol": chain.ibc_usdc,
        "decimals": 0,
        "verified": False,
        "amountBaseUnits": "2500000",
        "amount": "2500000",
    }
    # No metadata at all: unverified, but the metadata was read (not unavailable).
    assert tokens["unometa"]["verified"] is False
    assert "metadataUnavailable" not in tokens["unometa"]
    # The metadata route failed: unverified and flagged as maybe verified.
    assert tokens["ubroken"]["verified"] is False
    assert tokens["ubroken"]["metadataUnavailable"] is True
    assert [t["denom"] for t in answer["tokens"]] == [
        "uixo",
        "upay",
        chain.ibc_usdc,
        "unometa",
        "ubroken",
    ]


async def test_uixo_is_never_looked_up_and_ibc_denoms_are_url_encoded(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    async with boot() as runtime:
        await invoke(runtime, "get_account_balances", {})
    looked_up = [p for p in chain.rest_paths if "denoms_metadata" in p]
    assert not any(p.endswith("/uixo") for p in looked_up)
    assert f"/rest/cosmos/bank/v1beta1/denoms_metadata/{chain.ibc_usdc.replace('/', '%2F')}" in (
        looked_up
    )
    balance_reads = [p for p in chain.rest_paths if "/balances/" in p]
    assert balance_reads == [f"/rest/cosmos/bank/v1beta1/balances/{chain.alice}"]


async def test_more_than_fifty_denoms_reads_one_page(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {"address": chain.whale})
    assert answer["moreDenoms"] is True
    assert len(answer["tokens"]) == 50
    assert answer["subject"] == "other"
    tok = by_denom(answer)["utok03"]
    assert (tok["symbol"], tok["decimals"], tok["amount"]) == ("TOK", 3, "1.003")
    # Verified first, then by amount, largest first.
    assert answer["tokens"][0]["denom"] == "utok03"
    assert answer["tokens"][1]["denom"] == "utok49"


async def test_an_empty_account_is_an_answer(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    async with boot() as runtime:
        answer = await invoke(
            runtime, "get_account_balances", {"address": f"did:ixo:{chain.empty}"}
        )
    assert answer["ok"] is True
    assert answer["tokens"] == []
    assert answer["address"] == chain.empty


@pytest.mark.parametrize(
    "did", ["did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "did:web:example.com"]
)
async def test_a_user_without_an_ixo_address_must_give_one(
    boot: Boot, chain: ChainDouble, invoke: Invoke, did: str
) -> None:
    async with boot(did) as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
        explicit = await invoke(runtime, "get_account_balances", {"address": chain.alice})
    assert answer == {
        "ok": False,
        "network": "testnet",
        "source": "chain",
        "fetchedAt": answer["fetchedAt"],
        "reason": "invalid_input",
        "detail": "the user has no IXO account address; give one.",
        "retryable": False,
    }
    balance_reads = [p for p in chain.rest_paths if "/balances/" in p]
    assert balance_reads == [f"/rest/cosmos/bank/v1beta1/balances/{chain.alice}"]
    assert explicit["ok"] is True
    assert explicit["subject"] == "other"


async def test_a_malformed_address_never_reaches_the_gateway(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    bad = chain.alice[:-1] + ("q" if chain.alice[-1] != "q" else "p")
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {"address": bad})
        traversal = await invoke(runtime, "get_account_balances", {"address": "../../admin"})
    assert answer["reason"] == traversal["reason"] == "invalid_input"
    assert "checksum" in answer["detail"]
    assert chain.rest_paths == []


async def test_one_retry_then_the_answer(
    boot: Boot, chain: ChainDouble, invoke: Invoke, caplog: pytest.LogCaptureFixture
) -> None:
    chain.fail_next = [502]
    caplog.set_level(logging.WARNING)
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    assert answer["ok"] is True
    assert "[ixo-chain] balances attempt 1 failed: 502" in caplog.messages
    assert not any(chain.alice in m for m in caplog.messages)


async def test_two_failures_fail_the_whole_answer(
    boot: Boot, chain: ChainDouble, invoke: Invoke, caplog: pytest.LogCaptureFixture
) -> None:
    chain.fail_next = [503, 502]
    caplog.set_level(logging.WARNING)
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    assert answer["ok"] is False
    assert answer["network"] == "testnet"
    assert answer["reason"] == "upstream_error"
    assert answer["retryable"] is True
    assert "HTTP 502" in answer["detail"]
    failures = [m for m in caplog.messages if m.startswith("[ixo-chain] balances attempt")]
    assert failures == [
        "[ixo-chain] balances attempt 1 failed: 503",
        "[ixo-chain] balances attempt 2 failed: 502",
    ]


async def test_rate_limiting_is_its_own_reason(
    boot: Boot, chain: ChainDouble, invoke: Invoke
) -> None:
    chain.fail_next = [429, 429]
    async with boot() as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    assert (answer["reason"], answer["retryable"]) == ("rate_limited", True)


async def test_the_budget_cuts_slow_metadata_reads(
    boot: Boot, chain: ChainDouble, invoke: Invoke, caplog: pytest.LogCaptureFixture
) -> None:
    chain.metadata_delay["upay"] = 5.0
    caplog.set_level(logging.WARNING)
    async with boot(IXO_CHAIN_TOOL_BUDGET_MS="700") as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    upay = by_denom(answer)["upay"]
    assert upay["verified"] is False
    assert upay["metadataUnavailable"] is True
    assert upay["amount"] == "5740000"
    assert "[ixo-chain] denom metadata attempt 1 failed: budget exhausted" in caplog.messages


async def test_without_network_nor_gateway_nothing_is_contacted(
    chain: ChainDouble, invoke: Invoke
) -> None:
    user = UserInfo(did=f"did:ixo:{chain.alice}")
    async with await create_test_runtime(plugins=[IxoChainPlugin()], user=user) as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    # A local oracle without NETWORK contacts no public gateway.
    assert answer["network"] == "unknown"
    assert (answer["ok"], answer["reason"], answer["retryable"]) == (
        False,
        "upstream_error",
        False,
    )
    assert "IXO_CHAIN_REST_URL" in answer["detail"]


def test_display_rules() -> None:
    upay = {
        "display": "pay",
        "symbol": "",
        "denom_units": [{"denom": "upay"}, {"denom": "pay", "exponent": 6}],
    }
    shown = display_from_metadata("upay", upay)
    assert (shown.symbol, shown.decimals, shown.verified) == ("PAY", 6, True)
    too_big = {"display": "x", "denom_units": [{"denom": "x", "exponent": 19}]}
    assert display_from_metadata("ux", too_big).verified is False
    unlisted = {"display": "x", "denom_units": [{"denom": "ux", "exponent": 0}]}
    assert display_from_metadata("ux", unlisted).symbol == "ux"
    assert display_from_metadata("ux", None).verified is False
    loud = {"display": "x", "symbol": "A\u202eB" + "C" * 60, "denom_units": [{"denom": "x"}]}
    cleaned = display_from_metadata("ux", loud)
    assert "\u202e" not in cleaned.symbol
    assert len(cleaned.symbol) == 32
    assert cleaned.truncated is True


@given(st.integers(min_value=0, max_value=10**30), st.integers(min_value=0, max_value=18))
def test_amounts_convert_exactly(base: int, decimals: int) -> None:
    shown = format_amount(str(base), decimals)
    with localcontext(prec=200):
        assert Decimal(shown) == Decimal(base) / Decimal(10**decimals)
    assert not shown.endswith(".")
    assert not (("." in shown) and shown.endswith("0"))


def test_sort_order() -> None:
    tokens = [
        {"denom": "b", "verified": False, "amount": "100"},
        {"denom": "a", "verified": True, "amount": "1"},
        {"denom": "uixo", "verified": True, "amount": "0"},
        {"denom": "c", "verified": True, "amount": "2.5"},
    ]
    assert [t["denom"] for t in sort_tokens(tokens)] == ["uixo", "c", "a", "b"]
