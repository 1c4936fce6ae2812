"""The sub-agent's two tools: ``domain_indexer_search`` and ``get_domain_card``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator

from oracle_core import PluginTool, RuntimeContext, plugin_tool
from oracle_plugins.domain_indexer._client import DomainIndexerBackend, DomainIndexerError

__all__ = [
    "CARD_FIELDS",
    "FILTER_KEYS",
    "SEARCH_SCOPES",
    "DomainIndexerSearchArgs",
    "GetDomainCardArgs",
    "build_tools",
    "trim_domain_card",
]

SEARCH_SCOPES: tuple[str, ...] = ("domain_cards", "agents", "compositions", "events")
"""What ``/search`` can look through; ``domain_cards`` is the indexer's default."""

FILTER_KEYS: tuple[str, ...] = (
    "dc.categories",
    "dc.entity_type",
    "dc.entity_verified",
    "dc.keywords",
    "dc.issuer",
    "dc.has_url",
    "dc.has_logo",
    "dc.valid_from_gte",
    "dc.valid_from_lte",
    "dc.bbox",
    "dc.near",
    "dc.radius",
    "agent.domain_card_id",
    "agent.has_url",
    "comp.domain_card_id",
    "comp.creator",
    "comp.has_url",
    "event.domain_card_id",
    "event.from",
    "event.to",
    "event.location",
)
"""Filters the indexer documents. Others with the same prefixes are passed through."""

CARD_FIELDS: tuple[str, ...] = (
    "id",
    "name",
    "description",
    "summary",
    "overview",
    "faq",
    "url",
    "keywords",
    "entity_type",
)
"""The fields ``get_domain_card`` keeps; the full card is much larger."""

_LIST_FIELDS = frozenset({"faq", "keywords", "entity_type"})
# A filter is "<scope prefix>.<name>"; anything else (q, limit, scopes…) would overwrite
# the search's own parameters.
_FILTER_KEY_RE = re.compile(r"^(dc|agent|comp|event)\.[a-z][a-z0-9_]*$")
_MAX_FILTERS = 20
_UNEXPECTED = "the Domain Indexer lookup failed unexpectedly; try again later"

SEARCH_DESCRIPTION = (
    "Search the IXO Domain Indexer like a web search: entity names, topics or keywords "
    "in `query` (never empty). Returns the indexer's JSON; each hit's `record` holds the "
    "entity, with `summary`, `overview` and `faq` when curated, and its DID in `record.id`. "
    "Optional: `limit` (1-10, default 10); `scopes`, comma-separated: domain_cards "
    "(default: organizations, projects, DAOs), agents, compositions, events; `filters`, "
    'string values, lists comma-separated, booleans "true"/"false", dates ISO 8601: '
    "dc.entity_type (exact chain type: dao, dao/pod, dao/protocol…), dc.entity_verified, "
    "dc.categories, dc.keywords, dc.issuer, dc.has_url, dc.has_logo, "
    "dc.valid_from_gte, dc.valid_from_lte, dc.bbox (minLng,minLat,maxLng,maxLat), "
    "dc.near (lng,lat) with dc.radius, agent.domain_card_id, agent.has_url, "
    "comp.domain_card_id, comp.creator, comp.has_url, event.domain_card_id, event.from, "
    "event.to, event.location."
)

CARD_DESCRIPTION = (
    "Read one domain card by DID (e.g. from a search hit's `record.id`): id, name, "
    "description, summary, overview, faq, url, keywords and entity_type. Returns "
    '{"error": "Domain card not found"} when the indexer has no card for the DID.'
)


