"""A small HTML-to-markdown converter for the test double's static site (stdlib only).

It knows what the fixture pages use: headings, paragraphs, links, lists, emphasis, inline
code and preformatted blocks. Scripts, styles and the document head are not content; the
``<title>`` and ``<meta name="description">`` are kept apart as metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin

__all__ = ["Page", "html_to_markdown"]

_BLOCKS = frozenset({"p", "div", "section", "article", "header", "footer", "main", "nav"})
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_INLINE = {"strong": "**", "b": "**", "em": "*", "i": "*", "code": "`"}
_HIDDEN = frozenset({"script", "style", "template", "noscript"})
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Page:
    """One converted page.

    Attributes:
        title: The ``<title>``.
        description: The ``<meta name="description">`` content.
        markdown: The body as markdown.
        links: Absolute URLs of the body's links, in order.
    """

    title: str
    description: str
    markdown: str
    links: tuple[str, ...]


class _Converter(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.blocks: list[tuple[str, bool]] = []  # (text, is a list item)
        self.line: list[str] = []
        self.prefix = ""
        self.item = False
        self.hidden = 0
        self.pre = 0
        self.in_title = False
        self.title = ""
        self.description = ""
        self.open_links: list[tuple[int, str]] = []
        self.links: list[str] = []
        self.lists: list[int | None] = []  # None: bullets; an int: the last number used

    def flush(self) -> None:
        text = "".join(self.line)
        text = text.strip("\n") if self.pre else text.strip()
        if text:
            self.blocks.append((self.prefix + text, self.item))
        self.line, self.prefix, self.item = [], "", False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag == "title":
            self.in_title = True
        elif tag == "meta" and attributes.get("name") == "description":
            self.description = (attributes.get("content") or "").strip()
        elif tag in _HEADINGS:
            self.flush()
            self.prefix = "#" * _HEADINGS[tag] + " "
        elif tag in _BLOCKS:
            self.flush()
        elif tag in ("ul", "ol"):
            self.flush()
            self.lists.append(None if tag == "ul" else 0)
        elif tag == "li":
            self.flush()
            self.prefix = "  " * max(len(self.lists) - 1, 0) + self._marker()
            self.item = True
        elif tag == "a":
            href = urljoin(self.base_url, attributes.get("href") or "")
            self.open_links.append((len(self.line), href))
        elif tag == "pre":
            self.flush()
            self.pre += 1
            self.line.append("```\n")
        elif tag == "br":
            self.line.append("\n")
        elif tag in _INLINE and not (tag == "code" and self.pre):
            self.line.append(_INLINE[tag])

    def _marker(self) -> str:
        if not self.lists or self.lists[-1] is None:
            return "- "
        number = self.lists[-1] + 1
        self.lists[-1] = number
        return f"{number}. "

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(self.hidden - 1, 0)
        elif tag == "title":
            self.in_title = False
        elif tag in _HEADINGS or tag in _BLOCKS or tag == "li":
            self.flush()
        elif tag in ("ul", "ol"):
            self.flush()
            if self.lists:
                self.lists.pop()
        elif tag == "a" and self.open_links:
            start, href = self.open_links.pop()
            text = "".join(self.line[start:]).strip()
            self.line[start:] = [f"[{text}]({href})"]
            self.links.append(href)
        elif tag == "pre" and self.pre:
            self.line.append("\n```")
            self.flush()
            self.pre -= 1
        elif tag in _INLINE and not (tag == "code" and self.pre):
            self.line.append(_INLINE[tag])

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.in_title:
            self.title += data
        elif self.pre:
            self.line.append(data)
        else:
            text = _SPACE.sub(" ", data)
            if text.strip() or self.line:
                self.line.append(text)


def html_to_markdown(html: str, base_url: str) -> Page:
    """Convert one HTML document; relative links are resolved against ``base_url``."""
    converter = _Converter(base_url)
    converter.feed(html)
    converter.close()
    converter.flush()
    markdown = ""
    previous_item = False
    for text, item in converter.blocks:
        if markdown:
            markdown += "\n" if item and previous_item else "\n\n"
        markdown += text
        previous_item = item
    return Page(
        title=_SPACE.sub(" ", converter.title).strip(),
        description=converter.description,
        markdown=markdown,
        links=tuple(converter.links),
    )
