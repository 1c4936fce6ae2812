"""``user_context`` from the engine's ``POST /search-enhanced-batch``: the prompt section,
the five-minute cache per session, and degradation (mint failure, error slot, slow or
failing engine)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oracle_core import RuntimeContext
from oracle_core.testing import TestRuntime
from oracle_plugins.memory import MemoryPlugin
from oracle_plugins.memory.testing import MemoryEngineDouble
from oracle_ucan import Ed25519Signer

RuntimeFactory = Callable[..., AbstractAsyncContextManager[TestRuntime]]
ENTITY_DID = "did:ixo:entity:memory-tests"
HEADING = "## What You Know About the User"


def seed_ada(engine: MemoryEngineDouble, user: str) -> None:
    # The double matches a memory to a slot's question by shared words.
    engine.seed(user, "Her name is Ada and she prefers to be called Countess", name="Ada")
    engine.seed(user, "Her job is writing programs for the Analytical Engine", name="Babbage")


def section(prompt: str) -> str | None:
    for block in prompt.split("\n\n"):
        if block.startswith(HEADING):
            return block
    return None


async def test_the_slots_fill_the_prompt_section(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    seed_ada(engine, user_key.did())
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    context = built.input["user_context"]
    assert context["identity"] == (
        "Her name is Ada and she prefers to be called Countess\n  - **Related:** Ada"
    )
    assert context["work"] == (
        "Her job is writing programs for the Analytical Engine\n  - **Related:** Babbage"
    )
    assert section(built.prompt.text) == "\n".join(
        [
            HEADING,
            "- Who they are: Her name is Ada and she prefers to be called Countess",
            "  - **Related:** Ada",
            "- Work: Her job is writing programs for the Analytical Engine",
            "  - **Related:** Babbage",
        ]
    )


async def test_the_batch_asks_six_queries_for_the_oracle(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    async with remote_runtime() as rt:
        await rt.build("hello")
    [body] = engine.batch_bodies
    queries = body["queries"]
    assert len(queries) == 6
    assert {tuple(q["oracle_dids"]) for q in queries} == {(ENTITY_DID,)}
    assert [q["strategy"] for q in queries] == ["balanced"] * 5 + ["recent_memory"]
    assert {q["knowledge_level"] for q in queries} == {"both"}
    for q in queries[:5]:
        assert q["search_filters"]["invalid_at"] == [
            [{"date": None, "comparison_operator": "IS NULL"}]
        ]
    [[recent]] = queries[5]["search_filters"]["created_at"]
    assert recent["comparison_operator"] == ">="
    since = datetime.fromisoformat(recent["date"])
    assert abs(since - (datetime.now(UTC) - timedelta(days=90))) < timedelta(minutes=1)


async def test_no_memories_means_no_section(remote_runtime: RuntimeFactory) -> None:
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    assert set(built.input["user_context"].values()) == {None}
    assert section(built.prompt.text) is None


async def test_the_context_is_cached_per_session(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    engine.seed(user_key.did(), "Her name is Ada", name="Ada")
    async with remote_runtime(MemoryPlugin(context_ttl=0.5)) as rt:
        first = await rt.build("one")
        engine.seed(user_key.did(), "Her job is analyst", name="Work")
        again = await rt.build("two")
        assert len(engine.batch_bodies) == 1
        assert again.input["user_context"] == first.input["user_context"]
        assert again.input["user_context"]["work"] is None  # same-session write: not yet

        other = await rt.build("three", thread_id="another-session")
        assert len(engine.batch_bodies) == 2
        assert other.input["user_context"]["work"] == "Her job is analyst\n  - **Related:** Work"

        await asyncio.sleep(0.6)
        later = await rt.build("four")
    assert len(engine.batch_bodies) == 3
    assert later.input["user_context"]["work"] == "Her job is analyst\n  - **Related:** Work"


async def test_concurrent_builds_share_one_fetch(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    engine.batch_delay = 0.2
    async with remote_runtime() as rt:
        await asyncio.gather(rt.build("a"), rt.build("b"), rt.build("c"))
    assert len(engine.batch_bodies) == 1


async def test_an_error_slot_leaves_only_that_slot_empty(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    seed_ada(engine, user_key.did())
    engine.error_slots = {0}
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    context = built.input["user_context"]
    assert context["identity"] is None
    assert context["work"] is not None
    assert "Her job is writing programs" in context["work"]
    assert "- Who they are:" not in built.prompt.text


async def test_a_slow_engine_costs_the_timeout_once_and_gives_empty_slots(
    engine: MemoryEngineDouble,
    remote_runtime: RuntimeFactory,
    user_key: Ed25519Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_ada(engine, user_key.did())
    engine.batch_delay = 3.0
    caplog.set_level(logging.WARNING)
    async with remote_runtime(MemoryPlugin(context_timeout=0.3)) as rt:
        started = time.monotonic()
        built = await rt.build("hello")
        took = time.monotonic() - started
        started = time.monotonic()
        again = await rt.build("again")
        cached_failure = time.monotonic() - started
    assert 0.3 <= took < 2.5
    assert cached_failure < 0.3  # the failure is remembered for a while
    assert len(engine.batch_bodies) == 1
    for result in (built, again):
        assert set(result.input["user_context"].values()) == {None}
        assert section(result.prompt.text) is None
    assert "memory user context timed out" in caplog.text
    assert built.degraded == []


async def test_a_failing_engine_gives_empty_slots(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    seed_ada(engine, user_key.did())
    engine.batch_status = 503
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    assert set(built.input["user_context"].values()) == {None}
    assert built.degraded == []


async def test_no_invocation_means_no_fetch(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    seed_ada(engine, user_key.did())
    async with remote_runtime(ucan=None) as rt:
        built = await rt.build("hello")
    assert engine.batch_bodies == []
    assert set(built.input["user_context"].values()) == {None}


async def test_user_profile_shares_the_context(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory, user_key: Ed25519Signer
) -> None:
    seed_ada(engine, user_key.did())
    async with remote_runtime() as rt:
        built = await rt.build("hello")
    ctx = built.context.runtime_context
    assert ctx is not None
    assert ctx.shared is not None
    profile = ctx.shared.get("userProfile")
    assert profile == built.input["user_context"]
    assert profile["identity"].startswith("Her name is Ada")


async def test_a_reader_replaces_the_fetch(
    engine: MemoryEngineDouble, remote_runtime: RuntimeFactory
) -> None:
    seen: list[str] = []

    async def reader(rt_ctx: RuntimeContext[Any]) -> Mapping[str, str | None]:
        seen.append(rt_ctx.session.id)
        return {"goals": "Run a marathon"}

    async with remote_runtime(MemoryPlugin(user_context_reader=reader)) as rt:
        built = await rt.build("hello")
    assert seen == ["test-thread"]
    assert engine.batch_bodies == []
    assert built.input["user_context"]["goals"] == "Run a marathon"
    assert "- Goals: Run a marathon" in built.prompt.text
