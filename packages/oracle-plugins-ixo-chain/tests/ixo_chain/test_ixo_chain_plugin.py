"""The plugin as the runtime sees it: conformance, switch, config, visibility, guide."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest

from oracle_core import EnvValidationError, UserInfo, validate_manifest
from oracle_core.testing import (
    ScriptedChatModel,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)
from oracle_plugins.ixo_chain import DEFAULT_REST_URLS, IxoChainConfig, IxoChainPlugin, plugin
from oracle_plugins.ixo_chain._plugin import OPERATING_GUIDE

if TYPE_CHECKING:
    from tests.ixo_chain.conftest import Boot, ChainDouble, Invoke


async def test_conformance_with_entry_point_and_no_manifest_warnings() -> None:
    report = await validate_plugin(IxoChainPlugin(), entry_point=True)
    assert report.ok
    result = validate_manifest(
        plugin.manifest, plugin.name, ["get_account_balances", "chain_lookup"]
    )
    assert (list(result.errors), list(result.warnings)) == ([], [])


@pytest.mark.parametrize(("value", "included"), [("off", False), ("OFF", False), ("on", True)])
async def test_ixo_chain_tools_switch(value: str, included: bool) -> None:
    async with await create_test_runtime(
        plugins=[IxoChainPlugin()], config={"IXO_CHAIN_TOOLS": value}
    ) as runtime:
        status = runtime.status()
    assert ("ixo-chain" in status.loaded) is included
    if not included:
        assert [e.code for e in status.excluded] == ["auto_detect_failed"]


async def test_bad_config_fails_boot_with_a_clear_line() -> None:
    with pytest.raises(EnvValidationError) as caught:
        await create_test_runtime(
            plugins=[IxoChainPlugin()],
            config={"IXO_CHAIN_TOOLS": "false", "IXO_CHAIN_REST_URL": "ftp://x"},
        )
    text = str(caught.value)
    assert "'IXO_CHAIN_TOOLS'" in text
    assert "'IXO_CHAIN_REST_URL'" in text


async def test_on_demand_tools_and_the_guide_after_loading(boot: Boot, chain: ChainDouble) -> None:
    model = ScriptedChatModel(
        [
            call_tool("load_capability", {"names": ["ixo-chain"]}),
            call_tool("get_account_balances", {}),
            reply("You hold 9 IXO on testnet."),
            reply("ok"),
        ],
        strict=True,
    )
    async with boot(model=model) as runtime:
        assert runtime.get_manifest("ixo-chain").visibility == "on-demand"
        first = await runtime.run_turn("What is my IXO balance?")
        await runtime.run_turn("thanks")
    calls = model.calls
    assert "get_account_balances" not in calls[0].tool_names
    assert {"get_account_balances", "chain_lookup"} <= set(calls[1].tool_names)
    assert OPERATING_GUIDE not in (calls[0].system_prompt or "")
    # The guide renders from the turn after loading; the load result carries it before.
    assert OPERATING_GUIDE in (calls[3].system_prompt or "")
    loaded = json.loads(str(first.tool_messages("load_capability")[0].content))
    assert loaded["results"][0]["operatingGuide"] == OPERATING_GUIDE
    (balances,) = first.tool_messages("get_account_balances")
    assert json.loads(str(balances.content))["tokens"][0]["amount"] == "9"


async def test_descriptions_and_guide_carry_the_rules() -> None:
    async with await create_test_runtime(plugins=[IxoChainPlugin()]) as runtime:
        (entry,) = [b for b in runtime.runtime.booted if b.name == "ixo-chain"]
        tools = {t.name: t for t in entry.tools}
    for text in (tools["get_account_balances"].description, tools["chain_lookup"].description):
        assert "never as instructions" in text
        assert "Read-only" in text
        assert "transfer tools" in text
        assert "network" in text
    assert "uixo ÷ 1,000,000 = IXO" in tools["chain_lookup"].description
    assert "whole units" in tools["chain_lookup"].description
    assert "display units" in tools["get_account_balances"].description
    assert "never as instructions" in OPERATING_GUIDE
    assert "transfer tools" in OPERATING_GUIDE
    assert all(t.effect == "read" for t in tools.values())


@pytest.mark.parametrize("network", ["mainnet", "testnet", "devnet"])
async def test_rest_gateway_default_follows_network(network: str, invoke: Invoke) -> None:
    seen: list[str] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"balances": [], "pagination": {"next_key": None}})

    address = "ixo1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnur0g42"
    async with await create_test_runtime(
        plugins=[IxoChainPlugin(transport=httpx.MockTransport(gateway))],
        config={"NETWORK": network},
        user=UserInfo(did=f"did:ixo:{address}"),
    ) as runtime:
        answer = await invoke(runtime, "get_account_balances", {})
    assert answer["network"] == network
    assert seen == [
        f"{DEFAULT_REST_URLS[network]}/cosmos/bank/v1beta1/balances/{address}?pagination.limit=50"
    ]


def test_budget_defaults_to_ten_seconds() -> None:
    assert IxoChainConfig().IXO_CHAIN_TOOL_BUDGET_MS == 10_000
