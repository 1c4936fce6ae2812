"""The six user-context slots: what each asks the engine, and how results become prompt text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "MAX_ENTITIES_PER_SLOT",
    "MAX_FACTS_PER_SLOT",
    "RECENT_DAYS",
    "SLOTS",
    "SLOT_NAMES",
    "SlotQuery",
    "batch_request",
    "empty_context",
    "format_slot",
    "slots_from_results",
]

RECENT_DAYS = 90
MAX_FACTS_PER_SLOT = 6
MAX_ENTITIES_PER_SLOT = 6


@dataclass(frozen=True)
class SlotQuery:
    """One slot of ``user_context`` and the search that fills it.

    Attributes:
        slot: The state key (``identity`` … ``recent``).
        query: A natural-language question: engines rank by meaning, so a sentence naming
            the concept and examples of it works better than a keyword list.
        keywords: Words that mark a memory as belonging to the slot when only lexical
            (BM25) search is available, as in the embedded store without embeddings.
        strategy: The engine's search strategy.
        max_facts: Facts asked for.
        max_entities: Entities asked for.
        max_episodes: Episodes asked for.
        node_labels: Entity types the engine may filter on (empty: no filter).
    """

    slot: str
    query: str
    keywords: tuple[str, ...]
    strategy: str = "balanced"
    max_facts: int = 10
    max_entities: int = 6
    max_episodes: int = 3
    node_labels: tuple[str, ...] = ()


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SLOTS: tuple[SlotQuery, ...] = (
    SlotQuery(
        slot="identity",
        query=(
            "Who the user is: their name and how they like to be addressed, age, where they "
            "live or come from, languages they speak, background, personality and values."
        ),
        keywords=_words(
            "name age born live lives from language speak pronoun personality value believe"
        ),
        max_facts=12,
        max_entities=8,
        node_labels=_words(
            "Person Trait Value Identity Attribute Belief CommunicationStyle Language Location"
        ),
    ),
    SlotQuery(
        slot="work",
        query=(
            "What the user works on: their job and role, employer, current and past projects, "
            "tools and technologies they use, and the people they work with."
        ),
        keywords=_words(
            "work works job role company employer project team engineer client "
            "office career colleague build code"
        ),
        max_facts=15,
        max_entities=10,
        max_episodes=5,
    ),
    SlotQuery(
        slot="goals",
        query=(
            "What the user is trying to achieve: goals and plans they have stated, things "
            "they are learning, habits they are building and milestones they work toward."
        ),
        keywords=_words(
            "goal goals plan plans want wants learn learning aim improve trying "
            "hope habit milestone achieve"
        ),
    ),
    SlotQuery(
        slot="interests",
        query=(
            "What the user enjoys or cares about: hobbies, favourite topics, preferences, "
            "likes and dislikes, and expertise outside of work."
        ),
        keywords=_words(
            "like likes love loves enjoy enjoys hobby favourite favorite prefer "
            "prefers interested fan dislike hate"
        ),
    ),
    SlotQuery(
        slot="relationships",
        query=(
            "People the user has mentioned: family, partner, friends, colleagues and "
            "collaborators, pets, and groups they belong to."
        ),
        keywords=_words(
            "friend wife husband partner mother father mum mom dad sister brother "
            "son daughter family colleague boss dog cat child children"
        ),
        max_facts=8,
        max_entities=10,
    ),
    SlotQuery(
        slot="recent",
        query=(
            "What the user has been doing or talking about recently: current activities, "
            "decisions they made and problems they are working through."
        ),
        keywords=(),
        strategy="recent_memory",
        max_episodes=8,
    ),
)

SLOT_NAMES: tuple[str, ...] = tuple(q.slot for q in SLOTS)


def empty_context() -> dict[str, str | None]:
    """Every slot empty (what a failed or skipped fetch yields)."""
    return dict.fromkeys(SLOT_NAMES)


def batch_request(oracle_dids: Sequence[str], *, now: datetime | None = None) -> dict[str, Any]:
    """The body of ``POST /search-enhanced-batch``: one query per slot, in slot order."""
    since = (now or datetime.now(UTC)) - timedelta(days=RECENT_DAYS)
    queries = []
    for q in SLOTS:
        filters: dict[str, Any]
        if q.slot == "recent":
            filters = {"created_at": [[{"date": since.isoformat(), "comparison_operator": ">="}]]}
        else:
            # Superseded facts carry an invalid_at; only current ones describe the user.
            filters = {"invalid_at": [[{"date": None, "comparison_operator": "IS NULL"}]]}
            if q.node_labels:
                filters["node_labels"] = list(q.node_labels)
        queries.append(
            {
                "oracle_dids": list(oracle_dids)[:5],
                "query": q.query,
                "strategy": q.strategy,
                "max_facts": q.max_facts,
                "max_entities": q.max_entities,
                "max_episodes": q.max_episodes,
                "max_communities": 1,
                "knowledge_level": "both",
                "search_filters": filters,
            }
        )
    return {"queries": queries}


def _texts(items: Any, key: str) -> list[str]:
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        value = item.get(key) if isinstance(item, Mapping) else None
        if isinstance(value, str) and value.strip():
            # One line per item: a newline inside a fact would break the prompt's list.
            out.append(" ".join(value.split()))
    return out


def format_slot(
    facts: Iterable[str],
    entities: Iterable[str] = (),
    *,
    max_facts: int = MAX_FACTS_PER_SLOT,
    max_entities: int = MAX_ENTITIES_PER_SLOT,
) -> str | None:
    """The prompt text of one slot, or ``None`` when it has nothing.

    Items are ``<fact>`` lines and a last ``**Related:** a, b`` line. The core renders a
    slot as ``- {label}: {value}``, so the first item sits on the label's line and the
    others follow as nested ``  - `` bullets.
    """
    items = list(dict.fromkeys(facts))[:max_facts]
    names = list(dict.fromkeys(entities))[:max_entities]
    if names:
        items.append("**Related:** " + ", ".join(names))
    if not items:
        return None
    return items[0] + "".join(f"\n  - {item}" for item in items[1:])


def slots_from_results(results: Sequence[Any]) -> dict[str, str | None]:
    """``user_context`` from the batch response's ``results``, mapped by position.

    An error slot, a malformed slot or a missing one stays empty. A fact already shown in
    an earlier slot is not repeated, so the prompt does not pay for it twice.
    """
    context = empty_context()
    seen: set[str] = set()
    for index, query in enumerate(SLOTS):
        slot = results[index] if index < len(results) else None
        if not isinstance(slot, Mapping) or "error" in slot:
            continue
        facts = [f for f in _texts(slot.get("facts"), "fact") if f not in seen]
        seen.update(facts[:MAX_FACTS_PER_SLOT])
        context[query.slot] = format_slot(facts, _texts(slot.get("entities"), "name"))
    return context
