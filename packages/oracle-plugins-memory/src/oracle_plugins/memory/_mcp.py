"""A Memory Engine's MCP surface: listing and calling its tools over streamable HTTP.

One MCP session per operation, opened with the caller's headers (they carry a per-user
UCAN invocation) and closed when the operation ends, as the contract expects of a client
that lists tools and disconnects. A connection that cannot be made is retried
``reconnect_attempts`` times, ``reconnect_delay`` seconds apart; anything else fails at
once, since a request that reached the engine must not be sent twice.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

__all__ = ["EngineUnavailableError", "McpEngineClient", "ToolDefinition", "render_result"]

T = TypeVar("T")

# Connection-level failures: the request never reached the engine, so retrying is safe.
_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, ConnectionError)


class EngineUnavailableError(RuntimeError):
    """The Memory Engine could not be reached, or refused or failed the request.

    Attributes:
        unreachable: No connection could be made (after the reconnect attempts).
    """

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the engine lists it (wire name, description, JSON schema, read-only hint)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool | None = None

    @classmethod
    def from_mcp(cls, tool: Tool) -> ToolDefinition:
        """From an MCP ``tools/list`` entry."""
        hint = tool.annotations.readOnlyHint if tool.annotations is not None else None
        return cls(
            name=tool.name,
            description=tool.description or tool.name,
            input_schema=dict(tool.inputSchema),
            read_only=hint,
        )


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _is_connect_failure(exc: BaseException) -> bool:
    return any(isinstance(leaf, _CONNECT_ERRORS) for leaf in _leaves(exc))


def _describe(exc: BaseException) -> str:
    leaf = next(_leaves(exc), exc)
    if isinstance(leaf, httpx.HTTPStatusError):
        return f"HTTP {leaf.response.status_code}"
    return type(leaf).__name__


def render_result(result: CallToolResult) -> str:
    """The text of a tool result, as the agent reads it."""
    texts = [getattr(block, "text", "") for block in result.content]
    text = "\n".join(t for t in texts if t)
    if not text and result.structuredContent is not None:
        text = json.dumps(result.structuredContent, ensure_ascii=False)
    return text


class McpEngineClient:
    """Lists and calls a Memory Engine's MCP tools.

    Args:
        url: ``MEMORY_MCP_URL``.
        reconnect_attempts: Reconnections after a failed connection (3 in the anchor).
        reconnect_delay: Seconds between them (2 in the anchor).
        timeout: Seconds one operation (connect, initialise, list or call) may take.
        tools_ttl: Seconds a tool list is reused; the contract keeps definitions stable
            between deploys and the anchor caches them for five minutes.
        down_ttl: Seconds an unreachable engine is not asked for its tools again, so an
            outage costs the reconnect delays once, not on every turn.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 2.0,
        timeout: float = 30.0,
        tools_ttl: float = 300.0,
        down_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self.timeout = timeout
        self.tools_ttl = tools_ttl
        self.down_ttl = down_ttl
        self._down_until = 0.0
        self._clock = clock
        self._tools: tuple[float, list[ToolDefinition]] | None = None
        self._tools_lock = asyncio.Lock()

    async def _with_session(
        self, headers: Mapping[str, str], op: Callable[[ClientSession], Awaitable[T]]
    ) -> T:
        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts + 1):
            if attempt:
                await asyncio.sleep(self.reconnect_delay)
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._once(headers, op)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not _is_connect_failure(exc):
                    raise EngineUnavailableError(f"memory engine failed: {_describe(exc)}") from exc
                last = exc
        raise EngineUnavailableError(
            f"memory engine unreachable after {self.reconnect_attempts + 1} attempts: "
            f"{_describe(last) if last else 'no attempt'}",
            unreachable=True,
        ) from last

    async def _once(
        self, headers: Mapping[str, str], op: Callable[[ClientSession], Awaitable[T]]
    ) -> T:
        timeout = httpx.Timeout(self.timeout, read=self.timeout)
        async with (
            httpx.AsyncClient(
                headers=dict(headers), timeout=timeout, follow_redirects=True
            ) as http,
            streamable_http_client(self.url, http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await op(session)

    async def list_tools(self, headers: Mapping[str, str]) -> list[ToolDefinition]:
        """The engine's tools, from the cache while it is fresh.

        Raises:
            EngineUnavailableError: the engine could not be reached or refused the request.
        """
        cached = self._tools
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        async with self._tools_lock:
            cached = self._tools
            if cached is not None and cached[0] > self._clock():
                return cached[1]
            if self._down_until > self._clock():
                raise EngineUnavailableError("memory engine unreachable", unreachable=True)

            async def fetch(session: ClientSession) -> list[ToolDefinition]:
                listed = await session.list_tools()
                return [ToolDefinition.from_mcp(t) for t in listed.tools]

            try:
                tools = await self._with_session(headers, fetch)
            except EngineUnavailableError as exc:
                if exc.unreachable:
                    self._down_until = self._clock() + self.down_ttl
                raise
            self._tools = (self._clock() + self.tools_ttl, tools)
            return tools

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any], headers: Mapping[str, str]
    ) -> CallToolResult:
        """Call tool ``name`` (its wire name).

        Raises:
            EngineUnavailableError: the engine could not be reached or refused the request.
        """

        async def call(session: ClientSession) -> CallToolResult:
            return await session.call_tool(name, dict(arguments))

        return await self._with_session(headers, call)
