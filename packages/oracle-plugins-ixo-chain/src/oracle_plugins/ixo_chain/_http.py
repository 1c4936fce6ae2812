"""One read with one retry, inside the call's wall-clock budget, logged without user data."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

__all__ = ["Budget", "ReadFailure", "read_with_retry"]

RETRY_DELAY_SECONDS = 0.2


class Budget:
    """The wall-clock budget of one tool call (``IXO_CHAIN_TOOL_BUDGET_MS``)."""

    def __init__(self, milliseconds: int) -> None:
        self._deadline = time.monotonic() + milliseconds / 1000

    def remaining(self) -> float:
        """Seconds left; zero or less once spent."""
        return self._deadline - time.monotonic()


class ReadFailure(Exception):
    """A read that failed after its retry (or ran out of time).

    Attributes:
        reason: ``upstream_error`` or ``rate_limited``.
        detail: One plain sentence the model can relay.
        retryable: Whether trying again later may work.
    """

    def __init__(self, reason: str, detail: str, retryable: bool) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = retryable


def _transient(status: int) -> bool:
    return status == 429 or status >= 500


async def read_with_retry(
    send: Callable[[], Awaitable[httpx.Response]],
    *,
    read: str,
    service: str,
    budget: Budget,
    logger: logging.Logger,
) -> httpx.Response:
    """Send a request; on a transport error, a timeout, a 5xx or a 429, try once more.

    Args:
        send: Sends the request (a fresh one each time).
        read: What is read, for the log line (``balances``, ``blocksync``…).
        service: The service's name for the failure detail.
        budget: The call's budget; each attempt gets what is left of it.
        logger: Gets one ``[ixo-chain] <read> attempt N failed: <status or class>``
            warning per failed attempt, never a body or an address.

    Returns:
        The first response that is not transient (it may be a 4xx).

    Raises:
        ReadFailure: Both attempts failed, or the budget ran out.
    """
    last_status: int | None = None
    for attempt in (1, 2):
        remaining = budget.remaining()
        if remaining <= 0:
            break
        try:
            async with asyncio.timeout(remaining):
                response = await send()
        except (httpx.TransportError, TimeoutError) as exc:
            last_status = None
            failure = type(exc).__name__
        else:
            if not _transient(response.status_code):
                return response
            last_status = response.status_code
            failure = str(response.status_code)
        logger.warning("[ixo-chain] %s attempt %d failed: %s", read, attempt, failure)
        if attempt == 1:
            await asyncio.sleep(max(0.0, min(RETRY_DELAY_SECONDS, budget.remaining())))
    if last_status == 429:
        raise ReadFailure("rate_limited", f"{service} is rate limiting requests.", True)
    if budget.remaining() <= 0:
        raise ReadFailure("upstream_error", f"{service} did not answer in time.", True)
    if last_status is not None:
        detail = f"{service} failed (HTTP {last_status}) twice in a row."
        raise ReadFailure("upstream_error", detail, True)
    raise ReadFailure("upstream_error", f"{service} could not be reached.", True)
