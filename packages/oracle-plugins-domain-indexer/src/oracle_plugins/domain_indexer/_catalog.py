"""A local catalog of imported domain cards (SQLite FTS5), answering the same two tools.

Selected with ``DOMAIN_INDEXER_URL=sqlite:///<path>``; off by default. It holds domain
cards only (no agents, compositions or events) and is filled with ``import_cards`` or
``python -m oracle_plugins.domain_indexer import-cards``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from oracle_plugins.domain_indexer._client import DomainIndexerError, SearchQuery

__all__ = ["SqliteCardCatalog"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cards (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS cards_fts USING fts5(
    id UNINDEXED, name, description, summary, overview, keywords, faq,
    tokenize = 'unicode61 remove_diacritics 2'
);
"""
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_MAX_TOKENS = 16
_TRUE = frozenset({"true", "1", "yes"})


def _text(value: Any) -> str:
    """Searchable text of a card field (strings, lists, FAQ objects)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return " ".join(_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return str(value)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [str(item).lower() for item in items]


def _flag(value: str) -> bool:
    return value.strip().lower() in _TRUE


def _csv(value: str) -> set[str]:
    return {item.strip().lower() for item in value.split(",") if item.strip()}


_FILTERS: dict[str, Callable[[Mapping[str, Any], str], bool]] = {
    "dc.entity_type": lambda card, v: v.strip().lower() in _as_list(card.get("entity_type")),
    "dc.keywords": lambda card, v: bool(_csv(v) & set(_as_list(card.get("keywords")))),
    "dc.categories": lambda card, v: bool(_csv(v) & set(_as_list(card.get("categories")))),
    "dc.issuer": lambda card, v: str(card.get("issuer") or "") == v.strip(),
    "dc.has_url": lambda card, v: bool(card.get("url")) == _flag(v),
    "dc.has_logo": lambda card, v: bool(card.get("logo")) == _flag(v),
    "dc.entity_verified": lambda card, v: bool(card.get("entity_verified")) == _flag(v),
}


def _match_expression(query: str) -> str | None:
    """An FTS5 expression matching any word of ``query`` (prefixes included)."""
    tokens = list(dict.fromkeys(t.lower() for t in _TOKEN_RE.findall(query)))[:_MAX_TOKENS]
    if not tokens:
        return None
    # Quoting each token keeps FTS5 operators in user text (AND, NEAR, "-") inert.
    return " OR ".join(f'"{token}"*' for token in tokens)


class SqliteCardCatalog:
    """Domain cards in one SQLite file, searched with FTS5 (BM25 ranking).

    Use ``SqliteCardCatalog.open(path)``; the file and its tables are created if needed.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        # sqlite3 connections are not safe for concurrent use from several threads.
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path) -> SqliteCardCatalog:
        """Open (or create) the catalog at ``path``."""
        location = Path(path)
        location.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(location, check_same_thread=False)
        connection.executescript(_SCHEMA)
        return cls(connection)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    async def aclose(self) -> None:
        """Close the database."""
        self.close()

    def import_cards(self, cards: Iterable[Mapping[str, Any]]) -> int:
        """Insert or replace cards (each needs a string ``id``); returns how many.

        Raises:
            ValueError: A card has no string ``id``; nothing is imported.
        """
        rows = []
        for index, card in enumerate(cards):
            card_id = card.get("id")
            if not isinstance(card_id, str) or not card_id.strip():
                raise ValueError(f"card {index} has no string 'id'")
            rows.append((card_id, dict(card)))
        with self._lock, self._db:
            for card_id, card in rows:
                self._db.execute("DELETE FROM cards_fts WHERE id = ?", (card_id,))
                self._db.execute(
                    "INSERT OR REPLACE INTO cards (id, body) VALUES (?, ?)",
                    (card_id, json.dumps(card, ensure_ascii=False)),
                )
                self._db.execute(
                    "INSERT INTO cards_fts (id, name, description, summary, overview, keywords,"
                    " faq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        card_id,
                        _text(card.get("name")),
                        _text(card.get("description")),
                        _text(card.get("summary")),
                        _text(card.get("overview")),
                        _text(card.get("keywords")),
                        _text(card.get("faq")),
                    ),
                )
        return len(rows)

    def count(self) -> int:
        """How many cards the catalog holds."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM cards").fetchone()[0])

    async def search(self, query: SearchQuery) -> Any:
        """Domain cards matching any word of the query, best first, in the indexer's shape.

        Raises:
            DomainIndexerError: Another scope than ``domain_cards``, or a filter the
                catalog cannot apply, was asked for.
        """
        scopes = [s for s in (query.scopes or "domain_cards").split(",") if s]
        if scopes != ["domain_cards"]:
            raise DomainIndexerError(
                "The local domain-card catalog only answers scope domain_cards"
            )
        filters = dict(query.filters or {})
        unsupported = sorted(set(filters) - set(_FILTERS))
        if unsupported:
            raise DomainIndexerError(
                f"The local domain-card catalog cannot filter on {', '.join(unsupported)}; "
                f"it supports {', '.join(_FILTERS)}"
            )
        expression = _match_expression(query.query)
        if expression is None:
            hits: list[tuple[str, float]] = []
        else:
            hits = await self._run(
                lambda: [
                    (str(body), float(rank))
                    for body, rank in self._db.execute(
                        "SELECT cards.body, bm25(cards_fts) AS rank FROM cards_fts "
                        "JOIN cards ON cards.id = cards_fts.id "
                        "WHERE cards_fts MATCH ? ORDER BY rank, cards.id",
                        (expression,),
                    )
                ]
            )
        results = []
        for body, rank in hits:
            card = json.loads(body)
            if all(_FILTERS[name](card, value) for name, value in filters.items()):
                results.append(
                    {
                        "scope": "domain_cards",
                        "id": card["id"],
                        "score": round(-rank, 6),
                        "record": card,
                    }
                )
        return {
            "query": query.query,
            "scopes": ["domain_cards"],
            "total": len(results),
            "results": results[: query.limit],
            "source": "local-catalog",
        }

    async def get_card(self, did: str) -> Mapping[str, Any] | None:
        """The card stored under ``did``, or ``None``."""
        row = await self._run(
            lambda: self._db.execute("SELECT body FROM cards WHERE id = ?", (did,)).fetchone()
        )
        if row is None:
            return None
        card: dict[str, Any] = json.loads(row[0])
        return card

    async def _run(self, query: Callable[[], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                try:
                    return query()
                except sqlite3.Error as exc:
                    raise DomainIndexerError(
                        f"The local domain-card catalog failed ({type(exc).__name__})"
                    ) from exc

        return await asyncio.to_thread(locked)
