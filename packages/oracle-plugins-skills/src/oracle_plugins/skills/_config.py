"""Where the skills registry is, and which IXO network its requests name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DEFAULT_CAPSULES_BASE_URL",
    "DEFAULT_NETWORK",
    "SkillsConfig",
    "capsules_base_url",
    "registry_network",
]

DEFAULT_CAPSULES_BASE_URL = "https://capsules.skills.ixo.earth"
"""The public IXO skills registry (ai-skills)."""

DEFAULT_NETWORK = "mainnet"
"""``X-IXO-Network`` when ``NETWORK`` is unset (possible only with ``ORACLE_BACKEND=local``)."""


def _base_url(value: str) -> str:
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http:// or https:// URL, e.g. {DEFAULT_CAPSULES_BASE_URL}")
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query string or fragment")
    return value.rstrip("/")


class SkillsConfig(BaseModel):
    """Environment of the skills plugin (03-plugins §8 item 2).

    ``NETWORK`` is a core variable: the plugin reads it from ``ctx.config`` and sends it
    as ``X-IXO-Network``; it does not declare it.

    Attributes:
        SKILLS_CAPSULES_BASE_URL: Base URL of the capsule registry; a path prefix is kept
            (``{base}/capsules``). The sandbox plugin reads it too, to mint the
            ``X-Skills-Invocation`` header for the same registry.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, validate_default=True)

    SKILLS_CAPSULES_BASE_URL: str = Field(
        DEFAULT_CAPSULES_BASE_URL, description="Base URL of the skills capsule registry."
    )

    @field_validator("SKILLS_CAPSULES_BASE_URL")
    @classmethod
    def _url(cls, value: str) -> str:
        return _base_url(value)


def capsules_base_url(config: Mapping[str, Any]) -> str:
    """The registry's base URL from a merged configuration (``ctx.config``).

    For code outside the plugin, e.g. the sandbox plugin: ``SKILLS_CAPSULES_BASE_URL``
    when set, else the public registry.

    Raises:
        ValueError: ``SKILLS_CAPSULES_BASE_URL`` is not an http(s) URL.
    """
    value = config.get("SKILLS_CAPSULES_BASE_URL")
    return _base_url(str(value)) if value else DEFAULT_CAPSULES_BASE_URL


def registry_network(config: Mapping[str, Any]) -> str:
    """The ``X-IXO-Network`` value: ``NETWORK``, else ``mainnet``."""
    network = config.get("NETWORK")
    return str(network) if network else DEFAULT_NETWORK