class DomainIndexerSearchArgs(BaseModel):
    """Arguments of ``domain_indexer_search``."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=500,
        description="What to look for: an entity name, topic or keywords. Required.",
    )
    limit: int = Field(10, ge=1, le=10, description="How many results, 1-10.")
    scopes: str | None = Field(
        None,
        description="Comma-separated: domain_cards (default), agents, compositions, events.",
    )
    filters: dict[str, str] | None = Field(
        None,
        description='Filter name → string value, e.g. {"dc.entity_type": "dao/pod"}.',
    )

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be blank: give the name, topic or keywords to find")
        return value.strip()

    @field_validator("scopes")
    @classmethod
    def _known_scopes(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scopes = list(dict.fromkeys(s.strip() for s in value.split(",") if s.strip()))
        unknown = [s for s in scopes if s not in SEARCH_SCOPES]
        if unknown:
            raise ValueError(
                f"unknown scope(s) {', '.join(unknown)}; use {', '.join(SEARCH_SCOPES)}"
            )
        return ",".join(scopes) or None

    @field_validator("filters")
    @classmethod
    def _filter_keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if not value:
            return None
        if len(value) > _MAX_FILTERS:
            raise ValueError(f"at most {_MAX_FILTERS} filters")
        bad = [key for key in value if not _FILTER_KEY_RE.match(key)]
        if bad:
            raise ValueError(
                f"filter name(s) {', '.join(map(repr, bad))} are not indexer filters; "
                "names look like dc.entity_type or agent.domain_card_id "
                f"(known: {', '.join(FILTER_KEYS)})"
            )
        empty = [key for key, item in value.items() if not item.strip()]
        if empty:
            raise ValueError(f"filter(s) {', '.join(empty)} have an empty value; omit them")
        return {key: item.strip() for key, item in value.items()}


class GetDomainCardArgs(BaseModel):
    """Arguments of ``get_domain_card``."""

    model_config = ConfigDict(extra="forbid")

    did: str = Field(
        min_length=1,
        max_length=300,
        description="The entity's DID, e.g. did:ixo:entity:… (a search hit's record.id).",
    )

    @field_validator("did")
    @classmethod
    def _did_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("did must not be blank: pass the entity's DID")
        return value.strip()


def trim_domain_card(card: Mapping[str, Any]) -> dict[str, Any]:
    """The card reduced to ``CARD_FIELDS``; ``faq``, ``keywords``, ``entity_type`` as lists.

    Args:
        card: The full domain card as the indexer returns it.

    Returns:
        ``{id, name, description, summary, overview, faq, url, keywords, entity_type}``;
        absent scalars are ``None``, absent lists ``[]``, a lone value becomes a list.
    """
    trimmed: dict[str, Any] = {}
    for name in CARD_FIELDS:
        value = card.get(name)
        if name in _LIST_FIELDS:
            if value is None:
                value = []
            elif not isinstance(value, list):
                value = [value]
        trimmed[name] = value
    return trimmed


def _tool_error(rt_ctx: RuntimeContext[Any], tool: str, message: str) -> ToolMessage | str:
    """An error result the model reads as a failed call (``status="error"``)."""
    if rt_ctx.tool_call_id is None:
        return f"Error: {message}"
    return ToolMessage(
        content=f"Error: {message}", tool_call_id=rt_ctx.tool_call_id, name=tool, status="error"
    )


def build_tools(backend: DomainIndexerBackend) -> list[PluginTool]:
    """The sub-agent's tools over ``backend``.

    Handlers never raise into the graph: failures come back as error ToolMessages whose
    text names the status (``Error: Search failed: HTTP 500 Internal Server Error``).
    """

    @plugin_tool(
        name="domain_indexer_search",
        description=SEARCH_DESCRIPTION,
        args_schema=DomainIndexerSearchArgs,
        effect="read",
    )
    async def domain_indexer_search(
        args: DomainIndexerSearchArgs, rt_ctx: RuntimeContext[Any]
    ) -> Any:
        try:
            return await backend.search(args)
        except DomainIndexerError as exc:
            return _tool_error(rt_ctx, "domain_indexer_search", str(exc))
        except Exception:
            rt_ctx.logger.exception("domain_indexer_search failed unexpectedly")
            return _tool_error(rt_ctx, "domain_indexer_search", _UNEXPECTED)

    @plugin_tool(
        name="get_domain_card",
        description=CARD_DESCRIPTION,
        args_schema=GetDomainCardArgs,
        effect="read",
    )
    async def get_domain_card(args: GetDomainCardArgs, rt_ctx: RuntimeContext[Any]) -> Any:
        try:
            card = await backend.get_card(args.did)
        except DomainIndexerError as exc:
            return _tool_error(rt_ctx, "get_domain_card", str(exc))
        except Exception:
            rt_ctx.logger.exception("get_domain_card failed unexpectedly")
            return _tool_error(rt_ctx, "get_domain_card", _UNEXPECTED)
        if card is None:
            return {"error": "Domain card not found"}
        return trim_domain_card(card)

    return [domain_indexer_search, get_domain_card]
