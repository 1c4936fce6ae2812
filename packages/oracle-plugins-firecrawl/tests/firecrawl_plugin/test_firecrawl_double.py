"""The double itself: the static site over HTTP, and search and scrape over real MCP."""

from __future__ import annotations

import json

import httpx

from oracle_mcp import McpClient, render_result
from oracle_plugins.firecrawl.testing import EXTRA_TOOL, FirecrawlDouble, RecordedCall


async def test_the_site_is_served_as_html(firecrawl: FirecrawlDouble) -> None:
    async with httpx.AsyncClient() as http:
        page = await http.get(firecrawl.site_url("docs/install.html"))
        missing = await http.get(firecrawl.site_url("docs/nothing.html"))
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<title>Installing Pebble</title>" in page.text
    assert missing.status_code == 404


async def test_search_and_scrape_answer_as_firecrawl_does(firecrawl: FirecrawlDouble) -> None:
    client = McpClient(firecrawl.mcp_url, name="firecrawl", reconnect_attempts=0)
    try:
        listed = [t.name for t in await client.list_tools({})]
        found = await client.call_tool("firecrawl_search", {"query": "installing pebble"}, {})
        one = await client.call_tool("firecrawl_search", {"query": "pebble", "limit": 1}, {})
        scraped = await client.call_tool(
            "firecrawl_scrape",
            {"url": firecrawl.site_url("index.html"), "formats": ["markdown", "html", "links"]},
            {},
        )
        crawl = await client.call_tool(EXTRA_TOOL, {"url": firecrawl.site_url("index.html")}, {})
    finally:
        await client.aclose()

    assert listed == ["firecrawl_search", "firecrawl_scrape", EXTRA_TOOL]
    web = json.loads(render_result(found))["web"]
    assert web[0] == {
        "url": firecrawl.site_url("docs/install.html"),
        "title": "Installing Pebble",
        "description": "How to install Pebble with pip and open a first database.",
    }
    assert len(json.loads(render_result(one))["web"]) == 1
    document = json.loads(render_result(scraped))
    assert document["markdown"].startswith("[Install](")
    assert "# Pebble\n\nPebble is a **small embedded key-value store**" in document["markdown"]
    assert "not content" not in document["markdown"]  # scripts are not text
    assert "- One file per database, no server to run.\n- Transactions" in document["markdown"]
    assert document["html"] == firecrawl.pages["index.html"]
    assert firecrawl.site_url("docs/install.html") in document["links"]
    assert document["metadata"]["title"] == "Pebble: an embedded key-value store"
    assert not crawl.is_error
    assert firecrawl.calls[-1] == RecordedCall(
        EXTRA_TOOL, {"url": firecrawl.site_url("index.html"), "limit": 10}
    )
    assert [c.tool for c in firecrawl.calls] == [
        "firecrawl_search",
        "firecrawl_search",
        "firecrawl_scrape",
        EXTRA_TOOL,
    ]
