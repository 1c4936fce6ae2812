"""``/openapi.json``, ``/docs/json`` and a Swagger UI at ``/docs`` that needs no internet.

Every asset of the UI (CSS, JavaScript, favicons) is served by the oracle from the
``swagger-ui-bundle-v2`` distribution (import ``swagger_ui_bundle``), so the page works on
an air-gapped machine. ``DOCS_ASSET_BASE_URL`` may point the page at another copy of the
same assets (a CDN or a reverse proxy); the document and the page's small start-up
script are always served by the oracle.

The assets are served by Starlette's ``StaticFiles`` (ETag, ``If-None-Match`` → 304,
path checks), from the bundle's directory behind this package's own ``docs_assets/``
(the start-up script). Only the bundle's CSS, JavaScript, source maps and icons are
served: its demo page and templates are not.
"""

from __future__ import annotations

import html
import importlib.resources
import json
import os
import re
from collections.abc import Iterable, Mapping
from importlib import metadata
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Scope

from oracle_server._errors import error_response
from oracle_server._http.openapi import build_openapi
from oracle_server._http.pipeline import ExclusionMatcher
from oracle_server._settings import asset_base_url as _asset_base

__all__ = ["ApiDocs", "mount_api_docs", "swagger_ui_dir"]

BUNDLE_PACKAGE = "swagger_ui_bundle"
DOCS_PREFIX = "/docs"
SPEC_PATHS = ("/openapi.json", "/docs/json")
INITIALIZER = "swagger-initializer.js"
CONTENT_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".png": "image/png",
    ".map": "application/json",
    ".html": "text/html; charset=utf-8",
}
# index.html and index.j2 are upstream's page templates (theirs loads the petstore demo);
# the page and its initializer are generated here instead.
NOT_SERVED = frozenset({"index.html", "index.j2", INITIALIZER})
ASSET_CACHE_CONTROL = "public, max-age=86400"
# The page's start-up script: static, so the page needs no inline script.
OWN_ASSETS = Path(__file__).parent / "docs_assets"
PAGE = """<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8">
    <title>{title}</title>
    <link rel="stylesheet" type="text/css" href="{assets}/swagger-ui.css">
    <link rel="stylesheet" type="text/css" href="{assets}/index.css">
    <link rel="icon" type="image/png" href="{assets}/favicon-32x32.png" sizes="32x32">
    <link rel="icon" type="image/png" href="{assets}/favicon-16x16.png" sizes="16x16">
  </head>
  <body>
    <div id="swagger-ui" data-spec-url="{spec}"></div>
    <script src="{assets}/swagger-ui-bundle.js" charset="UTF-8"></script>
    <script src="{assets}/swagger-ui-standalone-preset.js" charset="UTF-8"></script>
    <script src="{local}/{initializer}" charset="UTF-8"></script>
  </body>
</html>
"""
_VERSION_RE = re.compile(r"\d+")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in _VERSION_RE.findall(name))


def swagger_ui_dir() -> Traversable:
    """The newest ``vendor/swagger-ui-<version>`` directory of the bundle package.

    Raises:
        RuntimeError: the bundle package is missing or holds no Swagger UI.
    """
    missing = RuntimeError(
        "docs.assets_missing: no Swagger UI in package 'swagger_ui_bundle'; "
        "install oracle-server's dependency 'swagger-ui-bundle-v2'"
    )
    try:
        vendor = importlib.resources.files(BUNDLE_PACKAGE) / "vendor"
        candidates = [
            entry
            for entry in vendor.iterdir()
            if entry.is_dir() and entry.name.startswith("swagger-ui-")
        ]
    except (ModuleNotFoundError, OSError) as exc:
        raise missing from exc
    if not candidates:
        raise missing
    return max(candidates, key=lambda entry: _version_key(entry.name))


