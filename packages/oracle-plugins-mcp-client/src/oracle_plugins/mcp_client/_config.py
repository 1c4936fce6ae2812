"""``ORACLE_MCP_SERVERS``: the MCP servers the hub binds (plugins spec §20.3)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

__all__ = ["McpClientConfig", "McpServerSpec", "UcanGrant", "parse_servers"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class UcanGrant(BaseModel):
    """What each call's UCAN invocation grants: ``can`` on ``capability``."""

    model_config = ConfigDict(extra="forbid")

    capability: str = Field(min_length=1)
    can: str = Field(min_length=1)


class UcanAuth(BaseModel):
    """``{"ucan": {"capability": …, "can": …}}``."""

    model_config = ConfigDict(extra="forbid")

    ucan: UcanGrant


class McpServerSpec(BaseModel):
    """One server of ``ORACLE_MCP_SERVERS``.

    Attributes:
        name: Kebab-case; its tools are ``<name>__<tool>`` and its capability is ``name``.
        url: The streamable-HTTP endpoint.
        transport: ``streamable-http`` (the only transport of the current revisions).
        headers: Sent on every request (an API key); never logged.
        auth: ``none``, or a per-user UCAN invocation per call, addressed to the
            server's ``did:web``.
        tool_timeout_ms: How long one call may take (default 120 s).
        allow: Globs of the server's tool names to bind (default all).
        deny: Globs never bound; wins over ``allow``.
        on_demand: Its tools are found through ``list_capabilities`` and
            ``load_capability`` instead of being visible on every turn.
        title: How the capability is listed (default the name).
        summary: What the server is for, for the model and the router.
        when_to_use: When to use it (default from the summary).
        tags: Words the router matches.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    url: str
    transport: Literal["streamable-http"] = "streamable-http"
    headers: dict[str, str] = Field(default_factory=dict)
    auth: Literal["none"] | UcanAuth = "none"
    tool_timeout_ms: int | None = Field(default=None, gt=0)
    allow: list[str] = Field(default_factory=lambda: ["*"])
    deny: list[str] = Field(default_factory=list)
    on_demand: bool = False
    title: str | None = None
    summary: str | None = Field(default=None, max_length=120)
    when_to_use: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value) or "__" in value:
            raise ValueError("must be kebab-case ([a-z0-9-], starting with a letter)")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("transport", mode="before")
    @classmethod
    def _transport(cls, value: Any) -> Any:
        if value == "sse":
            raise ValueError(
                "the HTTP+SSE transport (deprecated since the 2025-03-26 revision) is not "
                "supported; use streamable-http"
            )
        return value

    @property
    def tool_timeout(self) -> float:
        """Seconds one call may take."""
        return self.tool_timeout_ms / 1000 if self.tool_timeout_ms else 120.0


_SERVERS = TypeAdapter(list[McpServerSpec])


def parse_servers(raw: str) -> list[McpServerSpec]:
    """The servers of a JSON list, or a ``ValueError`` that names fields, never values.

    Values are left out of the message on purpose: a header may carry an API key.
    """
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at position {exc.pos})") from None
    try:
        servers = _SERVERS.validate_python(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        ]
        raise ValueError("; ".join(problems)) from None
    names = [s.name for s in servers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"server names must be unique: {', '.join(twice)}")
    return servers


class McpClientConfig(BaseModel):
    """Environment of the ``mcp-client`` plugin.

    Attributes:
        ORACLE_MCP_SERVERS: A JSON list of ``McpServerSpec`` objects.
    """

    ORACLE_MCP_SERVERS: str = "[]"

    @field_validator("ORACLE_MCP_SERVERS")
    @classmethod
    def _servers(cls, value: str) -> str:
        parse_servers(value)
        return value

    @property
    def servers(self) -> list[McpServerSpec]:
        """The parsed servers."""
        return parse_servers(self.ORACLE_MCP_SERVERS)


def wants_servers(env: Mapping[str, str]) -> bool:
    """Auto(``ORACLE_MCP_SERVERS``): on when the variable is set and not an empty list."""
    raw = env.get("ORACLE_MCP_SERVERS", "").strip()
    return bool(raw) and raw != "[]"
