"""Fixtures of the ``/mcp`` tests: an oracle served with its tools exposed over MCP.

The JavaScript client is the official TypeScript SDK, from the locked install the MCP
client tests keep (``packages/oracle-mcp/tests/mcp_client/js``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from oracle_core import (
    OraclePlugin,
    PluginContext,
    PluginManifest,
    PluginSubAgent,
    PluginTool,
    RuntimeContext,
    plugin_tool,
)
from oracle_server import OracleApp, create_oracle_app
from oracle_server.testing import OpenAIDouble, WeatherPlugin, serving
from oracle_ucan.testing import node_with_locked_packages

JS_DIR = Path(__file__).parents[2] / "packages" / "oracle-mcp" / "tests" / "mcp_client" / "js"

Serve = Callable[..., AbstractAsyncContextManager[tuple[OracleApp, str]]]


class Amount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str
    cents: int = 0


class LedgerPlugin(OraclePlugin):
    """Tools of every effect, one request-time tool and a sub-agent; ``runs`` records
    every handler that ran."""

    name = "ledger"
    version = "1.0.0"
    manifest = PluginManifest(
        title="Ledger", summary="Keeps accounts.", when_to_use=["money"], visibility="always"
    )

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any], str]] = []

    def _tool(self, name: str, effect: Any) -> PluginTool:
        @plugin_tool(name=name, description=f"The {name} tool.", args_schema=Amount, effect=effect)
        def handler(args: Amount, rt_ctx: RuntimeContext[Any]) -> str:
            self.runs.append((name, args.model_dump(), rt_ctx.user.did))
            return json.dumps({"tool": name, "account": args.account, "user": rt_ctx.user.did})

        return handler

    def get_tools(self, ctx: PluginContext[Any]) -> list[PluginTool]:
        return [
            self._tool("ledger_balance", "read"),
            self._tool("ledger_transfer", "write"),
            self._tool("ledger_wipe", "destructive"),
            self._tool("ledger_secret", "read"),
        ]

    def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        return [self._tool("ledger_statement", "read")]

    def get_sub_agents(self, ctx: PluginContext[Any]) -> list[PluginSubAgent]:
        return [
            PluginSubAgent(
                name="auditor", description="Audits.", system_prompt="You audit.", tools=[]
            )
        ]


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIDouble]:
    async with OpenAIDouble() as double:
        yield double


@pytest.fixture
def ledger() -> LedgerPlugin:
    return LedgerPlugin()


@pytest.fixture
def serve(tmp_path: Path, llm: OpenAIDouble, ledger: LedgerPlugin) -> Serve:
    """``async with serve(subscription_check=None, **env) as (app, base_url)``: the ledger
    oracle, ``/mcp`` on."""

    @asynccontextmanager
    async def run(
        subscription_check: Any = None, **overrides: str
    ) -> AsyncIterator[tuple[OracleApp, str]]:
        env = {
            "ORACLE_BACKEND": "local",
            "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
            "THROTTLE_LIMIT": "1000",
            "ORACLE_MCP_EXPOSE": "true",
            "ORACLE_TOOL_POLICY": '{"deny": ["ledger_secret"]}',
            **llm.env(),
            **overrides,
        }
        app = await create_oracle_app(
            {"name": "Ledger Oracle", "description": "Keeps accounts for its users."},
            plugins=[ledger, WeatherPlugin()],
            env=env,
            discover_entry_points=False,
            skip_graceful_shutdown=True,
            subscription_check=subscription_check,
        )
        async with serving(app) as base_url:
            yield app, base_url

    return run


@pytest.fixture(scope="session")
def node() -> str:
    return node_with_locked_packages(JS_DIR, code="mcp", purpose="the /mcp tests")
