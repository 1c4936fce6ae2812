"""The plugins' key-value store (``rt_ctx.kv``): one contract, on SQLite (one machine)
and on Redis (replicas), with its hard per-user caps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from oracle_core import (
    KeyValueService,
    KvBackend,
    KvLimits,
    KvQuotaError,
    SqliteKvBackend,
    UserInfo,
)
from oracle_server._persistence.kv_redis import RedisKvBackend
from oracle_server._redis import redis_client
from oracle_server.testing import redis_test_target

ALICE = UserInfo(did="did:key:z6MkAlice")
BOB = UserInfo(did="did:key:z6MkBob")
LIMITS = KvLimits(max_keys=5, max_bytes=400, max_value_bytes=200)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KvBackend]:
    made: KvBackend
    if request.param == "sqlite":
        made = SqliteKvBackend(tmp_path / "kv.db")
        yield made
        await made.aclose()
        return
    with redis_test_target("kv") as target:
        made = RedisKvBackend(redis_client(target.url), prefix=target.prefix)
        yield made
        await made.aclose()


def _service(backend: KvBackend, clock: Callable[[], float] | None = None) -> KeyValueService:
    return KeyValueService(backend, limits=LIMITS, clock=clock or Clock())


async def test_values_round_trip_per_user_and_namespace(backend: KvBackend) -> None:
    service = _service(backend)
    tasks = service.for_user(ALICE, "tasks")
    credits = tasks.scoped("credits")

    await tasks.set("task:1", {"cron": "0 9 * * *", "title": "Stand-up ☕"})
    await tasks.set("task:2", [1, 2, 3])
    await credits.set("task:1", 7)

    assert await tasks.get("task:1") == {"cron": "0 9 * * *", "title": "Stand-up ☕"}
    assert await credits.get("task:1") == 7
    assert await service.for_user(BOB, "tasks").get("task:1") is None
    assert await tasks.get("missing", "fallback") == "fallback"
    assert await tasks.keys() == ["task:1", "task:2"]
    assert await tasks.keys("task:2") == ["task:2"]
    assert await tasks.delete("task:1") is True
    assert await tasks.delete("task:1") is False
    assert await tasks.keys() == ["task:2"]


async def test_the_key_cap_counts_every_namespace_and_a_refused_write_stores_nothing(
    backend: KvBackend,
) -> None:
    service = _service(backend)
    alice = service.for_user(ALICE, "a")
    for n in range(3):
        await alice.set(f"k{n}", n)
    for n in range(2):
        await alice.scoped("b").set(f"k{n}", n)

    with pytest.raises(KvQuotaError) as refused:
        await alice.set("one-too-many", 1)
    await alice.set("k0", "replacing a key is not a new key")
    await service.for_user(BOB, "a").set("k0", "another user has a store of their own")

    assert refused.value.code == "kv.quota_exceeded"
    assert await alice.get("one-too-many") is None
    assert await alice.get("k0") == "replacing a key is not a new key"


async def test_the_byte_cap_counts_keys_and_values_and_a_replaced_value_once(
    backend: KvBackend,
) -> None:
    alice = _service(backend).for_user(ALICE, "notes")
    await alice.set("a", "x" * 150)  # 152 bytes encoded, plus the key
    await alice.set("b", "x" * 150)
    for _ in range(3):
        await alice.set("b", "y" * 150)  # the old value is given back each time

    with pytest.raises(KvQuotaError) as full:
        await alice.set("c", "z" * 150)
    with pytest.raises(KvQuotaError) as too_big:
        await alice.set("d", "z" * 300)
    await alice.delete("a")
    await alice.set("c", "z" * 150)

    assert full.value.code == "kv.quota_exceeded"
    assert too_big.value.code == "kv.value_too_large"
    assert await alice.get("b") == "y" * 150
    assert await alice.keys() == ["b", "c"]


async def test_expired_entries_are_gone_and_free_their_room(backend: KvBackend) -> None:
    clock = Clock()
    alice = _service(backend, clock).for_user(ALICE, "cache")
    await alice.set("short", "x" * 150, ttl_seconds=60)
    await alice.set("long", "x" * 150)

    with pytest.raises(KvQuotaError):
        await alice.set("third", "x" * 150)
    clock.now += 61

    assert await alice.get("short") is None
    assert await alice.keys() == ["long"]
    await alice.set("third", "x" * 150)
    assert await alice.keys() == ["long", "third"]


async def test_parallel_writes_never_pass_the_cap(backend: KvBackend) -> None:
    service = _service(backend)
    alice = service.for_user(ALICE, "burst")

    async def write(n: int) -> bool:
        try:
            await alice.set(f"key-{n:02d}", n)
        except KvQuotaError:
            return False
        return True

    stored = await asyncio.gather(*(write(n) for n in range(50)))

    assert sum(stored) == LIMITS.max_keys
    assert len(await alice.keys()) == LIMITS.max_keys


async def test_bad_keys_and_values_are_refused(backend: KvBackend) -> None:
    alice = _service(backend).for_user(ALICE, "x")

    with pytest.raises(ValueError, match="1 to 256"):
        await alice.set("", 1)
    with pytest.raises(ValueError, match="1 to 256"):
        await alice.get("k" * 257)
    with pytest.raises(ValueError, match="not JSON"):
        await alice.set("k", {1, 2})
    assert await alice.keys() == []


@pytest.mark.parametrize("shared", [False, True], ids=["one-machine", "replicas"])
async def test_the_server_keeps_the_store_in_sqlite_or_in_the_replicas_redis(
    tmp_path: Path, shared: bool
) -> None:
    from oracle_server import create_oracle_app
    from oracle_server.testing import redis_url_or_skip

    env = {
        "ORACLE_BACKEND": "local",
        "SQLITE_DATABASE_PATH": str(tmp_path),
        "LLM_PROVIDER": "openai-compatible",
        "OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_COMPATIBLE_MODEL": "none",
        "KV_MAX_KEYS_PER_USER": "3",
    }
    if shared:
        env["REDIS_URL"] = redis_url_or_skip()
    app = await create_oracle_app(
        {"name": "KV Oracle"}, env=env, discover_entry_points=False, skip_graceful_shutdown=True
    )
    try:
        kv = app.runtime.ambient.kv
        assert kv is not None
        store = kv.for_user(UserInfo(did=f"did:key:z6MkKv{tmp_path.name}"), "test")
        for n in range(3):
            await store.set(f"k{n}", n)
        with pytest.raises(KvQuotaError):
            await store.set("k3", 3)
        kept = await store.keys()
        for key in kept:
            await store.delete(key)
    finally:
        await app.aclose()

    assert isinstance(kv.backend, RedisKvBackend if shared else SqliteKvBackend)
    assert kept == ["k0", "k1", "k2"]
    assert (tmp_path / "plugin_kv.db").exists() is not shared
