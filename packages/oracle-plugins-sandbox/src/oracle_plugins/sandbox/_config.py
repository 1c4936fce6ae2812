"""The sandbox plugin's environment and which backend it selects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = ["SandboxBackend", "SandboxConfig", "oracle_secrets", "wants_sandbox"]

SandboxBackend = Literal["remote", "embedded"]


class SandboxConfig(BaseModel):
    """Environment of the sandbox plugin (03-plugins §7 item 2).

    Attributes:
        SANDBOX_BACKEND: ``remote`` (a hosted sandbox at ``SANDBOX_MCP_URL``) or
            ``embedded`` (the ``oracle-sandbox`` server, started with the oracle).
            Unset: ``remote``.
        SANDBOX_MCP_URL: The hosted sandbox's MCP endpoint (streamable HTTP); the gate.
        SANDBOX_ROOT: Embedded: where the users' workspaces and the unpacked skills
            live. Default: ``sandbox`` beside the SQLite folder.
        SANDBOX_WALL_SECONDS: Embedded: real time a run may take.
        SANDBOX_CPU_SECONDS: Embedded: CPU time a run may use.
        SANDBOX_MEMORY_MB: Embedded: address space of each process of a run.
    """

    model_config = ConfigDict(validate_default=True)

    SANDBOX_BACKEND: SandboxBackend = "remote"
    SANDBOX_MCP_URL: str | None = None
    SANDBOX_ROOT: str | None = None
    SANDBOX_WALL_SECONDS: float = Field(60.0, gt=0, le=600)
    SANDBOX_CPU_SECONDS: int = Field(30, gt=0, le=3600)
    SANDBOX_MEMORY_MB: int = Field(1024, ge=64, le=65536)

    @field_validator("SANDBOX_MCP_URL")
    @classmethod
    def _mcp_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            value = value.strip()
            if not value.startswith(("http://", "https://")):
                raise ValueError("must be an http:// or https:// URL")
        if not value and info.data.get("SANDBOX_BACKEND", "remote") == "remote":
            raise ValueError("required with the remote sandbox (or SANDBOX_BACKEND=embedded)")
        return value or None


def wants_sandbox(env: Mapping[str, str]) -> bool:
    """The plugin's auto-detect: a hosted sandbox's URL (Auto(``SANDBOX_MCP_URL``)).

    The embedded sandbox runs model-written code on this machine, so it is never picked
    implicitly: ``SANDBOX_BACKEND=embedded`` or ``features={"sandbox": True}`` chooses it.
    """
    return bool(env.get("SANDBOX_MCP_URL", "").strip())


def oracle_secrets(raw: object) -> dict[str, str]:
    """``ORACLE_SECRETS`` (``KEY=value,…``) as name → value; entries without a name or a
    value are skipped, so a stray comma cannot break a request."""
    secrets: dict[str, str] = {}
    for pair in str(raw or "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip() and value.strip():
            secrets[key.strip()] = value.strip()
    return secrets
