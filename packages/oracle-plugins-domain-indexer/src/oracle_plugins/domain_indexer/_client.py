"""The Domain Indexer's public REST API over httpx: ``/search`` and ``/domain-cards/{did}``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpx

__all__ = [
    "DEFAULT_TIMEOUT",
    "DomainIndexerBackend",
    "DomainIndexerError",
    "HttpDomainIndexer",
    "SearchQuery",
]

DEFAULT_TIMEOUT = httpx.Timeout(20.0, connect=5.0)
"""Per request: 5 s to connect, 20 s for each read, write and pool wait."""

_USER_AGENT = "oracle-plugins-domain-indexer/0.1.0"
# Characters a DID may keep in the path; "/", "?" and "#" are escaped so a crafted DID
# cannot reach another route of the indexer.
_DID_SAFE = ":@!$&'()*+,;=-._~"


class DomainIndexerError(Exception):
    """A lookup that failed; the message is short and fit for the agent to read."""


class SearchQuery(Protocol):
    """What a search needs (``DomainIndexerSearchArgs`` satisfies it)."""

    @property
    def query(self) -> str: ...

    @property
    def limit(self) -> int: ...

    @property
    def scopes(self) -> str | None: ...

    @property
    def filters(self) -> Mapping[str, str] | None: ...


class DomainIndexerBackend(Protocol):
    """Answers the two tools: the public indexer, or a local catalog of cards."""

    async def search(self, query: SearchQuery) -> Any:
        """The indexer's search response (JSON), unchanged.

        Raises:
            DomainIndexerError: The search failed.
        """
        ...

    async def get_card(self, did: str) -> Mapping[str, Any] | None:
        """The full domain card, or ``None`` when there is none for ``did``.

        Raises:
            DomainIndexerError: The lookup failed for another reason.
        """
        ...

    async def aclose(self) -> None:
        """Release connections or files."""
        ...


def search_params(query: SearchQuery) -> list[tuple[str, str]]:
    """Query-string parameters of ``GET /search``: ``q``, ``limit``, ``scopes``, filters."""
    params = [("q", query.query), ("limit", str(query.limit))]
    if query.scopes:
        params.append(("scopes", query.scopes))
    params.extend((key, value) for key, value in (query.filters or {}).items())
    return params


class HttpDomainIndexer:
    """The public Domain Indexer at ``base_url``; no authentication.

    Args:
        base_url: For example ``https://domain-indexer.ixo.earth`` (a path prefix is kept).
        logger: Where failures are logged, by status only: queries and DIDs are user data.
        timeout: Per-request timeouts.
        transport: Replaces the network transport (tests, proxies).
    """

    def __init__(
        self,
        base_url: str,
        *,
        logger: logging.Logger,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._logger = logger
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            follow_redirects=True,
            headers={"Accept": "application/json", "User-Agent": _USER_AGENT},
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def search(self, query: SearchQuery) -> Any:
        """``GET {base}/search?q=&limit=&scopes=&<filter>=…``; the JSON body, unchanged.

        Raises:
            DomainIndexerError: Transport failure, non-2xx status or a body that is not
                JSON; the message names the status and its reason phrase.
        """
        response = await self._get("/search", search_params(query), "search")
        if not response.is_success:
            self._logger.warning("domain indexer search answered HTTP %s", response.status_code)
            raise DomainIndexerError(f"Search failed: {_status_text(response)}")
        return _json(response, "search")

    async def get_card(self, did: str) -> Mapping[str, Any] | None:
        """``GET {base}/domain-cards/{did}``; ``None`` on 404.

        Raises:
            DomainIndexerError: Transport failure, another non-2xx status, or a body that
                is not a JSON object.
        """
        response = await self._get(f"/domain-cards/{quote(did, safe=_DID_SAFE)}", [], "card")
        if response.status_code == httpx.codes.NOT_FOUND:
            return None
        if not response.is_success:
            self._logger.warning(
                "domain indexer card lookup answered HTTP %s", response.status_code
            )
            raise DomainIndexerError(f"Failed to fetch domain card: {_status_text(response)}")
        card = _json(response, "card")
        if not isinstance(card, dict):
            raise DomainIndexerError("Failed to fetch domain card: the indexer sent no card object")
        return card

    async def _get(self, path: str, params: list[tuple[str, str]], what: str) -> httpx.Response:
        try:
            return await self._client.get(self.base_url + path, params=tuple(params))
        except httpx.TimeoutException as exc:
            self._logger.warning("domain indexer %s timed out (%s)", what, type(exc).__name__)
            raise DomainIndexerError("The Domain Indexer did not answer in time") from exc
        except httpx.HTTPError as exc:
            self._logger.warning("domain indexer %s failed: %s", what, type(exc).__name__)
            raise DomainIndexerError(
                f"The Domain Indexer is unreachable ({type(exc).__name__})"
            ) from exc


def _status_text(response: httpx.Response) -> str:
    # HTTP/2 and some HTTP/1.1 servers send no reason phrase; use the standard one.
    reason = response.reason_phrase or httpx.codes.get_reason_phrase(response.status_code)
    return f"HTTP {response.status_code} {reason}".rstrip()


def _json(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DomainIndexerError(
            f"The Domain Indexer sent a {what} answer that is not JSON"
        ) from exc
