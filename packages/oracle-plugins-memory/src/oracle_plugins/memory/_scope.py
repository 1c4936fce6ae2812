"""The tool policy's read scope for memory (plugins spec §20.1 ``data_scopes``).

``data_scopes.memory.knowledge_level`` (``"user"`` or ``"oracle"``) narrows every search
the model makes (the search tool, embedded or the engine's) to that side of the knowledge,
whatever it asks for; ``"both"`` or no scope leaves the model's choice. The prompt's user
context is the user's own memory shown to that user, and is read as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

__all__ = ["scoped_knowledge_level"]

KnowledgeLevel = Literal["user", "oracle", "both"]


def scoped_knowledge_level(requested: str, scope: Mapping[str, Any]) -> KnowledgeLevel:
    """The level a search may read: the scope's when it sets ``user`` or ``oracle``."""
    allowed = scope.get("knowledge_level")
    if allowed in ("user", "oracle"):
        return cast(KnowledgeLevel, allowed)
    return cast(KnowledgeLevel, requested)
