"""The composio plugin's environment: the worker's key and address (03-plugins §6 item 2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEFAULT_BASE_URL", "ComposioConfig", "network_of", "wants_composio"]

DEFAULT_BASE_URL = "https://composio.ixo.earth"
"""The IXO composio-worker."""


class ComposioConfig(BaseModel):
    """Environment of the composio plugin.

    ``NETWORK`` is a core variable: the plugin reads it from ``ctx.config`` (and sends it
    as ``x-ixo-network``) without declaring it.

    Attributes:
        COMPOSIO_API_KEY: The worker's API key, sent as ``x-api-key``; the plugin's gate.
        COMPOSIO_BASE_URL: The worker's base URL; its ``did:web`` document is served at
            ``/.well-known/did.json`` of that origin.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    # repr=False: the key never shows in a log line or a traceback of the config.
    COMPOSIO_API_KEY: str = Field(
        min_length=1, repr=False, description="API key of the composio worker (x-api-key)."
    )
    COMPOSIO_BASE_URL: str = Field(
        DEFAULT_BASE_URL, description="Base URL of the IXO composio worker."
    )

    @field_validator("COMPOSIO_API_KEY")
    @classmethod
    def _key(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be blank")
        return value

    @field_validator("COMPOSIO_BASE_URL")
    @classmethod
    def _base_url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http:// or https:// URL (e.g. {DEFAULT_BASE_URL})")
        if parts.query or parts.fragment:
            raise ValueError("must not carry a query string or fragment")
        return value.rstrip("/")


def wants_composio(env: Mapping[str, str]) -> bool:
    """The plugin's auto-detect: Auto(``COMPOSIO_API_KEY``)."""
    return bool(env.get("COMPOSIO_API_KEY", "").strip())


def network_of(config: Mapping[str, Any]) -> str | None:
    """``NETWORK`` from the merged configuration, or ``None`` when unset."""
    network = config.get("NETWORK")
    return str(network) if network else None
