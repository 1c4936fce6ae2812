"""One MCP server over streamable HTTP: list its tools and call them with a caller's headers.

Every operation opens its own MCP client on a pooled HTTP connection, sends the caller's
headers (a per-user UCAN invocation, room ids) on each of its requests, and closes when
the operation ends: a list or a call never shares a session with another user's. The
protocol revision is negotiated once (``server/discover`` for 2026-07-28, the
``initialize`` handshake for older servers) and then pinned, so later operations skip the
probe. A connection that cannot be made is retried ``reconnect_attempts`` times,
``reconnect_delay`` seconds apart; anything else fails at once, since a request that
reached the server must not be sent twice.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, DiscoverResult, ListToolsResult, Tool

from oracle_core import Effect

__all__ = [
    "McpClient",
    "McpToolDefinition",
    "McpUnavailableError",
    "render_result",
]

T = TypeVar("T")

# Connection-level failures: the request never reached the server, so retrying is safe.
_CONNECT_ERRORS = (httpx2.ConnectError, httpx2.ConnectTimeout, ConnectionError)
# The SDK's code for a request that got no answer in time.
_REQUEST_TIMEOUT = -32001

# The headers of the operation in progress, and the HTTP statuses it met. The transport
# sends its requests from tasks started inside the operation, which inherit both.
_headers: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("mcp_headers")
_statuses: contextvars.ContextVar[list[int]] = contextvars.ContextVar("mcp_statuses")


class McpUnavailableError(RuntimeError):
    """The server could not be reached, or refused or failed the request.

    Attributes:
        unreachable: No connection could be made (after the reconnect attempts).
        status: The HTTP status of a refused request (401, 403, 500…), when there was one.
        timed_out: The server did not answer within the tool's timeout.
    """

    def __init__(
        self,
        message: str,
        *,
        unreachable: bool = False,
        status: int | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        self.status = status
        self.timed_out = timed_out


@dataclass(frozen=True)
class McpToolDefinition:
    """A tool as the server lists it.

    Attributes:
        name: The server's (wire) name.
        description: What the server says it does.
        input_schema: Its JSON schema, verbatim.
        read_only: The ``readOnlyHint`` annotation, when the server gives one.
        destructive: The ``destructiveHint`` annotation, when the server gives one.
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool | None = None
    destructive: bool | None = None

    @classmethod
    def from_mcp(cls, tool: Tool) -> McpToolDefinition:
        """From a ``tools/list`` entry."""
        notes = tool.annotations
        return cls(
            name=tool.name,
            description=tool.description or tool.title or tool.name,
            input_schema=dict(tool.input_schema),
            read_only=notes.read_only_hint if notes is not None else None,
            destructive=notes.destructive_hint if notes is not None else None,
        )

    @property
    def effect(self) -> Effect:
        """``read`` when annotated read-only, ``destructive`` when annotated so, else ``write``.

        MCP's own default for ``destructiveHint`` is true for a tool that is not read-only;
        the runtime's default is ``write`` (a server must say a tool destroys to have
        every call of it wait for approval).
        """
        if self.read_only:
            return "read"
        return "destructive" if self.destructive else "write"


@dataclass(frozen=True)
class _Negotiated:
    version: str
    discover: DiscoverResult | None = None

    @property
    def mode(self) -> str:
        """How the next client connects: the modern revision pinned, or the handshake."""
        return self.version if self.discover is not None else "legacy"


@dataclass
class _Cache:
    tools: tuple[float, list[McpToolDefinition]] | None = None
    listing: dict[str, Tool] = field(default_factory=dict)
    """The last complete ``tools/list`` by name: primes each new client (see ``_prime``)."""
    down_until: float = 0.0
    negotiated: _Negotiated | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _is_connect_failure(exc: BaseException) -> bool:
    return any(isinstance(leaf, _CONNECT_ERRORS) for leaf in _leaves(exc))


