"""The Domain Indexer's two public routes on loopback, answering from fixture JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from oracle_server.testing import LoopbackServer

__all__ = ["ERROR_DID", "DomainIndexerDouble", "RecordedRequest", "load_fixtures"]

ERROR_DID = "did:ixo:entity:00000000000000000000000000000500"
"""Looking this DID up makes the double answer ``500 Internal Server Error``."""

SCOPES = ("domain_cards", "agents", "compositions", "events")
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_TRUE = "true"
Record = Mapping[str, Any]
Check = Callable[[Record, str], bool]


def load_fixtures() -> dict[str, list[dict[str, Any]]]:
    """The bundled fixtures: four domain cards, two agents, a composition, two events."""
    text = files("oracle_plugins.domain_indexer.testing").joinpath("fixtures.json").read_text()
    data: dict[str, list[dict[str, Any]]] = json.loads(text)
    return data


@dataclass(frozen=True)
class RecordedRequest:
    """One request the double received.

    Attributes:
        path: The decoded path, e.g. ``/search`` or ``/domain-cards/did:ixo:entity:…``.
        params: Query parameters in order, repeated names kept.
        headers: Header names in lower case.
    """

    path: str
    params: list[tuple[str, str]]
    headers: dict[str, str]

    def param(self, name: str) -> str | None:
        """The first value of ``name``, or ``None``."""
        return next((value for key, value in self.params if key == name), None)


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v).lower() for v in (value if isinstance(value, list) else [value])]


def _csv(value: str) -> set[str]:
    return {v.strip().lower() for v in value.split(",") if v.strip()}


def _has(field: str) -> Check:
    return lambda record, value: bool(record.get(field)) == (value.lower() == _TRUE)


def _equals(field: str) -> Check:
    return lambda record, value: str(record.get(field) or "") == value


def _any_of(field: str) -> Check:
    return lambda record, value: bool(_csv(value) & set(_listed(record.get(field))))


# Filter name → (scope it applies to, check). Geo filters (dc.bbox, dc.near, dc.radius)
# are not modelled: the double answers 400 so a test never passes on an ignored filter.
FILTERS: dict[str, tuple[str, Check]] = {
    "dc.entity_type": ("domain_cards", lambda r, v: v.lower() in _listed(r.get("entity_type"))),
    "dc.entity_verified": (
        "domain_cards",
        lambda r, v: bool(r.get("entity_verified")) == (v.lower() == _TRUE),
    ),
    "dc.categories": ("domain_cards", _any_of("categories")),
    "dc.keywords": ("domain_cards", _any_of("keywords")),
    "dc.issuer": ("domain_cards", _equals("issuer")),
    "dc.has_url": ("domain_cards", _has("url")),
    "dc.has_logo": ("domain_cards", _has("logo")),
    "dc.valid_from_gte": ("domain_cards", lambda r, v: str(r.get("valid_from") or "") >= v),
    "dc.valid_from_lte": (
        "domain_cards",
        lambda r, v: bool(r.get("valid_from")) and str(r.get("valid_from")) <= v,
    ),
    "agent.domain_card_id": ("agents", _equals("domain_card_id")),
    "agent.has_url": ("agents", _has("url")),
    "comp.domain_card_id": ("compositions", _equals("domain_card_id")),
    "comp.creator": ("compositions", _equals("creator")),
    "comp.has_url": ("compositions", _has("url")),
    "event.domain_card_id": ("events", _equals("domain_card_id")),
    "event.from": ("events", lambda r, v: str(r.get("start") or "") >= v),
    "event.to": ("events", lambda r, v: bool(r.get("start")) and str(r.get("start")) <= v),
    "event.location": ("events", lambda r, v: v.lower() in str(r.get("location") or "").lower()),
}


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return " ".join(_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return "" if value is None else str(value)


def _score(record: Record, tokens: Sequence[str]) -> float:
    fields = ("name", "description", "summary", "overview", "keywords", "faq", "location")
    words = set(_TOKEN_RE.findall(_text([record.get(f) for f in fields]).lower()))
    matched = sum(1 for token in tokens if token in words)
    return round(matched / len(tokens), 4)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"statusCode": status, "error": message}, status_code=status)


class DomainIndexerDouble(LoopbackServer):
    """``GET /search`` and ``GET /domain-cards/{did}`` of the Domain Indexer, on loopback.

    Search matches the words of ``q`` against each record's text; it honours ``limit``
    (1-50, default 10), ``scopes`` (default ``domain_cards``) and the filters in
    ``FILTERS``, and answers 400 for anything else. A card lookup answers the full card,
    404 for an unknown DID and 500 for ``error_did``.

    Args:
        fixtures: Records per scope; the bundled ``load_fixtures()`` by default.
        error_did: The DID whose lookup fails with 500.

    Attributes:
        requests: Every request received, in order.
        search_status: Set to a status code (e.g. 503) to make every search fail with it.
    """

    name = "DomainIndexerDouble"

    def __init__(
        self,
        fixtures: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        *,
        error_did: str = ERROR_DID,
    ) -> None:
        data = load_fixtures() if fixtures is None else fixtures
        self.records: dict[str, list[dict[str, Any]]] = {
            scope: [dict(r) for r in data.get(scope, ())] for scope in SCOPES
        }
        self.error_did = error_did
        self.requests: list[RecordedRequest] = []
        self.search_status: int | None = None
        super().__init__(
            [
                Route("/search", self._search, methods=["GET"]),
                Route("/domain-cards/{did:path}", self._card, methods=["GET"]),
            ]
        )

    @property
    def base_url(self) -> str:
        """``DOMAIN_INDEXER_URL`` for the oracle."""
        return self.origin

    def card(self, did: str) -> dict[str, Any]:
        """The full fixture card of ``did`` (``KeyError`` when there is none)."""
        for record in self.records["domain_cards"]:
            if record["id"] == did:
                return record
        raise KeyError(did)

    def searches(self) -> list[RecordedRequest]:
        """The ``/search`` requests received."""
        return [r for r in self.requests if r.path == "/search"]

    def _record(self, request: Request) -> None:
        self.requests.append(
            RecordedRequest(
                path=request.url.path,
                params=list(request.query_params.multi_items()),
                headers={k.lower(): v for k, v in request.headers.items()},
            )
        )

    async def _search(self, request: Request) -> Response:
        self._record(request)
        if self.search_status is not None:
            return _error(self.search_status, "search unavailable")
        params = request.query_params
        query = (params.get("q") or "").strip()
        if not query:
            return _error(400, "q is required")
        try:
            limit = int(params.get("limit", "10"))
        except ValueError:
            return _error(400, "limit must be an integer")
        if not 1 <= limit <= 50:
            return _error(400, "limit must be between 1 and 50")
        scopes = [s.strip() for s in params.get("scopes", "domain_cards").split(",") if s.strip()]
        unknown = [s for s in scopes if s not in SCOPES]
        if unknown or not scopes:
            return _error(400, f"unknown scopes: {', '.join(unknown)}")
        filters: list[tuple[str, Check, str]] = []
        for key, value in params.multi_items():
            if key in ("q", "limit", "scopes"):
                continue
            if key not in FILTERS:
                return _error(400, f"unsupported filter: {key}")
            scope, check = FILTERS[key]
            filters.append((scope, check, value))
        tokens = list(dict.fromkeys(t.lower() for t in _TOKEN_RE.findall(query)))
        hits = []
        for scope in scopes:
            for record in self.records[scope]:
                if not all(check(record, value) for s, check, value in filters if s == scope):
                    continue
                score = _score(record, tokens)
                if score > 0:
                    hits.append(
                        {"scope": scope, "id": record["id"], "score": score, "record": record}
                    )
        hits.sort(key=lambda hit: (-hit["score"], hit["id"]))
        return JSONResponse(
            {"query": query, "scopes": scopes, "total": len(hits), "results": hits[:limit]}
        )

    async def _card(self, request: Request) -> Response:
        self._record(request)
        did = request.path_params["did"]
        if did == self.error_did:
            return _error(500, "internal error")
        try:
            return JSONResponse(self.card(did))
        except KeyError:
            return _error(404, "domain card not found")