class _Assets(StaticFiles):
    """The Swagger UI files, with their content types and a day of caching."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        media_type = CONTENT_TYPES[_suffix(str(full_path))]
        response = FileResponse(
            full_path,
            status_code=status_code,
            stat_result=stat_result,
            media_type=media_type,
            headers={"Cache-Control": ASSET_CACHE_CONTROL},
        )
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


class ApiDocs:
    """The OpenAPI document and Swagger UI, as Starlette routes.

    Args:
        title: The page title.
        asset_base_url: Where the page loads Swagger UI's CSS, JavaScript and icons from;
            ``None`` (the default) serves them from this oracle under ``/docs/``.
        assets: The Swagger UI directory; defaults to ``swagger_ui_dir()``.

    Raises:
        ValueError: ``asset_base_url`` is not an http(s) URL or an absolute path.
        RuntimeError: the bundled assets are missing.
    """

    def __init__(
        self,
        *,
        title: str,
        asset_base_url: str | None = None,
        assets: Traversable | None = None,
    ) -> None:
        self.title = title
        self.asset_base_url = _asset_base(asset_base_url)
        bundle = assets if assets is not None else swagger_ui_dir()
        self._files = {
            entry.name
            for entry in bundle.iterdir()
            if entry.is_file()
            and entry.name not in NOT_SERVED
            and _suffix(entry.name) in CONTENT_TYPES
        }
        self._static = _Assets(directory=str(bundle))
        # Ours first: the bundle ships a start-up script of its own (the petstore demo).
        self._static.all_directories.insert(0, str(OWN_ASSETS))
        self._document: dict[str, Any] = {}
        self._document_json = b"{}"

    @property
    def asset_names(self) -> frozenset[str]:
        """The file names served under ``/docs/``, the start-up script included."""
        return frozenset({*self._files, INITIALIZER})

    @property
    def document(self) -> dict[str, Any]:
        """The published OpenAPI document."""
        return self._document

    def publish(self, document: Mapping[str, Any]) -> None:
        """Serve ``document`` from now on; it is encoded once, here."""
        self._document = dict(document)
        self._document_json = json.dumps(
            self._document, ensure_ascii=False, separators=(",", ":")
        ).encode()

    def routes(self) -> list[BaseRoute]:
        """``/openapi.json``, ``/docs/json``, ``/docs`` and ``/docs/{path}`` (in that order:
        ``/docs/json`` must win over the asset route)."""
        return [
            Route(SPEC_PATHS[0], self.openapi_json, methods=["GET"], name="openapi_json"),
            Route(SPEC_PATHS[1], self.openapi_json, methods=["GET"], name="docs_json"),
            Route(DOCS_PREFIX, self.swagger_ui, methods=["GET"], name="swagger_ui"),
            Route(
                DOCS_PREFIX + "/{path:path}", self.asset, methods=["GET"], name="swagger_ui_asset"
            ),
        ]

    async def openapi_json(self, request: Request) -> Response:
        """The OpenAPI 3.1 document of this oracle."""
        return Response(self._document_json, media_type="application/json")

    async def swagger_ui(self, request: Request) -> Response:
        """Swagger UI on ``/docs/json``; its assets come from this oracle unless configured."""
        root = str(request.scope.get("root_path", "")).rstrip("/")
        local = root + DOCS_PREFIX
        page = PAGE.format(
            title=html.escape(f"{self.title} API"),
            assets=html.escape(self.asset_base_url or local),
            local=html.escape(local),
            spec=html.escape(root + SPEC_PATHS[1]),
            initializer=INITIALIZER,
        )
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    async def asset(self, request: Request) -> Response:
        """A Swagger UI file (404 for anything else)."""
        name = request.path_params["path"]
        if name == "":
            return await self.swagger_ui(request)
        if name not in self.asset_names:
            return error_response(404, f"Cannot GET {request.url.path}")
        return await self._static.get_response(name, request.scope)


def _suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def _server_version() -> str:
    try:
        return metadata.version("oracle-server")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def mount_api_docs(
    app: Starlette,
    *,
    title: str,
    exclusions: ExclusionMatcher,
    extra_routes: Iterable[tuple[str, BaseRoute]] = (),
    description: str | None = None,
    version: str | None = None,
    asset_base_url: str | None = None,
    tool_policy: Mapping[str, Any] | None = None,
) -> ApiDocs:
    """Add the docs routes to ``app`` and publish the document of every route it serves.

    Call once at boot, after every other route is in ``app.router.routes``: the document
    is built from that list then and never rebuilt.

    Args:
        app: The oracle's Starlette app.
        title: ``info.title`` and the page title.
        exclusions: The pipeline's public-route matcher.
        extra_routes: ``(owner, route)`` pairs of host (``"host"``) and plugin routes that
            are already in ``app.router.routes``; every other route counts as built-in.
        description: ``info.description``.
        version: ``info.version``; defaults to the installed ``oracle-server`` version.
        asset_base_url: ``DOCS_ASSET_BASE_URL``; ``None`` serves the bundled assets.
        tool_policy: The effective tool policy's report, published in ``info``.

    Returns:
        The ``ApiDocs`` serving the document.
    """
    docs = ApiDocs(title=title, asset_base_url=asset_base_url)
    app.router.routes.extend(docs.routes())
    extra = list(extra_routes)
    extra_ids = {id(route) for _, route in extra}
    builtin = [route for route in app.router.routes if id(route) not in extra_ids]
    docs.publish(
        build_openapi(
            title=title,
            version=version or _server_version(),
            routes=builtin,
            exclusions=exclusions,
            extra_routes=extra,
            description=description,
            tool_policy=tool_policy,
        )
    )
    return docs