def render_result(result: CallToolResult) -> str:
    """The text of a tool result, as the agent reads it.

    Text blocks joined by newlines; the structured content as JSON when there is no text;
    other blocks (images, resources) by their type, since the model reads text.
    """
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            if text:
                parts.append(text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    text = "\n".join(parts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text


class McpClient:
    """Lists and calls one MCP server's tools.

    Args:
        url: The server's streamable-HTTP endpoint.
        name: How errors and logs name the server.
        reconnect_attempts: Reconnections after a failed connection (3 in the anchor).
        reconnect_delay: Seconds between them (2 in the anchor).
        timeout: Seconds to connect, and for a ``tools/list``.
        tool_timeout: Seconds a tool call may take before the call fails. Not the SDK's
            default: a long tool (a sandbox run, a crawl) is given its own.
        tool_timeouts: Per-tool overrides of ``tool_timeout``, by wire name.
        tools_ttl: Seconds a tool list is reused (tool definitions are stable between
            deploys).
        down_ttl: Seconds an unreachable server is not asked for its tools again, so an
            outage costs the reconnect delays once, not on every turn.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str = "mcp",
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        timeout: float = 30.0,
        tool_timeout: float = 120.0,
        tool_timeouts: Mapping[str, float] | None = None,
        tools_ttl: float = 300.0,
        down_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.name = name
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.timeout = timeout
        self.tool_timeout = tool_timeout
        self.tool_timeouts = dict(tool_timeouts or {})
        self.tools_ttl = tools_ttl
        self.down_ttl = down_ttl
        self._clock = clock
        self._cache = _Cache()
        self._http: httpx2.AsyncClient | None = None

    @property
    def protocol_version(self) -> str | None:
        """The revision negotiated with the server, once an operation has succeeded."""
        negotiated = self._cache.negotiated
        return negotiated.version if negotiated is not None else None

    def timeout_for(self, tool: str) -> float:
        """The seconds a call of ``tool`` may take."""
        return self.tool_timeouts.get(tool, self.tool_timeout)

    async def aclose(self) -> None:
        """Close the pooled connections (the client reopens them if used again)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            # No read cut-off of its own: each operation is bounded by its timeout.
            timeout = httpx2.Timeout(self.timeout, read=None)
            self._http = httpx2.AsyncClient(
                timeout=timeout,
                event_hooks={"request": [_send_headers], "response": [_note_status]},
            )
        return self._http

    async def _with_client(
        self,
        headers: Mapping[str, str],
        budget: float,
        op: Callable[[Client], Awaitable[T]],
        tool: str | None = None,
    ) -> T:
        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts + 1):
            if attempt:
                await asyncio.sleep(self.reconnect_delay)
            statuses: list[int] = []
            try:
                async with asyncio.timeout(budget):
                    return await self._once(headers, statuses, op, tool)
            except asyncio.CancelledError:
                raise
            except TimeoutError as exc:
                raise McpUnavailableError(
                    f"MCP server {self.name} did not answer within {budget:g} s", timed_out=True
                ) from exc
            except Exception as exc:
                if not _is_connect_failure(exc):
                    raise self._failure(exc, statuses) from exc
                last = exc
        raise McpUnavailableError(
            f"MCP server {self.name} unreachable after {self.reconnect_attempts + 1} attempts",
            unreachable=True,
        ) from last

    def _failure(self, exc: BaseException, statuses: list[int]) -> McpUnavailableError:
        # A failed operation may have met a redeploy: negotiate again next time.
        self._cache.negotiated = None
        if statuses and statuses[-1] >= 400:
            status = statuses[-1]
            return McpUnavailableError(
                f"MCP server {self.name} refused the request: HTTP {status}", status=status
            )
        leaf = next(_leaves(exc), exc)
        if isinstance(leaf, MCPError) and leaf.code == _REQUEST_TIMEOUT:
            return McpUnavailableError(
                f"MCP server {self.name} did not answer in time", timed_out=True
            )
        if isinstance(leaf, MCPError):
            return McpUnavailableError(f"MCP server {self.name} failed: {leaf.error.message}")
        return McpUnavailableError(f"MCP server {self.name} failed: {type(leaf).__name__}")

    async def _once(
        self,
        headers: Mapping[str, str],
        statuses: list[int],
        op: Callable[[Client], Awaitable[T]],
        tool: str | None,
    ) -> T:
        negotiated = self._cache.negotiated
        header_token = _headers.set(dict(headers))
        status_token = _statuses.set(statuses)
        try:
            client = Client(
                streamable_http_client(self.url, http_client=self._client()),
                mode=negotiated.mode if negotiated is not None else "auto",
                prior_discover=negotiated.discover if negotiated is not None else None,
                cache=None,
            )
            async with client:
                if tool is not None:
                    _prime(client, self._cache.listing.get(tool))
                result = await op(client)
                if negotiated is None:
                    self._remember(client)
                return result
        finally:
            _statuses.reset(status_token)
            _headers.reset(header_token)

    def _remember(self, client: Client) -> None:
        self._cache.negotiated = _Negotiated(
            version=client.protocol_version, discover=client.session.discover_result
        )

    async def list_tools(self, headers: Mapping[str, str]) -> list[McpToolDefinition]:
        """The server's tools, from the cache while it is fresh.

        Raises:
            McpUnavailableError: the server could not be reached or refused the request.
        """
        cache = self._cache
        if cache.tools is not None and cache.tools[0] > self._clock():
            return cache.tools[1]
        async with cache.lock:
            if cache.tools is not None and cache.tools[0] > self._clock():
                return cache.tools[1]
            if cache.down_until > self._clock():
                raise McpUnavailableError(f"MCP server {self.name} unreachable", unreachable=True)

            async def fetch(client: Client) -> list[McpToolDefinition]:
                raw: list[Tool] = []
                cursor: str | None = None
                while True:
                    listed = await client.list_tools(cursor=cursor)
                    raw += listed.tools
                    cursor = listed.next_cursor
                    if not cursor:
                        cache.listing = {t.name: t for t in raw}
                        return [McpToolDefinition.from_mcp(t) for t in raw]

            try:
                tools = await self._with_client(headers, self.timeout, fetch)
            except McpUnavailableError as exc:
                if exc.unreachable:
                    cache.down_until = self._clock() + self.down_ttl
                raise
            cache.tools = (self._clock() + self.tools_ttl, tools)
            return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        seconds: float | None = None,
    ) -> CallToolResult:
        """Call tool ``name`` (its wire name) and wait up to ``seconds`` (default: its timeout).

        Raises:
            McpUnavailableError: the server could not be reached, refused the request or
                did not answer in time (``timed_out``).
        """
        if seconds is None:
            seconds = self.timeout_for(name)

        async def call(client: Client) -> CallToolResult:
            return await client.call_tool(name, dict(arguments), read_timeout_seconds=seconds)

        # The connection and the listing the SDK may fetch first share the budget's margin.
        return await self._with_client(headers, seconds + self.timeout, call, name)


def _prime(client: Client, tool: Tool | None) -> None:
    """Give a new client the listing of the tool it calls, which it would otherwise fetch.

    The SDK lists the tools before calling one it has not listed (to check results
    against output schemas and, on 2026-07-28, to mirror ``x-mcp-header`` arguments), one
    extra round trip and the whole listing on every call, since each operation opens a
    new client. Handing it the cached listing through the method its own ``tools/list``
    uses saves both. That method is not public: when a release drops it, the client
    lists for itself, as it would without this.
    """
    absorb = getattr(client.session, "_absorb_tool_listing", None)
    if tool is not None and callable(absorb):
        absorb(ListToolsResult.model_construct(tools=[tool]), complete=False)


async def _send_headers(request: httpx2.Request) -> None:
    headers = _headers.get(None)
    if headers:
        request.headers.update(headers)


async def _note_status(response: httpx2.Response) -> None:
    statuses = _statuses.get(None)
    if statuses is not None:
        statuses.append(response.status_code)
