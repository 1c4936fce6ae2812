"""``user_context`` per session: fetched once, cached five minutes, never failing a turn."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from oracle_plugins.memory._slots import empty_context, slots_from_results

__all__ = ["ContextCache", "EngineRestClient", "UserContext"]

UserContext = dict[str, str | None]


class EngineRestClient:
    """The engine's REST surface at ``MEMORY_ENGINE_URL``.

    Args:
        base_url: ``MEMORY_ENGINE_URL``.
        client: The HTTP client (the plugin opens one for its lifetime).
        timeout: Seconds ``/search-enhanced-batch`` may take (15 in the anchor).
        logger: Where failures are logged (status and type only, never content).
    """

    def __init__(
        self,
        base_url: str,
        client: httpx.AsyncClient,
        *,
        timeout: float = 15.0,
        logger: logging.Logger,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client
        self.timeout = timeout
        self._logger = logger

    async def search_batch(
        self, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> list[Any] | None:
        """The ``results`` of ``POST /search-enhanced-batch``, or ``None`` on any failure."""
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._client.post(
                    f"{self.base_url}/search-enhanced-batch",
                    json=dict(body),
                    headers=dict(headers),
                    timeout=self.timeout,
                )
        except TimeoutError:
            self._logger.warning("memory user context timed out after %.0f s", self.timeout)
            return None
        except httpx.HTTPError as exc:
            self._logger.warning("memory user context failed: %s", type(exc).__name__)
            return None
        if response.status_code != 200:
            self._logger.warning("memory user context failed: HTTP %d", response.status_code)
            return None
        try:
            results = response.json().get("results")
        except (ValueError, AttributeError):
            results = None
        if not isinstance(results, list):
            self._logger.warning("memory user context: the engine sent no results list")
            return None
        return results

    async def post_messages(
        self, messages: list[dict[str, str]], headers: Mapping[str, str]
    ) -> bool:
        """``POST /messages``; whether the engine accepted them."""
        try:
            response = await self._client.post(
                f"{self.base_url}/messages",
                json={"messages": messages},
                headers=dict(headers),
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            self._logger.warning("memory history ingestion failed: %s", type(exc).__name__)
            return False
        if response.status_code >= 300:
            self._logger.warning("memory history ingestion failed: HTTP %d", response.status_code)
            return False
        return True


class ContextCache:
    """Per-session ``user_context``: one fetch at a time, results kept ``ttl`` seconds.

    Same-session writes may not reach the prompt until the entry expires (intended, as in
    the anchor). A failed fetch is kept ``failure_ttl`` seconds, so a slow or broken
    engine is not waited for on every turn.
    """

    def __init__(
        self,
        *,
        ttl: float = 300.0,
        failure_ttl: float = 30.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[float, UserContext]] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Task[UserContext | None]] = {}

    async def get(
        self, key: tuple[str, str], fetch: Callable[[], Awaitable[UserContext | None]]
    ) -> UserContext:
        """The cached context for ``key``, else ``fetch()`` (``None`` means it failed)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > self._clock():
            return dict(entry[1])
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._run(key, fetch))
            self._inflight[key] = task
        # A cancelled turn must not cancel the fetch that other turns share.
        result = await asyncio.shield(task)
        return dict(result) if result is not None else empty_context()

    async def _run(
        self, key: tuple[str, str], fetch: Callable[[], Awaitable[UserContext | None]]
    ) -> UserContext | None:
        try:
            result = await fetch()
        finally:
            self._inflight.pop(key, None)
        ttl = self.ttl if result is not None else self.failure_ttl
        self._entries[key] = (self._clock() + ttl, result or empty_context())
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return result

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()


def context_from_batch(results: list[Any] | None) -> UserContext | None:
    """``user_context`` from the batch ``results`` (``None`` stays ``None``: a failure)."""
    return None if results is None else slots_from_results(results)
