"""Plugin tokens: what each bundled plugin adds to the first model call of a new session.

The system prompt and the visible tool schemas of the first model call (o200k_base, counted
as in ``first_turn_tokens.py``) are measured for a runtime of core only and for core plus
one bundled plugin, in the states that change them: ixo-chain on-demand and on the turn
after ``load_capability``; user-preferences with nothing saved and with preferences saved
by its tool; memory's embedded backend (SQLite in a temporary directory) empty and with
seven facts stored by its tool, and its remote backend on the Memory Engine double (real
MCP on loopback, UCAN-authorised); domain-indexer without and with the client's current
entity DID; then the four together. Every comparison keeps the turn state: core renders
the "Current Entity" section by itself, so that row's baseline carries the same DID.

The chain and indexer clients answer from an httpx transport that counts requests: none
may reach those services on these turns.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage

from benchmarks.first_turn_tokens import schema_tokens
from benchmarks.synthetic import synthetic_plugin
from oracle_core import (
    BuiltAgent,
    OraclePlugin,
    SessionInfo,
    TurnRequest,
    UcanAccessor,
    UserInfo,
    count_tokens,
)
from oracle_core.testing import (
    ScriptedChatModel,
    TestRuntime,
    call_tool,
    call_tools,
    create_test_runtime,
    reply,
)
from oracle_plugins.composio import ComposioPlugin
from oracle_plugins.composio.testing import ComposioWorkerDouble
from oracle_plugins.domain_indexer import DomainIndexerPlugin
from oracle_plugins.firecrawl import FirecrawlPlugin
from oracle_plugins.firecrawl.testing import FirecrawlDouble
from oracle_plugins.ixo_chain import IxoChainPlugin
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_plugins.sandbox import SandboxPlugin
from oracle_plugins.sandbox.testing import SandboxDouble
from oracle_plugins.skills import SkillsPlugin
from oracle_plugins.skills.testing import SkillsRegistryDouble
from oracle_plugins.user_preferences import TOOL_NAME as SET_PREFERENCES
from oracle_plugins.user_preferences import UserPreferencesPlugin
from oracle_plugins.vfs import VfsPlugin
from oracle_server import IxoUcanService
from oracle_server.testing import LoopbackServer
from oracle_ucan import Ed25519Signer, delegate

ORACLE = {"name": "Token Benchmark Oracle", "org": "Example Org", "description": "a helper"}
FIXED_TIME = "2026-01-01T09:00:00+00:00"
ENTITY = "did:ixo:entity:2f22535f8b179a51d77a0e302e68d35d"
ORACLE_ENTITY = "did:ixo:entity:0a1b2c3d4e5f60718293a4b5c6d7e8f9"
USER_ROOM = "!oracle-and-user:localhost"
UNUSED_URL = "http://127.0.0.1:9"  # the discard port: never contacted on these turns

PREFERENCES = {
    "agentName": "Nova",
    "language": "pt-BR",
    "tone": "warm",
    "customInstructions": "Keep answers short and end with one follow-up question.",
}
FACTS = [
    "My name is Ada and I live in Lisbon.",
    "I work as a data engineer at a solar energy cooperative.",
    "I use Python and PostgreSQL to build the cooperative's meter-data pipeline.",
    "My goal is to speak fluent Portuguese by next summer.",
    "I love hiking in Sintra and listening to jazz.",
    "My partner Grace and I have a dog named Rex.",
    "I prefer short answers with a worked example.",
]
ADD_MEMORY = "memory-engine__add_memory"

Plugins = Callable[["Services"], list[OraclePlugin]]


@dataclass
class Services:
    """Counts requests to the chain and the indexer; the Memory Engine double's env."""

    requests: list[str] = field(default_factory=list)
    memory_env: dict[str, str] = field(default_factory=dict)
    ucan: UcanAccessor | None = None

    def transport(self) -> httpx.MockTransport:
        def refuse(request: httpx.Request) -> httpx.Response:
            self.requests.append(str(request.url))
            return httpx.Response(503)

        return httpx.MockTransport(refuse)


@dataclass(frozen=True)
class Case:
    """One row: ``plugins`` against ``base`` (core only unless given), in one state."""

    label: str
    plugins: Plugins
    base: Plugins = lambda _: []
    base_label: str = "core"
    seed: tuple[AIMessage, ...] = ()
    state: Mapping[str, Any] = field(default_factory=dict)
    load: str | None = None
    remote_memory: bool = False
    """The remote services' doubles in the environment (memory, sandbox, skills, web)."""
    expect: str | None = None
    """Text the plugin run's prompt must hold (proof the seed or load took effect)."""


