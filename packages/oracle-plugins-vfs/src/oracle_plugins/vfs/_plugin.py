"""``VfsPlugin``: the user's files, on the IXO VFS worker or a local directory (03-plugins §17)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from oracle_core import (
    Accessor,
    AuthExcludedRoute,
    OraclePlugin,
    PluginContext,
    PluginTool,
    ReadonlyState,
    RouteError,
    RuntimeContext,
)
from oracle_plugins.vfs._backend import VfsBackend, VfsError
from oracle_plugins.vfs._bridge import bridge_tools
from oracle_plugins.vfs._config import VfsConfig, VfsReads, wants_remote
from oracle_plugins.vfs._delegations import DelegationCache
from oracle_plugins.vfs._files import VfsFiles
from oracle_plugins.vfs._local import LocalVfsStore
from oracle_plugins.vfs._manifest import MANIFEST, OPERATING_GUIDE
from oracle_plugins.vfs._remote import RemoteVfs
from oracle_plugins.vfs._tools import build_tools

__all__ = ["DEGRADED_LABEL", "VfsPlugin"]

DEGRADED_LABEL = "Files (VFS)"
"""How the prompt lists the plugin when the UCAN Store cannot be asked this turn."""

PUBLIC_ROUTE = "/vfs/public/{token}"
"""Embedded: where share links are served, without a login."""


@dataclass
class _Running:
    """What one runtime's lifespan opened."""

    config: VfsConfig
    reads: VfsReads
    http: httpx.AsyncClient
    tools: list[PluginTool]
    bridge: list[PluginTool]
    vfs_url: str | None = None
    delegations: DelegationCache | None = None
    local: LocalVfsStore | None = None
    """Embedded: the store of every user's files."""


def _local_root(config: VfsConfig, core: Mapping[str, Any]) -> Path:
    """``VFS_LOCAL_ROOT``, else ``vfs`` beside the SQLite folder."""
    if config.VFS_LOCAL_ROOT:
        return Path(config.VFS_LOCAL_ROOT)
    return Path(str(core.get("SQLITE_DATABASE_PATH") or "./data/sqlite")).parent / "vfs"


