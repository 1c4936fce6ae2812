"""The embedded memory store: SQLite with FTS5 (BM25), and optional vectors.

Two spaces, as in the Memory Engine contract: a user space per user DID (episodes written
with ``add_memory``) and an oracle space under the oracle entity DID (``public`` for every
user, ``private`` for its owners). Each episode is split into facts (one per sentence),
indexed by FTS5 and, when an embedder is loaded, by a unit vector; recall fuses the two
rankings (reciprocal rank fusion). Capitalised names inside a fact are kept as its
entities. Nothing is extracted by a model: facts are the user's own words.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid as uuid_lib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from oracle_plugins.memory._embedding import Embedder
from oracle_plugins.memory._slots import (
    MAX_FACTS_PER_SLOT,
    RECENT_DAYS,
    SLOTS,
    empty_context,
    format_slot,
)

__all__ = ["EmbeddedMemoryStore", "FactHit", "KnowledgeLevel", "SearchResult"]

KnowledgeLevel = Literal["user", "oracle", "both"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    space TEXT NOT NULL CHECK (space IN ('user', 'oracle')),
    owner TEXT NOT NULL,
    visibility TEXT NOT NULL DEFAULT 'private' CHECK (visibility IN ('public', 'private')),
    name TEXT NOT NULL,
    content TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'text',
    source_description TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS episodes_owner ON episodes (space, owner);
CREATE TABLE IF NOT EXISTS facts (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    episode_id INTEGER NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    fact TEXT NOT NULL,
    entities TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT
);
CREATE INDEX IF NOT EXISTS facts_episode ON facts (episode_id);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5 (
    fact, content='facts', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS facts_fts_insert AFTER INSERT ON facts BEGIN
    INSERT INTO facts_fts (rowid, fact) VALUES (new.id, new.fact);
END;
CREATE TRIGGER IF NOT EXISTS facts_fts_delete AFTER DELETE ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, fact) VALUES ('delete', old.id, old.fact);
END;
"""

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*")


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words too common to rank by; "user" is in every memory about the user.
_STOPWORDS = _word_set(
    "a an and are as at be been but by did do does for from had has have he her his how i in "
    "is it its me my of on or our she so that the their them they this to was we were what "
    "when where which who why will with you your user users about"
)
_NOT_NAMES = _word_set("I The A An This That These Those It He She They We You My Our")
_RRF_K = 60
_MIN_SIMILARITY = 0.2
_SLOT_SIMILARITY = 0.15
_CANDIDATES = 50
_CONTEXT_FACTS = 500


@dataclass(frozen=True)
class FactHit:
    """One fact found by a search."""

    uuid: str
    fact: str
    entities: tuple[str, ...]
    created_at: str
    episode_uuid: str
    episode_name: str
    space: str
    score: float


@dataclass
class SearchResult:
    """Facts, their episodes and entities, best first."""

    facts: list[FactHit] = field(default_factory=list)

    def to_json(self, episodes: int = 5) -> dict[str, Any]:
        """The tool's answer: facts with their ids, episodes and entity names."""
        seen: dict[str, dict[str, str]] = {}
        for hit in self.facts:
            if hit.episode_uuid not in seen and len(seen) < episodes:
                seen[hit.episode_uuid] = {
                    "uuid": hit.episode_uuid,
                    "name": hit.episode_name,
                    "space": hit.space,
                }
        names = list(dict.fromkeys(n for hit in self.facts for n in hit.entities))
        return {
            "facts": [
                {
                    "uuid": hit.uuid,
                    "fact": hit.fact,
                    "episode_uuid": hit.episode_uuid,
                    "created_at": hit.created_at,
                    "space": hit.space,
                }
                for hit in self.facts
            ],
            "episodes": list(seen.values()),
            "entities": [{"name": n} for n in names],
        }


