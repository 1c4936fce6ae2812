"""A Firecrawl MCP server test double that speaks the real protocol (03-plugins §4 item 6).

``FirecrawlDouble`` is one Starlette app with:

- ``/mcp/``: a real MCP server (the ``mcp`` SDK's ``MCPServer``, stateless streamable
  HTTP) exposing ``firecrawl_search(query, limit?)``, ``firecrawl_scrape(url, formats?)``
  and ``firecrawl_crawl(url, limit?)``, the extra tool the plugin must leave out;
- ``/site/…``: a small static HTML site (the pages of a made-up key-value store, one of
  them carrying a prompt injection), served as HTML.

``firecrawl_search`` answers ``{"web": [{url, title, description}]}`` from an index of
the site's pages (title, meta description and text, ranked by the query's words);
``firecrawl_scrape`` answers the page as Firecrawl does, ``{"markdown": …, "metadata":
{…}}`` (plus ``html``, ``rawHtml`` or ``links`` when asked), converted from the HTML the
site serves. Only the double's own site can be scraped: any other URL fails as an
unreachable page would. Every tool call is recorded in ``calls``, and every HTTP request
to the MCP endpoint is counted in ``mcp_requests``.

Needs the ``testing`` extra (``pip install 'oracle-plugins-firecrawl[testing]'``). Serve
it with any ASGI server while ``running()`` is entered, then set ``origin``, e.g. with
``oracle_server.testing``'s ``LoopbackServer(double.routes)``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from oracle_mcp.testing import mounted_app, running
from oracle_plugins.firecrawl._html_markdown import Page, html_to_markdown
from oracle_plugins.firecrawl._untrusted import UNTRUSTED_TAG

__all__ = [
    "EXTRA_TOOL",
    "FirecrawlDouble",
    "RecordedCall",
    "UntrustedBlock",
    "fixture_site",
    "untrusted_block",
]

EXTRA_TOOL = "firecrawl_crawl"
"""The double's tool that is neither search nor scrape: the plugin must filter it out."""

SITE_PREFIX = "/site/"
_WORD = re.compile(r"\w+")
_COMMON = frozenset({"the", "a", "an", "and", "or", "of", "to", "in", "is", "what", "for"})
Format = Literal["markdown", "html", "rawHtml", "links"]


@dataclass(frozen=True)
class RecordedCall:
    """One tool call as the double received it.

    Attributes:
        tool: The tool's name.
        arguments: Its arguments, as sent (defaults not filled in).
    """

    tool: str
    arguments: dict[str, Any]


def fixture_site() -> dict[str, str]:
    """The bundled static site: HTML by path under ``/site/`` (``docs/install.html``…)."""
    root = resources.files("oracle_plugins.firecrawl") / "_fixture_site"
    pages: dict[str, str] = {}

    def walk(folder: Any, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".html"):
                pages[f"{prefix}{entry.name}"] = entry.read_text(encoding="utf-8")

    walk(root, "")
    return dict(sorted(pages.items()))


_BLOCK = re.compile(
    rf'\A(?P<notice>[^\n]*)\n<{UNTRUSTED_TAG} source="(?P<source>[^"]*)" '
    rf'boundary="(?P<boundary>[0-9a-f]+)">\n(?P<body>.*)\n'
    rf'</{UNTRUSTED_TAG} boundary="(?P=boundary)">\Z',
    re.DOTALL,
)


@dataclass(frozen=True)
class UntrustedBlock:
    """A tool result as ``mark_untrusted`` wrote it.

    Attributes:
        notice: The line before the block, telling the model it is data.
        source: What fetched the content.
        boundary: The block's boundary.
        content: The content between the tags.
    """

    notice: str
    source: str
    boundary: str
    content: str


def untrusted_block(text: object) -> UntrustedBlock:
    """Split a marked tool result into its parts.

    Raises:
        AssertionError: ``text`` is not exactly one marked block.
    """
    match = _BLOCK.match(text) if isinstance(text, str) else None
    if match is None:
        raise AssertionError(f"not a marked web-content block: {str(text)[:120]!r}")
    return UntrustedBlock(
        notice=match["notice"],
        source=match["source"],
        boundary=match["boundary"],
        content=match["body"],
    )


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _COMMON


