"""The in-memory invocation store (UCAN-34): single use, TTLs, the hourly sweep."""

from __future__ import annotations

from oracle_ucan import InMemoryInvocationStore, InvocationStore

DAY = 24 * 3600
HOUR = 3600


class Clock:
    """Wall-clock seconds that move only when the test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _as_protocol(store: InvocationStore) -> InvocationStore:
    """Type-checks that the in-memory store satisfies the protocol validators accept."""
    return store


async def test_unknown_cid_is_not_used() -> None:
    store = InMemoryInvocationStore(clock=Clock())
    assert await store.has("bafy-unknown") is False
    assert len(store) == 0


async def test_added_cid_is_used_until_its_ttl_ends() -> None:
    clock = Clock()
    store = _as_protocol(InMemoryInvocationStore(clock=clock))
    await store.add("bafy-a", 10)
    assert await store.has("bafy-a") is True
    assert await store.has("bafy-b") is False
    clock.now += 9.999
    assert await store.has("bafy-a") is True
    clock.now += 0.001  # exactly at expiry: forgotten
    assert await store.has("bafy-a") is False


async def test_ttl_is_capped_at_24_hours() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    await store.add("bafy-long", 7 * DAY)
    clock.now += DAY - 1
    assert await store.has("bafy-long") is True
    clock.now += 1
    assert await store.has("bafy-long") is False


async def test_ttl_below_one_second_is_one_second() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    await store.add("bafy-zero", 0)
    await store.add("bafy-negative", -50)
    assert await store.has("bafy-zero") is True
    assert await store.has("bafy-negative") is True
    clock.now += 0.5
    assert await store.has("bafy-zero") is True
    clock.now += 0.5
    assert await store.has("bafy-zero") is False
    assert await store.has("bafy-negative") is False


async def test_adding_again_replaces_the_expiry() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    await store.add("bafy-a", 10)
    await store.add("bafy-a", 100)
    assert len(store) == 1
    clock.now += 50
    assert await store.has("bafy-a") is True


async def test_cleanup_drops_only_expired_entries() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    await store.add("bafy-short", 10)
    await store.add("bafy-long", 1000)
    clock.now += 10
    assert len(store) == 2  # expired entries linger until a sweep
    await store.cleanup()
    assert len(store) == 1
    assert await store.has("bafy-short") is False
    assert await store.has("bafy-long") is True


async def test_adds_sweep_expired_entries_every_hour() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    await store.add("bafy-first", 10)
    clock.now += HOUR - 1
    await store.add("bafy-second", 5)
    assert len(store) == 2  # not an hour yet: no sweep
    clock.now += 1
    await store.add("bafy-third", 10 * HOUR)
    # The sweep ran at the hour: "bafy-first" had expired, "bafy-second" had not.
    assert len(store) == 2
    assert await store.has("bafy-first") is False
    assert await store.has("bafy-second") is True
    assert await store.has("bafy-third") is True


async def test_the_next_sweep_is_an_hour_after_the_last() -> None:
    clock = Clock()
    store = InMemoryInvocationStore(clock=clock)
    clock.now += HOUR
    await store.add("bafy-a", 10)  # sweeps (nothing to drop) and schedules the next
    clock.now += 20
    await store.add("bafy-b", 10)
    assert len(store) == 2  # "bafy-a" expired but the next sweep is not due
    clock.now += HOUR - 20
    await store.add("bafy-c", 10)
    assert len(store) == 1


async def test_default_clock_is_wall_time() -> None:
    store = InMemoryInvocationStore()
    await store.add("bafy-now", 60)
    assert await store.has("bafy-now") is True
    assert await store.has("bafy-other") is False
