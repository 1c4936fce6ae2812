"""The skills registry's REST API over httpx: ``/capsules`` and ``/capsules/search``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from oracle_plugins.skills._auth import registry_headers

__all__ = [
    "DEFAULT_TIMEOUT",
    "CapsulePage",
    "Pagination",
    "RegistryCapsule",
    "SkillsRegistryClient",
    "SkillsRegistryError",
]

DEFAULT_TIMEOUT = httpx.Timeout(20.0, connect=5.0)
"""Per request: 5 s to connect, 20 s for each read, write and pool wait."""

_USER_AGENT = "oracle-plugins-skills/0.1.0"


class SkillsRegistryError(Exception):
    """A registry call that failed; the message is short and fit for the agent to read."""


class RegistryCapsule(BaseModel):
    """One capsule row as the registry sends it (the fields the tools use).

    The registry also sends ``license``, ``compatibility``, ``allowedTools``,
    ``metadata``, ``archiveSize``, ``ownerDid`` and ``oracleDid``; they are ignored.
    ``visibility`` is ``"private"`` on rows owned by the caller and absent (or
    ``"public"``) on the others.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    cid: str
    name: str
    description: str | None = None
    createdAt: str | None = None
    visibility: str | None = None

    @field_validator("description", "createdAt", "visibility", mode="before")
    @classmethod
    def _text_or_none(cls, value: Any) -> str | None:
        # Optional fields of another type are dropped, not a reason to lose the row.
        return value if isinstance(value, str) else None

    @property
    def private(self) -> bool:
        """Whether the row is the caller's own (published) skill."""
        return self.visibility == "private"


class Pagination(BaseModel):
    """The registry's page of ``GET /capsules``, passed to the agent unchanged."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    total: int
    limit: int
    offset: int
    hasMore: bool


@dataclass(frozen=True)
class CapsulePage:
    """One page of ``GET /capsules``.

    Attributes:
        capsules: The well-formed rows, in the registry's order (rows without a string
            ``cid`` or ``name`` are dropped and logged by count).
        pagination: The registry's page.
    """

    capsules: list[RegistryCapsule]
    pagination: Pagination


class SkillsRegistryClient:
    """The registry at ``base_url``, with one connection pool.

    Args:
        base_url: For example ``https://capsules.skills.ixo.earth`` (a path prefix is kept).
        network: Sent as ``X-IXO-Network`` (the registry's DID resolver routes by it).
        logger: Where failures are logged, by status only: queries are user data.
        timeout: Per-request timeouts.
        transport: Replaces the network transport (proxies, tests).
    """

    def __init__(
        self,
        base_url: str,
        *,
        network: str,
        logger: logging.Logger,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.network = network
        self._logger = logger
        # Redirects are followed; httpx drops Authorization when one leaves the origin.
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            follow_redirects=True,
            headers={"Accept": "application/json", "User-Agent": _USER_AGENT},
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def list_capsules(self, limit: int, offset: int, invocation: str | None) -> CapsulePage:
        """``GET {base}/capsules?limit=&offset=``.

        Raises:
            SkillsRegistryError: Transport failure, non-2xx status, or an answer without
                ``capsules`` and ``pagination``.
        """
        body = await self._get(
            "/capsules",
            {"limit": str(limit), "offset": str(offset)},
            invocation,
            "List skills",
        )
        try:
            pagination = Pagination.model_validate(body.get("pagination"))
        except ValidationError as exc:
            raise SkillsRegistryError(
                "List skills failed: the registry sent no valid pagination"
            ) from exc
        return CapsulePage(self._rows(body, "List skills"), pagination)

    async def search_capsules(
        self, q: str, limit: int, invocation: str | None
    ) -> list[RegistryCapsule]:
        """``GET {base}/capsules/search?q=&limit=``; the rows in the registry's order.

        Raises:
            SkillsRegistryError: Transport failure, non-2xx status, or an answer without
                ``capsules``.
        """
        body = await self._get(
            "/capsules/search", {"q": q, "limit": str(limit)}, invocation, "Search skills"
        )
        return self._rows(body, "Search skills")

    async def _get(
        self, path: str, params: Mapping[str, str], invocation: str | None, what: str
    ) -> Mapping[str, Any]:
        headers = registry_headers(self.network, invocation)
        try:
            response = await self._client.get(self.base_url + path, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            self._logger.warning("skills registry %s timed out (%s)", path, type(exc).__name__)
            raise SkillsRegistryError(
                f"{what} failed: the registry did not answer in time"
            ) from exc
        except httpx.HTTPError as exc:
            self._logger.warning("skills registry %s failed: %s", path, type(exc).__name__)
            raise SkillsRegistryError(
                f"{what} failed: the registry is unreachable ({type(exc).__name__})"
            ) from exc
        if not response.is_success:
            self._logger.warning("skills registry %s answered HTTP %s", path, response.status_code)
            raise SkillsRegistryError(f"{what} failed: {_status_text(response)}")
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SkillsRegistryError(f"{what} failed: the registry's answer is not JSON") from exc
        if not isinstance(body, dict):
            raise SkillsRegistryError(f"{what} failed: the registry's answer is not an object")
        return body

    def _rows(self, body: Mapping[str, Any], what: str) -> list[RegistryCapsule]:
        rows = body.get("capsules")
        if not isinstance(rows, list):
            raise SkillsRegistryError(f"{what} failed: the registry's answer has no capsules")
        capsules: list[RegistryCapsule] = []
        skipped = 0
        for row in rows:
            try:
                capsules.append(RegistryCapsule.model_validate(row))
            except ValidationError:
                skipped += 1
        if skipped:
            self._logger.warning("skills registry sent %d malformed capsule rows", skipped)
        return capsules


def _status_text(response: httpx.Response) -> str:
    # HTTP/2 and some HTTP/1.1 servers send no reason phrase; use the standard one.
    reason = response.reason_phrase or httpx.codes.get_reason_phrase(response.status_code)
    return f"HTTP {response.status_code} {reason}".rstrip()
