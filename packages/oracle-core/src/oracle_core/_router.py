"""A built-in capability router: lexical matching of the user's words to manifests.

It costs no model call. Plug it in with
``MainAgentHooks(capability_router=LexicalCapabilityRouter())``; each turn it preloads
the ``on-demand`` plugins whose ``when_to_use``, tags and examples best match the
latest user message, so the model can use their tools without a ``load_capability``
round trip (CORE-64).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oracle_core._hooks import RouterInput
from oracle_core._manifest import PluginManifest

__all__ = ["LexicalCapabilityRouter"]

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "show",
        "tell",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "us",
        "use",
        "want",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)
# Field weights: tags and when_to_use are written to be matched; prose less so.
_WEIGHTS = {"tags": 2.0, "when_to_use": 1.5, "examples": 1.0, "title": 1.0, "summary": 0.5}


def _strip_suffix(word: str) -> str:
    for suffix in ("ing", "ies", "ed", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _stem(word: str) -> str:
    # Strip until stable ("meetings" and "meeting" both give "meet"), then drop a final
    # "e" so that "invoices" and "invoice" agree.
    stemmed = _strip_suffix(word)
    while stemmed != word:
        word, stemmed = stemmed, _strip_suffix(stemmed)
    return stemmed[:-1] if stemmed.endswith("e") and len(stemmed) > 3 else stemmed


def terms(text: str) -> list[str]:
    """Lower-case, stop-word-free, lightly stemmed terms of ``text``."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS]


def _document(manifest: PluginManifest) -> dict[str, float]:
    doc: dict[str, float] = {}
    fields = {
        "tags": " ".join(t.replace("-", " ") for t in manifest.tags),
        "when_to_use": " ".join(manifest.when_to_use),
        "examples": " ".join(e.user for e in manifest.examples),
        "title": manifest.title,
        "summary": manifest.summary,
    }
    for field, text in fields.items():
        for term in set(terms(text)):
            doc[term] = doc.get(term, 0.0) + _WEIGHTS[field]
    return doc


@dataclass
class LexicalCapabilityRouter:
    """Scores on-demand manifests against the user's words (BM25-like, no model call).

    Attributes:
        max_plugins: At most this many plugins are preloaded per turn.
        min_score: Absolute score a plugin needs to be preloaded.
        relative_cutoff: A plugin also needs this fraction of the best score.
    """

    max_plugins: int = 2
    min_score: float = 1.5
    relative_cutoff: float = 0.6

    def score(self, text: str, manifests: Mapping[str, PluginManifest]) -> dict[str, float]:
        """Score of every manifest for ``text`` (0 when nothing matches)."""
        docs = {name: _document(m) for name, m in manifests.items()}
        query = set(terms(text))
        n = len(docs) or 1
        scores: dict[str, float] = {}
        for name, doc in docs.items():
            total = 0.0
            for term in query:
                weight = doc.get(term)
                if not weight:
                    continue
                df = sum(1 for d in docs.values() if term in d)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += idf * weight
            scores[name] = total
        return scores

    async def __call__(self, request: RouterInput) -> Sequence[str]:
        candidates = {
            name: m for name, m in request.manifests.items() if name not in request.loaded_plugins
        }
        if not candidates or not request.text.strip():
            return []
        scores = self.score(request.text, candidates)
        best = max(scores.values(), default=0.0)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return [
            name
            for name, value in ranked[: self.max_plugins]
            if value >= self.min_score and value >= best * self.relative_cutoff
        ]
