"""The vfs plugin's environment: limits, which backend, and where the services are.

``NETWORK``, ``ORACLE_DID`` and ``PORT`` are core variables, and ``SANDBOX_MCP_URL``
belongs to the sandbox plugin: the plugin reads them from ``ctx.config`` (see
:class:`VfsReads`) and never declares them, so their absence skips a feature instead of
failing boot and no variable has two owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "MAX_READ_LINES_CAP",
    "UCAN_STORE_URLS",
    "VFS_URLS",
    "VfsBackendName",
    "VfsConfig",
    "VfsReads",
    "wants_remote",
]

VfsBackendName = Literal["remote", "embedded"]

MAX_READ_LINES_CAP = 5000
"""Lines one ``vfs_read`` returns at most, whatever ``VFS_MAX_READ_LINES`` says."""

VFS_URLS: Mapping[str, str] = {
    "mainnet": "https://vfs.ixo.earth",
    "testnet": "https://testnet.vfs.ixo.earth",
    "devnet": "https://devnet.vfs.ixo.earth",
}
"""The IXO VFS worker of each network."""

UCAN_STORE_URLS: Mapping[str, str] = {
    "mainnet": "https://store.ucan.ixo.earth",
    "testnet": "https://testnet.store.ucan.ixo.earth",
    "devnet": "https://devnet.store.ucan.ixo.earth",
}
"""The UCAN Store of each network (where users' delegations to oracles are kept)."""

_DEFAULT_NETWORK = "devnet"


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query string or fragment")
    return value.rstrip("/")


class VfsConfig(BaseModel):
    """Environment of the vfs plugin (03-plugins §17 item 2).

    Attributes:
        VFS_BACKEND: ``remote`` (the IXO VFS worker, two-hop UCAN) or ``embedded`` (a
            local directory, no UCAN). Unset: ``embedded`` when ``VFS_LOCAL_ROOT`` is
            set, else ``remote``; the runtime sets it to ``embedded`` when it chooses
            that backend (forced on, or ``ORACLE_BACKEND=local``).
        VFS_MAX_READ_LINES: Lines one ``vfs_read`` returns by default and at most
            (never above 5,000).
        VFS_REQUEST_TIMEOUT_MS: Timeout of each request to the worker or the store.
        VFS_URL: The VFS worker; default from ``NETWORK`` (unset: devnet).
        UCAN_STORE_URL: The UCAN Store; default from ``NETWORK`` (unset: devnet).
        VFS_LOCAL_ROOT: Embedded: the directory holding the users' files.
        VFS_PUBLIC_BASE_URL: Embedded: the base of share links
            (``{base}/vfs/public/{token}``); default ``http://127.0.0.1:<PORT>``.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    VFS_BACKEND: VfsBackendName | None = None
    VFS_MAX_READ_LINES: int = Field(2000, gt=0, description="Lines per vfs_read at most.")
    VFS_REQUEST_TIMEOUT_MS: int = Field(20000, gt=0, description="Per-request timeout (ms).")
    VFS_URL: str | None = Field(None, description="The VFS worker (default from NETWORK).")
    UCAN_STORE_URL: str | None = Field(None, description="The UCAN Store (default from NETWORK).")
    VFS_LOCAL_ROOT: str | None = Field(None, description="Embedded: root of the users' files.")
    VFS_PUBLIC_BASE_URL: str | None = Field(None, description="Embedded: base of share links.")

    @field_validator("VFS_URL", "UCAN_STORE_URL", "VFS_PUBLIC_BASE_URL")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @property
    def backend(self) -> VfsBackendName:
        """The backend this environment selects."""
        if self.VFS_BACKEND is not None:
            return self.VFS_BACKEND
        return "embedded" if self.VFS_LOCAL_ROOT else "remote"

    @property
    def max_read_lines(self) -> int:
        """``VFS_MAX_READ_LINES``, capped at 5,000."""
        return min(self.VFS_MAX_READ_LINES, MAX_READ_LINES_CAP)

    @property
    def timeout_seconds(self) -> float:
        """``VFS_REQUEST_TIMEOUT_MS`` in seconds."""
        return self.VFS_REQUEST_TIMEOUT_MS / 1000


def wants_remote(env: Mapping[str, str]) -> bool:
    """``auto_detect``: ready on its own, except in local mode with nothing named.

    ``ORACLE_BACKEND=local`` without ``VFS_BACKEND`` or ``VFS_LOCAL_ROOT`` is not ready,
    so the runtime picks the embedded backend from the manifest's ``backends`` and sets
    ``VFS_BACKEND=embedded``: a local oracle has no signing key for the worker.
    """
    if (env.get("VFS_BACKEND") or "").strip() or (env.get("VFS_LOCAL_ROOT") or "").strip():
        return True
    return (env.get("ORACLE_BACKEND") or "").strip() != "local"


@dataclass(frozen=True)
class VfsReads:
    """What the plugin reads from variables it does not own (a sibling of the config).

    Attributes:
        network: ``NETWORK`` (``mainnet``, ``testnet`` or ``devnet``), ``devnet`` when unset.
        oracle_did: ``ORACLE_DID``: the audience of the users' delegations; ``None`` in
            local mode.
        port: ``PORT`` the server listens on (3000 unset).
        sandbox_mcp_url: ``SANDBOX_MCP_URL``: set when the sandbox plugin is loaded on a
            hosted sandbox; the bridge tools need a sandbox.
    """

    network: str
    oracle_did: str | None
    port: int
    sandbox_mcp_url: str | None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VfsReads:
        """Read them from a merged configuration (``ctx.config``)."""
        network = str(config.get("NETWORK") or _DEFAULT_NETWORK)
        if network not in VFS_URLS:
            network = _DEFAULT_NETWORK
        port = config.get("PORT")
        sandbox = config.get("SANDBOX_MCP_URL")
        return cls(
            network=network,
            oracle_did=str(config["ORACLE_DID"]) if config.get("ORACLE_DID") else None,
            port=int(port) if port else 3000,
            sandbox_mcp_url=str(sandbox) if sandbox else None,
        )

    def vfs_url(self, config: VfsConfig) -> str:
        """``VFS_URL``, else the network's worker."""
        return config.VFS_URL or VFS_URLS[self.network]

    def ucan_store_url(self, config: VfsConfig) -> str:
        """``UCAN_STORE_URL``, else the network's store."""
        return config.UCAN_STORE_URL or UCAN_STORE_URLS[self.network]

    def public_base_url(self, config: VfsConfig) -> str:
        """Embedded share links: ``VFS_PUBLIC_BASE_URL``, else this server on loopback.

        The runtime exposes no public URL of its own, so without the variable the links
        only work on this machine.
        """
        return config.VFS_PUBLIC_BASE_URL or f"http://127.0.0.1:{self.port}"