def ixo(s: Services) -> list[OraclePlugin]:
    return [IxoChainPlugin(transport=s.transport())]


def prefs(s: Services) -> list[OraclePlugin]:
    return [UserPreferencesPlugin()]


def memory(s: Services) -> list[OraclePlugin]:
    return [MemoryPlugin()]


def indexer(s: Services) -> list[OraclePlugin]:
    return [DomainIndexerPlugin(transport=s.transport())]


def sandbox(s: Services) -> list[OraclePlugin]:
    return [SandboxPlugin()]


def sandbox_skills(s: Services) -> list[OraclePlugin]:
    return [SandboxPlugin(), SkillsPlugin()]


def firecrawl(s: Services) -> list[OraclePlugin]:
    return [FirecrawlPlugin()]


def composio(s: Services) -> list[OraclePlugin]:
    return [ComposioPlugin()]


def vfs(s: Services) -> list[OraclePlugin]:
    return [VfsPlugin()]


def sandbox_vfs(s: Services) -> list[OraclePlugin]:
    return [SandboxPlugin(), VfsPlugin()]


def all_four(s: Services) -> list[OraclePlugin]:
    return [*ixo(s), *prefs(s), *memory(s), *indexer(s)]


def other_on_demand(s: Services) -> list[OraclePlugin]:
    return [synthetic_plugin(0, "on-demand")]


SAVE_PREFERENCES = call_tool(SET_PREFERENCES, PREFERENCES)
ADD_FACTS = call_tools(
    [(ADD_MEMORY, {"name": f"Fact {i}", "content": f}) for i, f in enumerate(FACTS)]
)
SAVE_BOTH = call_tools(
    [(SET_PREFERENCES, PREFERENCES)]
    + [(ADD_MEMORY, {"name": f"Fact {i}", "content": f}) for i, f in enumerate(FACTS)]
)
WITH_ENTITY = {"current_entity_did": ENTITY}

PREFERENCES_SECTION = "## User Preferences"
FACTS_SECTION = "## What You Know About the User"
GUIDE = IxoChainPlugin.operating_guide or ""
ENTITY_MODE = "Entity context:"

CASES = [
    Case("ixo-chain on-demand, the only one", ixo),
    Case(
        "ixo-chain on-demand, next to another",
        lambda s: [*other_on_demand(s), *ixo(s)],
        base=other_on_demand,
        base_label="core + 1 on-demand",
    ),
    Case(
        "ixo-chain loaded (turn after loading)",
        ixo,
        base=ixo,
        base_label="ixo-chain unloaded",
        load="ixo-chain",
        expect=GUIDE,
    ),
    Case("user-preferences, none saved", prefs),
    Case("user-preferences, 4 saved", prefs, seed=(SAVE_PREFERENCES,), expect=PREFERENCES_SECTION),
    Case("memory embedded, no facts", memory),
    Case("memory embedded, 7 facts", memory, seed=(ADD_FACTS,), expect=FACTS_SECTION),
    Case("memory remote (double), no facts", memory, remote_memory=True),
    Case(
        "memory remote (double), 7 facts",
        memory,
        seed=(ADD_FACTS,),
        remote_memory=True,
        expect=FACTS_SECTION,
    ),
    Case("domain-indexer, no entity", indexer),
    Case(
        "domain-indexer, entity DID",
        indexer,
        base_label="core + entity DID",
        state=WITH_ENTITY,
        expect=ENTITY_MODE,
    ),
    Case("sandbox (hosted double)", sandbox, remote_memory=True),
    Case(
        "skills, next to sandbox",
        sandbox_skills,
        base=sandbox,
        base_label="sandbox",
        remote_memory=True,
    ),
    Case("firecrawl on-demand, the only one", firecrawl, remote_memory=True),
    Case(
        "firecrawl loaded (turn after loading)",
        firecrawl,
        base=firecrawl,
        base_label="firecrawl unloaded",
        load="firecrawl",
        remote_memory=True,
    ),
    Case("composio on-demand, the only one", composio, remote_memory=True),
    Case(
        "composio loaded (turn after loading)",
        composio,
        base=composio,
        base_label="composio unloaded",
        load="composio",
        remote_memory=True,
    ),
    Case("vfs embedded (local mode)", vfs),
    Case(
        "vfs next to sandbox (+ bridge tools)",
        sandbox_vfs,
        base=sandbox,
        base_label="sandbox",
        remote_memory=True,
    ),
    Case("all four, nothing saved", all_four),
    Case(
        "all four, 4 prefs, 7 facts, entity DID",
        all_four,
        base_label="core + entity DID",
        seed=(SAVE_BOTH,),
        state=WITH_ENTITY,
        expect=FACTS_SECTION,
    ),
]


