"""The firecrawl plugin's environment: where its Firecrawl MCP server is."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["FirecrawlConfig", "wants_firecrawl"]


class FirecrawlConfig(BaseModel):
    """Environment of the firecrawl plugin (03-plugins §4 item 2).

    Attributes:
        FIRECRAWL_MCP_URL: The Firecrawl MCP server's streamable-HTTP endpoint; the
            plugin's gate. The hosted server carries the API key in the path
            (``https://mcp.firecrawl.dev/<key>/v2/mcp``), so the plugin never logs it and
            validation errors never echo it.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    FIRECRAWL_MCP_URL: str = Field(
        description="Streamable-HTTP endpoint of the Firecrawl MCP server (http or https)."
    )

    @field_validator("FIRECRAWL_MCP_URL")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                "must be an http:// or https:// URL of the Firecrawl MCP server, "
                "e.g. https://mcp.firecrawl.dev/<api key>/v2/mcp"
            )
        if parts.fragment:
            raise ValueError("must not carry a #fragment")
        # Kept as given, trailing slash included: MCP endpoints are exact paths.
        return value


def wants_firecrawl(env: Mapping[str, str]) -> bool:
    """``auto_detect``: on when ``FIRECRAWL_MCP_URL`` is set (Auto(``FIRECRAWL_MCP_URL``))."""
    return bool(env.get("FIRECRAWL_MCP_URL", "").strip())
