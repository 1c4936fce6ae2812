"""Texts the models read: the sub-agent's description and prompt, and the entity-context mode."""

from __future__ import annotations

import re
from collections.abc import Set

__all__ = [
    "SUB_AGENT_DESCRIPTION",
    "SUB_AGENT_NAME",
    "SUB_AGENT_PROMPT",
    "entity_context_mode",
    "looks_like_did",
]

SUB_AGENT_NAME = "Domain Indexer Agent"
"""Exposed to the main agent as ``call_domain_indexer_agent``."""

# Sent to the main model on every call (the plugin is `always` visible): keep it short.
SUB_AGENT_DESCRIPTION = (
    "Looks up IXO entities (organizations, projects, DAOs, agents, compositions, events) "
    "in the Domain Indexer: finds them by name, topic or filters, and reads a domain card "
    "by DID (summary, overview, FAQ, URL, keywords). Put the entity names or DIDs and "
    "what to return in the task."
)

SUB_AGENT_PROMPT = """You are the Domain Indexer Agent: you look up entities of the IXO \
ecosystem (organizations, projects, DAOs, agents, compositions, events) in the IXO Domain \
Indexer for the main agent.

Your tools:
- `domain_indexer_search`: a web-search-like lookup; `query` is always required. Each hit \
has a `record`; its `summary`, `overview` and `faq` are the curated facts and `record.id` \
is the entity's DID.
- `get_domain_card`: one entity's card by DID, when you need its full summary, overview or \
FAQ. A DID the indexer does not know returns {"error": "Domain card not found"}.

How to work:
1. You get one task message and nothing else. If it lacks what you need (which entity, \
what to find out), STOP and say exactly what is missing; do not guess.
2. Given a DID, read its card. Otherwise search with the names or topic from the task, \
with filters or scopes only when the task asks for them; read a card only when the hits \
lack what was asked.
3. Answer from the tool results only: names, DIDs, the facts asked for, URLs. Compare \
several hits briefly. Say plainly when nothing matched or a tool failed.
4. Never call a tool with empty arguments. At most four tool calls; never repeat a call \
that failed twice. Then STOP."""

_DID_RE = re.compile(r"^did:[a-z0-9]+:[A-Za-z0-9._:%-]+$")
_MAX_DID_LENGTH = 200


def looks_like_did(value: object) -> bool:
    """Whether ``value`` has the shape of a DID (``did:<method>:<id>``, at most 200 chars).

    The current entity comes from the client; only DID-shaped values reach the prompt.
    """
    return isinstance(value, str) and len(value) <= _MAX_DID_LENGTH and bool(_DID_RE.match(value))


def entity_context_mode(did: str, available_plugins: Set[str]) -> str:
    """The operational mode while the user is in an entity's context.

    Args:
        did: The current entity's DID (already checked with ``looks_like_did``).
        available_plugins: Included plugins; portal and memory are mentioned only when
            they are there.

    Returns:
        The text of the ``operational_mode`` prompt slot.
    """
    lines = [
        f"Entity context: the user is working in the IXO entity {did}. Questions about "
        '"this", "it" or "here" are about that entity unless they say otherwise.',
        "- For what the entity is, its summary, overview or FAQ, call "
        "`call_domain_indexer_agent` with this DID in the task.",
    ]
    if "portal" in available_plugins:
        lines.append("- To show the user something or navigate in the portal, use the portal.")
    if "memory" in available_plugins:
        lines.append("- For what the user did or said before about it, use memory.")
    lines.append("- Workspace pages are not entities: never look a page up in the Domain Indexer.")
    return "\n".join(lines)