def env_for(data: Path, services: Services, *, remote_memory: bool) -> dict[str, str]:
    """The plugins' environment: local SQLite, loopback URLs that nothing contacts."""
    env = {
        "SQLITE_DATABASE_PATH": str(data),
        "IXO_CHAIN_REST_URL": UNUSED_URL,
        "BLOCKSYNC_GRAPHQL_URL": f"{UNUSED_URL}/graphql",
        "DOMAIN_INDEXER_URL": UNUSED_URL,
        "MEMORY_BACKEND": "embedded",
        # The remote memory backend reads the user context only for an oracle entity.
        "ORACLE_ENTITY_DID": ORACLE_ENTITY,
    }
    if remote_memory:
        del env["MEMORY_BACKEND"]
        env.update(services.memory_env)
    return env


async def run(
    runtime: TestRuntime, session: str, text: str, state: Mapping[str, Any]
) -> BuiltAgent:
    """One turn on ``session``; returns its build (the tools bound for it)."""
    user = UserInfo(did=runtime.user.did, timezone="UTC", current_time=FIXED_TIME)
    built = await runtime.runtime.build_agent(
        TurnRequest(user=user, session=SessionInfo(id=session), message=text, state=state)
    )
    await built.agent.ainvoke(built.input, config=built.config, context=built.context)
    return built


async def first_call(
    runtime: TestRuntime,
    model: ScriptedChatModel,
    *,
    state: Mapping[str, Any],
    seed: bool,
    load: bool,
) -> dict[str, Any]:
    """Prompt and visible-schema tokens of the first model call of a new session.

    With ``seed`` a turn on another session runs the model's first scripted step first;
    with ``load`` the figures are those of the turn after the one that loaded.
    """
    if seed:
        await run(runtime, "seed", "Please remember this.", {})
    start = len(model.calls)
    built = await run(runtime, "t", "hello", state)
    if load:
        start = len(model.calls)
        built = await run(runtime, "t", "And now?", state)
    call = model.calls[start]
    visible = set(call.tool_names)
    prompt = count_tokens(call.system_prompt or "")
    tools = schema_tokens([t for t in built.tools if t.name in visible])
    return {
        "prompt": prompt,
        "tools": tools,
        "total": prompt + tools,
        "visible": sorted(visible),
        "system_prompt": call.system_prompt or "",
    }


async def measure_runtime(
    plugins: list[OraclePlugin],
    data: Path,
    services: Services,
    user: UserInfo,
    case: Case,
    *,
    with_plugin: bool,
) -> dict[str, Any]:
    """Boot ``plugins``, drive the case's turns (the seed and load only ``with_plugin``)."""
    seed = with_plugin and bool(case.seed)
    load = with_plugin and case.load is not None
    steps: list[AIMessage] = [*case.seed, reply("Saved.")] if seed else []
    if load:
        steps += [call_tool("load_capability", {"names": [case.load]}), reply("Loaded.")]
    # strict: a scripted call of a tool the request did not offer fails the run.
    model = ScriptedChatModel([*steps, reply("ok")], strict=True)
    runtime = await create_test_runtime(
        plugins=plugins,
        config=env_for(data, services, remote_memory=case.remote_memory),
        oracle=ORACLE,
        model=model,
        user=user,
        ucan=services.ucan,
    )
    # user-preferences keeps the record in the user's Matrix room (the test runtime's
    # recording Matrix fake); without a room it binds no tool.
    runtime.matrix.user_rooms[user.did] = USER_ROOM
    async with runtime:
        figures = await first_call(runtime, model, state=case.state, seed=seed, load=load)
    if with_plugin and case.expect and case.expect not in figures["system_prompt"]:
        raise RuntimeError(f"{case.label}: the prompt lacks {case.expect[:40]!r}")
    return figures


