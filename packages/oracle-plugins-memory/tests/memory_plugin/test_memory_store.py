"""The embedded store: FTS5 recall, vectors fused in, the two spaces, deletion, and the six
slots built locally. Every test runs with BM25 only and with the packaged model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from oracle_plugins.memory import EmbeddedMemoryStore, Embedder, load_embedder
from oracle_plugins.memory._store import entity_names, fts_query, split_facts

ADA = "did:key:z6MkAda"
BOB = "did:key:z6MkBob"
ORACLE = "did:ixo:entity:store"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    loaded = load_embedder()
    assert isinstance(loaded, Embedder), loaded
    return loaded


@pytest.fixture(params=["bm25", "semantic"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedMemoryStore]:
    model = request.getfixturevalue("embedder") if request.param == "semantic" else None
    opened = EmbeddedMemoryStore(tmp_path / "memory.sqlite", model)
    yield opened
    opened.close()


def facts_of(store: EmbeddedMemoryStore, query: str, user: str = ADA, **kw: object) -> list[str]:
    result = store.search(query, user_did=user, oracle_did=ORACLE, **kw)  # type: ignore[arg-type]
    return [hit.fact for hit in result.facts]


def test_text_helpers() -> None:
    assert split_facts("I live in Lisbon. I work at Acme!  Bye?") == [
        "I live in Lisbon.",
        "I work at Acme!",
        "Bye?",
    ]
    assert entity_names("New York is where Ada met Charles Babbage.") == [
        "New York",
        "Ada",
        "Charles Babbage",
    ]
    assert entity_names("The cat sleeps.") == []
    assert fts_query("What is the user's favourite food?") == '"favourite" OR "food"'
    assert fts_query("the of and") is None


def test_recall_finds_the_users_facts_and_only_theirs(store: EmbeddedMemoryStore) -> None:
    store.add_episode(space="user", owner=ADA, name="Home", content="I live in Lisbon.")
    store.add_episode(space="user", owner=ADA, name="Food", content="I am vegetarian.")
    store.add_episode(space="user", owner=BOB, name="Home", content="I live in Oslo.")
    assert facts_of(store, "Lisbon")[0] == "I live in Lisbon."
    assert "I live in Oslo." not in facts_of(store, "live")
    assert facts_of(store, "live", user=BOB) == ["I live in Oslo."]


def test_semantic_recall_finds_meaning_without_shared_words(
    embedder: Embedder, tmp_path: Path
) -> None:
    semantic = EmbeddedMemoryStore(tmp_path / "s.sqlite", embedder)
    lexical = EmbeddedMemoryStore(tmp_path / "l.sqlite", None)
    for store in (semantic, lexical):
        store.add_episode(space="user", owner=ADA, name="Pet", content="Rex is my dog.")
        store.add_episode(space="user", owner=ADA, name="Job", content="I am a nurse.")
    assert facts_of(semantic, "which animals do I have?")[0] == "Rex is my dog."
    assert facts_of(lexical, "which animals do I have?") == []
    semantic.close()
    lexical.close()


def test_oracle_knowledge_is_public_or_for_its_owners(store: EmbeddedMemoryStore) -> None:
    store.add_episode(
        space="oracle",
        owner=ORACLE,
        name="Hours",
        content="Opening hours are 9 to 5.",
        visibility="public",
    )
    store.add_episode(
        space="oracle",
        owner=ORACLE,
        name="Margin",
        content="Opening discount margin is 40%.",
    )
    assert facts_of(store, "opening", user=BOB) == ["Opening hours are 9 to 5."]
    assert sorted(facts_of(store, "opening", oracle_owner=True)) == [
        "Opening discount margin is 40%.",
        "Opening hours are 9 to 5.",
    ]
    assert facts_of(store, "opening", knowledge_level="user") == []
    other = store.search("opening", user_did=BOB, oracle_did="did:ixo:entity:other")
    assert other.facts == []


def test_deleting_an_episode_a_fact_or_everything(store: EmbeddedMemoryStore) -> None:
    episode, [lisbon, _tea] = store.add_episode(
        space="user", owner=ADA, name="About", content="I live in Lisbon. I drink tea."
    )
    store.add_episode(space="user", owner=BOB, name="About", content="I drink tea.")
    assert not store.delete_fact(lisbon, user_did=BOB, oracle_owner=None)  # not Bob's
    assert store.delete_fact(lisbon, user_did=ADA, oracle_owner=None)
    assert facts_of(store, "Lisbon tea") == ["I drink tea."]
    assert store.delete_episode(episode, user_did=ADA, oracle_owner=None)
    assert not store.delete_episode(episode, user_did=ADA, oracle_owner=None)
    assert facts_of(store, "tea") == []
    store.add_episode(space="user", owner=ADA, name="x", content="I drink coffee.")
    assert store.clear_user(ADA) == 1
    assert facts_of(store, "coffee tea") == []
    assert facts_of(store, "tea", user=BOB) == ["I drink tea."]


def test_recent_memory_is_newest_first_within_90_days(store: EmbeddedMemoryStore) -> None:
    now = datetime.now(UTC)
    store.add_episode(
        space="user", owner=ADA, name="a", content="Trip to Rome.", now=now - timedelta(days=200)
    )
    store.add_episode(
        space="user", owner=ADA, name="b", content="Trip to Oslo.", now=now - timedelta(days=10)
    )
    store.add_episode(
        space="user", owner=ADA, name="c", content="Trip to Porto.", now=now - timedelta(days=1)
    )
    found = facts_of(store, "trip", since=now - timedelta(days=90), newest_first=True)
    assert found == ["Trip to Porto.", "Trip to Oslo."]


def test_the_six_slots_come_from_the_users_own_space(store: EmbeddedMemoryStore) -> None:
    for content in (
        "My name is Ada Lovelace.",
        "I work as an analyst at Babbage Ltd.",
        "I want to learn Italian this year.",
        "I love hiking in the Alps.",
        "My sister Anne visits on Sundays.",
        "Booked a flight to Porto.",
    ):
        store.add_episode(space="user", owner=ADA, name="m", content=content)
    store.add_episode(space="user", owner=BOB, name="m", content="My name is Bob.")
    store.add_episode(
        space="oracle", owner=ORACLE, name="k", content="My name is Oracle.", visibility="public"
    )
    assert store.user_context(ADA) == {
        "identity": "My name is Ada Lovelace.\n  - **Related:** Ada Lovelace",
        "work": "I work as an analyst at Babbage Ltd.\n  - **Related:** Babbage Ltd",
        "goals": "I want to learn Italian this year.\n  - **Related:** Italian",
        "interests": "I love hiking in the Alps.\n  - **Related:** Alps",
        "relationships": "My sister Anne visits on Sundays.\n  - **Related:** Anne, Sundays",
        "recent": "Booked a flight to Porto.\n  - **Related:** Porto",
    }
    assert store.user_context("did:key:z6MkNobody") == dict.fromkeys(
        ("identity", "work", "goals", "interests", "relationships", "recent")
    )


def test_vectors_place_facts_without_slot_words(embedder: Embedder, tmp_path: Path) -> None:
    store = EmbeddedMemoryStore(tmp_path / "v.sqlite", embedder)
    store.add_episode(
        space="user",
        owner=ADA,
        name="m",
        content="The user is vegetarian.",
        now=datetime.now(UTC) - timedelta(days=200),
    )
    context = store.user_context(ADA)
    store.close()
    assert context["identity"] == "The user is vegetarian."
    assert context["recent"] is None  # older than 90 days and shown elsewhere anyway
