"""The memory plugin's environment and which backend it selects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["Backend", "MemoryConfig", "select_backend", "wants_memory"]

Backend = Literal["remote", "embedded"]


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


class MemoryConfig(BaseModel):
    """Environment of the memory plugin (03-plugins §2 item 2).

    Attributes:
        MEMORY_BACKEND: ``remote`` (a Memory Engine) or ``embedded`` (SQLite in process).
            Unset: ``remote`` when ``MEMORY_MCP_URL`` is set, else ``embedded``.
        MEMORY_MCP_URL: The engine's MCP endpoint (streamable HTTP); the plugin's gate.
        MEMORY_ENGINE_URL: The engine's REST API (user context, history ingestion);
            required with the remote backend.
        MEMORY_EMBEDDING_MODEL_PATH: A directory holding ``model.onnx`` and
            ``tokenizer.json`` of a sentence-embedding model, used instead of the packaged
            one by the embedded backend; never downloaded.
        MEMORY_ORACLE_OWNER_DIDS: Comma-separated DIDs allowed to write oracle knowledge
            in the embedded backend (the owners or controllers of the oracle entity).
    """

    # Unset fields are validated too: MEMORY_ENGINE_URL is required depending on the others.
    model_config = ConfigDict(validate_default=True)

    MEMORY_BACKEND: Backend | None = None
    MEMORY_MCP_URL: str | None = None
    MEMORY_ENGINE_URL: str | None = None
    MEMORY_EMBEDDING_MODEL_PATH: str | None = None
    MEMORY_ORACLE_OWNER_DIDS: str = ""

    @field_validator("MEMORY_MCP_URL")
    @classmethod
    def _mcp_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = _http_url(value)
        if value is None and info.data.get("MEMORY_BACKEND") == "remote":
            raise ValueError("required with MEMORY_BACKEND=remote")
        return value

    @field_validator("MEMORY_ENGINE_URL")
    @classmethod
    def _engine_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        value = _http_url(value)
        remote = select_backend(info.data.get("MEMORY_BACKEND"), info.data.get("MEMORY_MCP_URL"))
        if value is None and remote == "remote":
            raise ValueError("required with the remote memory backend (MEMORY_MCP_URL is set)")
        return value

    @property
    def backend(self) -> Backend:
        """The backend this environment selects."""
        return select_backend(self.MEMORY_BACKEND, self.MEMORY_MCP_URL)

    @property
    def oracle_owner_dids(self) -> frozenset[str]:
        """``MEMORY_ORACLE_OWNER_DIDS`` as a set."""
        return frozenset(d.strip() for d in self.MEMORY_ORACLE_OWNER_DIDS.split(",") if d.strip())


def select_backend(backend: str | None, mcp_url: str | None) -> Backend:
    """``MEMORY_BACKEND`` when set, else ``remote`` with an MCP URL and ``embedded`` without."""
    if backend in ("remote", "embedded"):
        return backend  # type: ignore[return-value]
    return "remote" if mcp_url else "embedded"


def wants_memory(env: Mapping[str, str]) -> bool:
    """The plugin's auto-detect: a Memory Engine URL (Auto(``MEMORY_MCP_URL``)).

    The embedded backend is the runtime's choice, from the manifest's ``backends``:
    with ``MEMORY_BACKEND=embedded``, when the plugin is forced on, or in local mode.
    """
    return bool(env.get("MEMORY_MCP_URL", "").strip())
