"""Where the Domain Indexer is: ``DOMAIN_INDEXER_URL``, else the default of ``NETWORK``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DOMAIN_INDEXER_URLS",
    "DomainIndexerConfig",
    "resolve_base_url",
    "wants_domain_indexer",
]

DOMAIN_INDEXER_URLS: Mapping[str, str] = {
    "mainnet": "https://domain-indexer.ixo.earth",
    "testnet": "https://domain-indexer.testnet.ixo.earth",
    "devnet": "https://domain-indexer.devnet.ixo.earth",
}
"""The public Domain Indexer of each IXO network (``NETWORK``)."""

SQLITE_SCHEME = "sqlite:///"


class DomainIndexerConfig(BaseModel):
    """Environment of the domain-indexer plugin.

    ``NETWORK`` is a core variable: the plugin reads it from ``ctx.config`` and does not
    declare it.

    Attributes:
        DOMAIN_INDEXER_URL: Optional override of the indexer's base URL (a mirror or a
            staging build), or ``sqlite:///<path>`` for a local catalog of imported
            domain cards.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    DOMAIN_INDEXER_URL: str | None = Field(
        None, description="Base URL of the Domain Indexer, or sqlite:///<path> of a local catalog."
    )

    @field_validator("DOMAIN_INDEXER_URL")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if value.startswith(SQLITE_SCHEME):
            if not value.removeprefix(SQLITE_SCHEME):
                raise ValueError("sqlite:/// needs a path, e.g. sqlite:///./data/cards.sqlite")
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                "must be an http:// or https:// URL (e.g. https://domain-indexer.ixo.earth) "
                "or sqlite:///<path> of a local catalog"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not carry a query string or fragment")
        return value.rstrip("/")


def resolve_base_url(config: Mapping[str, Any], override: str | None) -> str:
    """The indexer location: the override, else the default URL of ``NETWORK``.

    Args:
        config: The merged configuration (``ctx.config``); ``NETWORK`` is read from it.
        override: ``DOMAIN_INDEXER_URL``, already validated.

    Returns:
        A base URL without a trailing slash, or a ``sqlite:///`` location. Without
        ``NETWORK`` (possible only with ``ORACLE_BACKEND=local``) mainnet is used.
    """
    if override:
        return override
    network = config.get("NETWORK") or "mainnet"
    return DOMAIN_INDEXER_URLS.get(str(network), DOMAIN_INDEXER_URLS["mainnet"])


def wants_domain_indexer(env: Mapping[str, str]) -> bool:
    """``auto_detect``: on, except for a local oracle that names no indexer and no network.

    With ``ORACLE_BACKEND=local`` and neither ``NETWORK`` nor ``DOMAIN_INDEXER_URL`` set,
    the operator has asked for an offline oracle; the public indexer is not contacted
    unless one of them says so.
    """
    if env.get("DOMAIN_INDEXER_URL") or env.get("NETWORK"):
        return True
    return env.get("ORACLE_BACKEND", "ixo") != "local"