def split_facts(content: str) -> list[str]:
    """One fact per sentence (the whole text when it has one sentence)."""
    parts = [" ".join(p.split()) for p in _SENTENCE_END.split(content.strip())]
    return [p for p in parts if len(p) >= 2] or [" ".join(content.split())]


def entity_names(fact: str) -> list[str]:
    """Capitalised names inside ``fact``; the sentence's first word counts only in a name
    of several words (``New York``), since every sentence starts with a capital."""
    names = []
    for match in _NAME.finditer(fact):
        name = match.group(0)
        words = name.split()
        if match.start() == 0 and len(words) == 1:
            continue
        if match.start() == 0 and words[0] in _NOT_NAMES:
            words = words[1:]
        if words and not (len(words) == 1 and words[0] in _NOT_NAMES):
            names.append(" ".join(words))
    return list(dict.fromkeys(names))


def fts_query(text: str) -> str | None:
    """An FTS5 query matching any significant word of ``text`` (``None``: no such word)."""
    words = [w.lower() for w in _WORD.findall(text)]
    terms = list(dict.fromkeys(w for w in words if w not in _STOPWORDS and len(w) > 1))
    if not terms:
        return None
    return " OR ".join(f'"{t}"' for t in terms[:32])


def _now() -> datetime:
    return datetime.now(UTC)