class VfsPlugin(OraclePlugin):
    """The user's files: ``vfs_search`` … ``vfs_share`` (ten tools), per request.

    Remote (the default): the IXO VFS worker, authorised by two-hop UCAN — the user's
    delegation to the oracle comes from the UCAN Store, and every request carries a
    single-use invocation minted from it with the route's minimum ability. The tools are
    offered only when the oracle holds a signing key, the request has a user, and the
    store holds that user's grant; when the store cannot be asked, "Files (VFS)" is
    listed as degraded for the turn. Embedded (``VFS_BACKEND=embedded`` or
    ``VFS_LOCAL_ROOT``): the same tools over a local directory, without UCAN.

    Other plugins get the request's files as bytes through the shared-state key
    ``vfsFiles`` (:class:`VfsFiles`).

    Args:
        transport: Replaces httpx's network transport (proxies, tests).
        delegation_ttl: Seconds a user's delegation is kept at most.
        miss_ttl: Seconds "this user granted nothing" is kept.
    """

    name = "vfs"
    version = "0.1.0"
    soft_depends_on = ("sandbox",)
    manifest = MANIFEST
    config_schema = VfsConfig
    operating_guide = OPERATING_GUIDE
    auto_detect_hint = (
        "on, with the VFS worker; with ORACLE_BACKEND=local it runs on a local directory "
        "unless VFS_BACKEND names the backend"
    )

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        delegation_ttl: float = 300.0,
        miss_ttl: float = 30.0,
    ) -> None:
        self._transport = transport
        self.delegation_ttl = delegation_ttl
        self.miss_ttl = miss_ttl
        self._running: _Running | None = None

    def auto_detect(self, env: Mapping[str, str]) -> bool:
        """On. With ``ORACLE_BACKEND=local`` and no ``VFS_BACKEND``/``VFS_LOCAL_ROOT`` it
        reports not ready, so the runtime runs it on its embedded backend instead."""
        return wants_remote(env)

    @asynccontextmanager
    async def lifespan(self, ctx: PluginContext[VfsConfig]) -> AsyncIterator[None]:
        """Open the shared HTTP client (remote) or the local store (embedded)."""
        if self._running is not None:
            raise RuntimeError(
                "this VfsPlugin instance already runs in another runtime; "
                "pass a new VfsPlugin() to each runtime"
            )
        config = ctx.plugin_config
        reads = VfsReads.from_config(ctx.config)
        http = httpx.AsyncClient(transport=self._transport, timeout=config.timeout_seconds)
        running = _Running(
            config,
            reads,
            http,
            build_tools(self.backend_for, max_read_lines=config.max_read_lines),
            bridge_tools(self.backend_for),
        )
        try:
            if config.backend == "remote":
                running.vfs_url = reads.vfs_url(config)
                if reads.oracle_did:
                    running.delegations = DelegationCache(
                        http,
                        reads.ucan_store_url(config),
                        oracle_did=reads.oracle_did,
                        timeout_seconds=config.timeout_seconds,
                        ttl=self.delegation_ttl,
                        miss_ttl=self.miss_ttl,
                        logger=ctx.logger,
                    )
                    ctx.logger.info("vfs: remote VFS worker at %s", running.vfs_url)
                else:
                    ctx.logger.info("vfs: no ORACLE_DID, so no user can grant files; tools off")
            else:
                running.local = _open_local(_local_root(config, ctx.config), reads, config, ctx)
            self._running = running
            yield
        finally:
            self._running = None
            _close_local(running.local)
            await http.aclose()

    # --- per request ---------------------------------------------------------------------

    def backend_for(self, rt_ctx: RuntimeContext[Any]) -> VfsBackend | None:
        """The request's backend, or ``None`` when it has none (no user, no key, no store).

        Nothing is fetched here: a remote backend asks the UCAN Store on its first call.
        """
        running = self._running
        if running is None or not rt_ctx.user.did:
            return None
        if running.config.backend != "remote":
            return _local_backend(
                running.local, rt_ctx, running.reads.public_base_url(running.config)
            )
        ucan = rt_ctx.ucan
        if ucan is None or running.delegations is None or running.vfs_url is None:
            return None
        if not ucan.has_signing_key():
            return None
        return RemoteVfs(
            running.http,
            ucan,
            user_did=rt_ctx.user.did,
            vfs_url=running.vfs_url,
            delegations=running.delegations,
            timeout_seconds=running.config.timeout_seconds,
            logger=rt_ctx.logger,
        )

    async def get_request_tools(self, rt_ctx: RuntimeContext[Any]) -> list[PluginTool]:
        """The ten tools when this request's user has a file store the oracle may use."""
        running = self._running
        if running is None or self.backend_for(rt_ctx) is None:
            return []
        if running.delegations is not None and rt_ctx.ucan is not None:
            try:
                granted = await running.delegations.get(rt_ctx.ucan, rt_ctx.user.did)
            except VfsError as exc:
                rt_ctx.logger.warning("vfs: tools unavailable this turn: %s", exc.kind)
                rt_ctx.report_degraded(DEGRADED_LABEL)
                return []
            if granted is None:
                rt_ctx.logger.debug("vfs: the user has not granted this oracle their files")
                return []
        tools = list(running.tools)
        if rt_ctx.shared is not None and rt_ctx.shared.get("sandboxFiles") is not None:
            tools.extend(running.bridge)
        return tools

    def get_routes(self, ctx: PluginContext[VfsConfig]) -> list[BaseRoute]:
        """Embedded: ``GET /vfs/public/{token}`` serves what ``vfs_share`` published."""

        async def shared_file(request: Request) -> Response:
            store = self._running.local if self._running is not None else None
            found = await store.read_public(request.path_params["token"]) if store else None
            if found is None:
                raise RouteError(
                    404,
                    "no shared file at this link",
                    code="vfs.share_not_found",
                    headers=_SHARED_HEADERS,
                )
            data, mime_type, name = found
            headers = {**_SHARED_HEADERS, "Content-Disposition": _disposition(name)}
            return Response(data, media_type=mime_type, headers=headers)

        return [Route(PUBLIC_ROUTE, shared_file, methods=["GET"])]

    def get_auth_excluded_routes(self) -> list[AuthExcludedRoute]:
        """Share links are opened by anyone holding them, without a login."""
        return [AuthExcludedRoute("/vfs/public/:token", "GET")]

    def get_shared_state(self) -> Mapping[str, Accessor]:
        """``vfsFiles``: the request's user's files as bytes (:class:`VfsFiles`), or ``None``."""

        def vfs_files(state: ReadonlyState, rt_ctx: RuntimeContext[Any]) -> VfsFiles | None:
            backend = self.backend_for(rt_ctx)
            return VfsFiles(backend) if backend is not None else None

        return {"vfsFiles": vfs_files}


# --- embedded backend ---------------------------------------------------------------


def _open_local(
    root: Path, reads: VfsReads, config: VfsConfig, ctx: PluginContext[VfsConfig]
) -> LocalVfsStore:
    store = LocalVfsStore(root)
    ctx.logger.info("vfs: the users' files are kept on this machine under %s", root)
    return store


def _close_local(store: LocalVfsStore | None) -> None:
    if store is not None:
        store.close()


def _local_backend(
    store: LocalVfsStore | None, rt_ctx: RuntimeContext[Any], public_base_url: str
) -> VfsBackend | None:
    if store is None:
        return None
    return store.for_user(rt_ctx.user.did, public_base_url=public_base_url)


_SHARED_HEADERS = {
    # A shared file is the user's content served from the oracle's origin: no script of
    # it runs there, and browsers do not guess another type than the one it was given.
    "Content-Security-Policy": "sandbox",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}


def _disposition(name: str) -> str:
    """``inline`` with the file's name, in the RFC 6266 form that any name survives."""
    return f"inline; filename*=UTF-8''{quote(name, safe='')}"