@asynccontextmanager
async def memory_engine(user: Ed25519Signer, services: Services) -> AsyncIterator[float]:
    """The doubles on loopback (Memory Engine, hosted sandbox, skills registry,
    Firecrawl), trusting ``user``; yields the Memory Engine's start seconds."""
    started = time.perf_counter()
    oracle = Ed25519Signer.generate()
    double = MemoryEngineDouble(trusted_users=[user.did()])
    hosted = SandboxDouble(trusted_users=[user.did()])
    registry = SkillsRegistryDouble(trusted_users=[user.did()])
    web = FirecrawlDouble()
    worker = ComposioWorkerDouble(trusted_users=[user.did()])
    async with (
        double.running(),
        LoopbackServer(double.routes) as server,
        hosted.running(),
        LoopbackServer(hosted.routes) as hosted_server,
        LoopbackServer(registry.routes) as registry_server,
        web.running(),
        LoopbackServer(web.routes) as web_server,
        LoopbackServer(worker.routes) as worker_server,
    ):
        double.origin = server.origin
        seconds = time.perf_counter() - started
        hosted.origin, registry.origin = hosted_server.origin, registry_server.origin
        web.origin, worker.origin = web_server.origin, worker_server.origin
        raw = delegate(
            user,
            audience=oracle.did(),
            capabilities=[
                {"with": "ixo:memory", "can": "memory/*"},
                {"with": "ixo:sandbox", "can": "sandbox/*"},
                {"with": "ixo:skills", "can": "skills/*"},
            ],
            expiration=int(time.time()) + 3600,
        ).to_base64()
        minting = IxoUcanService(oracle_did=oracle.did(), signer=lambda: oracle)
        services.ucan = minting.for_user(UserInfo(did=user.did(), ucan_delegation=raw))
        services.memory_env = {
            "MEMORY_MCP_URL": double.mcp_url,
            "MEMORY_ENGINE_URL": double.engine_url,
            "SANDBOX_MCP_URL": hosted.mcp_url,
            "SKILLS_CAPSULES_BASE_URL": registry.base_url,
            "FIRECRAWL_MCP_URL": web.mcp_url,
            "COMPOSIO_API_KEY": worker.api_key,
            "COMPOSIO_BASE_URL": worker.base_url,
        }
        yield seconds


async def measure() -> dict[str, Any]:
    """Baseline and plugin figures of every case, and the requests the services got."""
    key = Ed25519Signer.generate()
    user = UserInfo(did=key.did(), timezone="UTC")
    services = Services()
    rows: list[dict[str, Any]] = []
    async with memory_engine(key, services) as engine_start:
        with tempfile.TemporaryDirectory() as tmp:
            for i, case in enumerate(CASES):
                data = Path(tmp) / str(i)
                base = await measure_runtime(
                    case.base(services), data / "base", services, user, case, with_plugin=False
                )
                got = await measure_runtime(
                    case.plugins(services), data / "with", services, user, case, with_plugin=True
                )
                rows.append({"case": case, "base": base, "with": got})
    return {"rows": rows, "requests": list(services.requests), "engine_start_s": engine_start}


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    rows = result["rows"]
    core = rows[0]["base"]
    lines = [
        "Plugin tokens (o200k_base; first model call of a new session: system prompt + "
        "visible tool schemas)",
        f"  core only: {core['total']} tokens (prompt {core['prompt']}, "
        f"{len(core['visible'])} tool schemas {core['tools']}: {', '.join(core['visible'])})",
        f"  {'':<40}{'against':<20}{'added':>6}{'prompt':>8}{'schemas':>9}{'tools':>7}",
    ]
    for row in rows:
        case, base, got = row["case"], row["base"], row["with"]
        new = [n for n in got["visible"] if n not in base["visible"]]
        lines.append(
            f"  {case.label:<40}{case.base_label:<20}{got['total'] - base['total']:>+6d}"
            f"{got['prompt'] - base['prompt']:>+8d}{got['tools'] - base['tools']:>+9d}"
            f"{len(new):>+7d}"
        )
    entity = next(r["base"] for r in rows if r["case"].state)
    lines += [
        f"  core's own Current Entity section (the baseline with the DID): "
        f"{entity['total'] - core['total']:+d}",
        f"  ixo-chain operating guide alone: {count_tokens(GUIDE)} tokens",
        f"  requests to the chain and the indexer: {len(result['requests'])}; "
        f"Memory Engine double started in {result['engine_start_s'] * 1000:.0f} ms",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