class EmbeddedMemoryStore:
    """The SQLite store; every method is blocking (callers run it in a thread).

    Args:
        path: The database file (created with its directory).
        embedder: Adds semantic recall; ``None`` ranks by BM25 only.
    """

    def __init__(self, path: Path, embedder: Embedder | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.embedder = embedder
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._slot_vectors: Any = None

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # --- writes --------------------------------------------------------------------

    def add_episode(
        self,
        *,
        space: Literal["user", "oracle"],
        owner: str,
        name: str,
        content: str,
        visibility: Literal["public", "private"] = "private",
        source: str = "text",
        source_description: str = "",
        now: datetime | None = None,
    ) -> tuple[str, list[str]]:
        """Store an episode and its facts; returns the episode uuid and the fact uuids."""
        created = (now or _now()).isoformat()
        facts = split_facts(content)
        vectors = self._embed(facts)
        model_id = self.embedder.model_id if self.embedder is not None else None
        episode_uuid = str(uuid_lib.uuid4())
        fact_uuids = [str(uuid_lib.uuid4()) for _ in facts]
        with self._lock, self._transaction():
            cursor = self._db.execute(
                "INSERT INTO episodes (uuid, space, owner, visibility, name, content, source,"
                " source_description, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    episode_uuid,
                    space,
                    owner,
                    visibility,
                    name,
                    content,
                    source,
                    source_description,
                    created,
                ),
            )
            episode_id = cursor.lastrowid
            for index, fact in enumerate(facts):
                blob = vectors[index].tobytes() if vectors is not None else None
                self._db.execute(
                    "INSERT INTO facts (uuid, episode_id, fact, entities, created_at, embedding,"
                    " embedding_model) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        fact_uuids[index],
                        episode_id,
                        fact,
                        "\n".join(entity_names(fact)),
                        created,
                        blob,
                        model_id if blob is not None else None,
                    ),
                )
        return episode_uuid, fact_uuids

    def delete_episode(self, episode_uuid: str, *, user_did: str, oracle_owner: str | None) -> bool:
        """Delete one episode (and its facts) the caller may delete; whether one was."""
        where, params = self._deletable(user_did, oracle_owner)
        with self._lock, self._transaction():
            cursor = self._db.execute(
                f"DELETE FROM episodes WHERE uuid = ? AND ({where})", (episode_uuid, *params)
            )
        return cursor.rowcount > 0

    def delete_fact(self, fact_uuid: str, *, user_did: str, oracle_owner: str | None) -> bool:
        """Delete one fact (an edge, in the engine's terms); whether one was."""
        where, params = self._deletable(user_did, oracle_owner)
        with self._lock, self._transaction():
            cursor = self._db.execute(
                "DELETE FROM facts WHERE uuid = ? AND episode_id IN"
                f" (SELECT id FROM episodes WHERE {where})",
                (fact_uuid, *params),
            )
        return cursor.rowcount > 0

    def clear_user(self, user_did: str) -> int:
        """Delete the user's whole space; how many episodes were deleted."""
        with self._lock, self._transaction():
            cursor = self._db.execute(
                "DELETE FROM episodes WHERE space = 'user' AND owner = ?", (user_did,)
            )
        return cursor.rowcount

    # --- reads ---------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        user_did: str,
        oracle_did: str | None,
        oracle_owner: bool = False,
        knowledge_level: KnowledgeLevel = "both",
        limit: int = 10,
        since: datetime | None = None,
        newest_first: bool = False,
    ) -> SearchResult:
        """Facts matching ``query`` that the user may read, best first."""
        scope, params = self._readable(user_did, oracle_did, oracle_owner, knowledge_level)
        if since is not None:
            scope += " AND f.created_at >= ?"
            params.append(since.isoformat())
        ranks: dict[int, float] = {}
        rows: dict[int, tuple[Any, ...]] = {}
        with self._lock:
            lexical = self._lexical(query, scope, params)
            semantic = self._semantic(query, scope, params)
        for ranking in (lexical, semantic):
            for rank, row in enumerate(ranking):
                ranks[row[0]] = ranks.get(row[0], 0.0) + 1.0 / (_RRF_K + rank + 1)
                rows[row[0]] = row
        ordered = sorted(ranks, key=lambda i: (-ranks[i], -i))
        if newest_first:
            ordered.sort(key=lambda i: rows[i][4], reverse=True)
        return SearchResult([_hit(rows[i], ranks[i]) for i in ordered[:limit]])

    def user_context(self, user_did: str, *, now: datetime | None = None) -> dict[str, str | None]:
        """The six slots of ``user_context``, from the user's own space.

        A fact goes to the first slot whose words it contains, else (with vectors) to the
        slot whose question it is closest to, when close enough. ``recent`` takes the
        newest facts of the last 90 days that no other slot shows.
        """
        since = (now or _now()) - timedelta(days=RECENT_DAYS)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM facts f JOIN episodes e ON e.id = f.episode_id"
                " WHERE e.space = 'user' AND e.owner = ? ORDER BY f.id DESC LIMIT ?",
                (user_did, _CONTEXT_FACTS),
            ).fetchall()
            assigned = self._assign_slots(rows, user_did)
        context = empty_context()
        shown: set[int] = set()
        by_id = {row[0]: row for row in rows}
        for query in SLOTS:
            if query.slot == "recent":
                ids = [r[0] for r in rows if r[0] not in shown and r[4] >= since.isoformat()][
                    :MAX_FACTS_PER_SLOT
                ]
            else:
                ids = assigned.get(query.slot, [])[:MAX_FACTS_PER_SLOT]
            shown.update(ids)
            facts = [by_id[i][2] for i in ids]
            names = [n for i in ids for n in _entities(by_id[i][3])]
            context[query.slot] = format_slot(facts, names)
        return context

    # --- internals -----------------------------------------------------------------

    def _transaction(self) -> Any:
        return _Transaction(self._db)

    def _embed(self, texts: list[str]) -> Any:
        if self.embedder is None or not texts:
            return None
        return self.embedder.embed(texts)

    def _deletable(self, user_did: str, oracle_owner: str | None) -> tuple[str, list[str]]:
        where = "(space = 'user' AND owner = ?)"
        params = [user_did]
        if oracle_owner is not None:
            where += " OR (space = 'oracle' AND owner = ?)"
            params.append(oracle_owner)
        return where, params

    def _readable(
        self, user_did: str, oracle_did: str | None, owner: bool, level: KnowledgeLevel
    ) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if level in ("user", "both"):
            clauses.append("(e.space = 'user' AND e.owner = ?)")
            params.append(user_did)
        if level in ("oracle", "both") and oracle_did:
            visible = "" if owner else " AND e.visibility = 'public'"
            clauses.append(f"(e.space = 'oracle' AND e.owner = ?{visible})")
            params.append(oracle_did)
        return "(" + (" OR ".join(clauses) or "0") + ")", params

    def _lexical(self, text: str, scope: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        match = fts_query(text)
        if match is None:
            return []
        return self._db.execute(
            f"SELECT {_COLUMNS} FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
            f" JOIN episodes e ON e.id = f.episode_id WHERE facts_fts MATCH ? AND {scope}"
            " ORDER BY bm25(facts_fts) LIMIT ?",
            (match, *params, _CANDIDATES),
        ).fetchall()

    def _semantic(self, text: str, scope: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self.embedder is None or not text.strip():
            return []
        import numpy as np

        rows = self._db.execute(
            f"SELECT {_COLUMNS}, f.embedding FROM facts f JOIN episodes e ON e.id = f.episode_id"
            f" WHERE f.embedding_model = ? AND {scope}",
            (self.embedder.model_id, *params),
        ).fetchall()
        if not rows:
            return []
        matrix = np.frombuffer(b"".join(r[-1] for r in rows), dtype=np.float32)
        matrix = matrix.reshape(len(rows), -1)
        scores = matrix @ self.embedder.embed([text])[0]
        order = np.argsort(-scores)[:_CANDIDATES]
        return [rows[i][:-1] for i in order if scores[i] >= _MIN_SIMILARITY]

    def _assign_slots(self, rows: list[tuple[Any, ...]], user_did: str) -> dict[str, list[int]]:
        # A slot word in the fact decides (precise when it hits); otherwise, with vectors,
        # the closest slot question, if it is close enough. Rows are newest first.
        topical = [q for q in SLOTS if q.slot != "recent"]
        semantic = self._semantic_slots(user_did, topical)
        assigned: dict[str, list[int]] = {}
        for row in rows:
            words = {w.lower() for w in _WORD.findall(row[2])}
            slot = next((q.slot for q in topical if words & set(q.keywords)), None)
            slot = slot or semantic.get(row[0])
            if slot is not None:
                assigned.setdefault(slot, []).append(row[0])
        return assigned

    def _semantic_slots(self, user_did: str, topical: list[Any]) -> dict[int, str]:
        if self.embedder is None:
            return {}
        import numpy as np

        embedded = self._db.execute(
            "SELECT f.id, f.embedding FROM facts f JOIN episodes e ON e.id = f.episode_id"
            " WHERE e.space = 'user' AND e.owner = ? AND f.embedding_model = ?"
            " ORDER BY f.id DESC LIMIT ?",
            (user_did, self.embedder.model_id, _CONTEXT_FACTS),
        ).fetchall()
        if not embedded:
            return {}
        if self._slot_vectors is None:
            self._slot_vectors = self.embedder.embed([q.query for q in topical])
        matrix = np.frombuffer(b"".join(r[1] for r in embedded), dtype=np.float32)
        scores = matrix.reshape(len(embedded), -1) @ self._slot_vectors.T
        best = scores.argmax(axis=1)
        return {
            row[0]: topical[int(best[i])].slot
            for i, row in enumerate(embedded)
            if scores[i, best[i]] >= _SLOT_SIMILARITY
        }


_COLUMNS = "f.id, f.uuid, f.fact, f.entities, f.created_at, e.uuid, e.name, e.space"


def _entities(raw: str) -> list[str]:
    return [n for n in raw.split("\n") if n]


def _hit(row: tuple[Any, ...], score: float) -> FactHit:
    return FactHit(
        uuid=row[1],
        fact=row[2],
        entities=tuple(_entities(row[3])),
        created_at=row[4],
        episode_uuid=row[5],
        episode_name=row[6],
        space=row[7],
        score=round(score, 6),
    )


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