class FirecrawlDouble:
    """The double's app, site and call log.

    Args:
        pages: The site, HTML by path under ``/site/`` (default ``fixture_site()``).
    """

    def __init__(self, *, pages: Mapping[str, str] | None = None) -> None:
        self.origin: str | None = None
        """Base URL of the served app; set by whoever serves it."""
        self.pages = dict(pages if pages is not None else fixture_site())
        self.calls: list[RecordedCall] = []
        self.mcp_requests = 0
        self.mcp: MCPServer[Any] = MCPServer("firecrawl-double", log_level="WARNING")
        self._register_tools()
        # Building the app creates the session manager that running() starts.
        self._mcp_app = _CountingApp(self, mounted_app(self.mcp))

    # --- serving -------------------------------------------------------------------

    @property
    def mcp_url(self) -> str:
        """``FIRECRAWL_MCP_URL`` for the served double."""
        return f"{self._served()}/mcp/"

    def site_url(self, path: str) -> str:
        """The URL of a page of the site (``docs/install.html``)."""
        return f"{self._served()}{SITE_PREFIX}{path}"

    def _served(self) -> str:
        if self.origin is None:
            raise RuntimeError("the double is not served: set `origin` once it listens")
        return self.origin

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes (MCP at ``/mcp/``, the site at ``/site/``)."""
        return [
            Route(SITE_PREFIX + "{path:path}", self._page, methods=["GET"]),
            Mount("/mcp", app=self._mcp_app),
        ]

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Run the MCP session manager (a mounted app's own lifespan does not run)."""
        return running(self.mcp)

    async def tool_names(self) -> Sequence[str]:
        """The MCP tools the double serves, as its ``tools/list`` answers."""
        return [t.name for t in await self.mcp.list_tools()]

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``tool``, in order."""
        return [call.arguments for call in self.calls if call.tool == tool]

    async def _page(self, request: Request) -> Response:
        html = self.pages.get(request.path_params["path"])
        if html is None:
            return PlainTextResponse("Not Found", status_code=404)
        return HTMLResponse(html)

    # --- search and scrape ------------------------------------------------------------

    def _converted(self, path: str) -> Page:
        return html_to_markdown(self.pages[path], self.site_url(path))

    def search(self, query: str, limit: int = 5) -> list[dict[str, str]]:
        """The index's answer: pages ranked by the query's words (title counts twice)."""
        wanted = _words(query)
        scored = []
        for path in self.pages:
            page = self._converted(path)
            title = _words(page.title)
            text = title | _words(page.description) | _words(page.markdown)
            score = len(wanted & title) + len(wanted & text)
            if score:
                scored.append((-score, path, page))
        return [
            {"url": self.site_url(path), "title": page.title, "description": page.description}
            for _, path, page in sorted(scored, key=lambda s: (s[0], s[1]))[:limit]
        ]

    def scrape(self, url: str, formats: Sequence[str] = ("markdown",)) -> dict[str, Any]:
        """The document of one page of the site.

        Raises:
            ToolError: the URL is not a page of the double's site.
        """
        prefix = self._served() + SITE_PREFIX
        parts = urlsplit(url)
        if not url.startswith(prefix):
            raise ToolError(f"Failed to scrape URL {url}: the page could not be reached")
        path = parts.path.removeprefix(SITE_PREFIX)
        if path not in self.pages:
            raise ToolError(f"Failed to scrape URL {url}: HTTP 404 Not Found")
        page = self._converted(path)
        document: dict[str, Any] = {}
        if "markdown" in formats:
            document["markdown"] = page.markdown
        if "html" in formats:
            document["html"] = self.pages[path]
        if "rawHtml" in formats:
            document["rawHtml"] = self.pages[path]
        if "links" in formats:
            document["links"] = list(page.links)
        document["metadata"] = {
            "title": page.title,
            "description": page.description,
            "sourceURL": url,
            "url": url,
            "statusCode": 200,
        }
        return document

    # --- MCP tools ---------------------------------------------------------------------

    def _register_tools(self) -> None:
        mcp = self.mcp

        @mcp.tool(
            description=(
                "Search the web and get the matching results: the URL, title and "
                "description of each. Use it to find pages when you do not know their URL."
            )
        )
        def firecrawl_search(query: str, limit: int | None = None) -> dict[str, Any]:
            arguments: dict[str, Any] = {"query": query}
            if limit is not None:
                arguments["limit"] = limit
            self.calls.append(RecordedCall("firecrawl_search", arguments))
            if not query.strip():
                raise ToolError("query must not be empty")
            if limit is not None and limit < 1:
                raise ToolError("limit must be at least 1")
            return {"web": self.search(query, 5 if limit is None else limit)}

        @mcp.tool(
            description=(
                "Scrape the content of a single URL. Best when you know exactly which page "
                "holds the information; returns the page as markdown by default."
            )
        )
        def firecrawl_scrape(url: str, formats: list[Format] | None = None) -> dict[str, Any]:
            arguments: dict[str, Any] = {"url": url}
            if formats is not None:
                arguments["formats"] = list(formats)
            self.calls.append(RecordedCall("firecrawl_scrape", arguments))
            return self.scrape(url, formats or ["markdown"])

        @mcp.tool(
            name=EXTRA_TOOL,
            description="Start a crawl of a whole website and extract every page it reaches.",
        )
        def firecrawl_crawl(url: str, limit: int = 10) -> dict[str, Any]:
            self.calls.append(RecordedCall(EXTRA_TOOL, {"url": url, "limit": limit}))
            return {"success": True, "id": "crawl-1", "status": "started"}


class _CountingApp:
    """Pure ASGI: counts the MCP endpoint's HTTP requests (listing caches are observable)."""

    def __init__(self, double: FirecrawlDouble, app: ASGIApp) -> None:
        self._double = double
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._double.mcp_requests += 1
        await self._app(scope, receive, send)
