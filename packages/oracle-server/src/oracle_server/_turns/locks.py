"""One running turn per session (SRV-25), in this process or across replicas through Redis.

The ``enqueue`` policy maps to ``hold(session_id, wait=True)`` and the ``reject`` policy to
``hold(session_id, wait=False)``, whose :class:`TurnBusy` the HTTP layer answers with 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from oracle_server._replicas.cancellation import honour_cancellation

__all__ = [
    "InMemoryTurnLocks",
    "RedisTurnLocks",
    "TurnBusy",
    "TurnLocks",
    "create_turn_locks",
]

logger = logging.getLogger(__name__)


class TurnBusy(Exception):
    """The session already has a running turn and the policy is ``reject``.

    Attributes:
        code: Stable error code, ``turn.busy``.
        session_id: The session that is busy.
    """

    code = "turn.busy"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"{self.code}: A turn is already running for this session ({session_id}); "
            "retry after it finishes or use the 'enqueue' policy"
        )


class TurnLocks(Protocol):
    """Mutual exclusion of turns, keyed by session id."""

    def hold(
        self, session_id: str, *, wait: bool, timeout: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn for the duration of an ``async with`` block.

        Args:
            session_id: The session whose turn to take.
            wait: ``True`` queues behind the running turn (FIFO within a process); ``False``
                fails at once when the turn is taken.
            timeout: Seconds to wait for the turn; ``None`` waits for ever.

        Returns:
            An async context manager; the turn is released when the block exits, also on error.

        Raises:
            TurnBusy: On entry, when ``wait`` is ``False`` and the turn is taken.
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out.
        """
        ...

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session (anywhere the locks are shared)."""
        ...

    async def aclose(self) -> None:
        """Release the resources (connections, background tasks) of the locks."""
        ...


@dataclass
class _SessionLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Holders plus waiters; the entry is dropped when this falls back to zero.
    users: int = 0


class InMemoryTurnLocks:
    """Per-session locks in this process, granted in FIFO order.

    An entry exists only while a turn holds or waits for it, so idle sessions cost nothing.
    """

    def __init__(self) -> None:
        self._locks: dict[str, _SessionLock] = {}

    @property
    def tracked_sessions(self) -> int:
        """The number of sessions with a turn holding or waiting."""
        return len(self._locks)

    def hold(
        self, session_id: str, *, wait: bool, timeout: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn for the duration of an ``async with`` block.

        Args:
            session_id: The session whose turn to take.
            wait: ``True`` queues behind the running turn (FIFO); ``False`` fails at once when
                the turn is taken or already has waiters.
            timeout: Seconds to wait for the turn; ``None`` waits for ever.

        Returns:
            An async context manager holding the turn inside its block.

        Raises:
            TurnBusy: On entry, when ``wait`` is ``False`` and the turn is taken.
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out.
        """
        # The timeout bounds only the wait on entry, not the block, so it is an argument
        # rather than an asyncio.timeout around the caller's `async with`.
        return self._held(session_id, wait=wait, patience=timeout)

    @contextlib.asynccontextmanager
    async def _held(
        self, session_id: str, *, wait: bool, patience: float | None
    ) -> AsyncIterator[None]:
        entry = self._locks.get(session_id)
        if entry is None:
            entry = self._locks[session_id] = _SessionLock()
        elif not wait:
            raise TurnBusy(session_id)
        entry.users += 1
        try:
            # asyncio.Lock wakes waiters in arrival order and never lets a newcomer jump ahead
            # of a woken waiter, which gives the FIFO guarantee.
            async with asyncio.timeout(patience):
                await entry.lock.acquire()
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[session_id]

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session in this process."""
        entry = self._locks.get(session_id)
        return entry is not None and entry.lock.locked()

    async def aclose(self) -> None:
        """Nothing to release: entries vanish with their turns."""


# Both scripts act only if the key still holds our token, so a holder whose lease expired
# can neither extend nor delete the lock another replica has taken since.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# Polling backoff while another replica holds the turn: starts fast so a short turn is
# followed promptly, and stays at or under ~50 ms so waiting remains responsive. Only one
# coroutine per session and process polls (the others queue on the local lock).
_POLL_FIRST_SECONDS = 0.005
_POLL_MAX_SECONDS = 0.05


class RedisTurnLocks:
    """Per-session locks shared by replicas through Redis leases.

    A turn is taken with ``SET key token NX PX lease``; a background task renews the lease
    every third of it while the turn runs, so a replica that dies loses its lock within one
    lease. Release is a compare-and-delete, so it never removes a lock another holder took
    after this one's lease ran out. Inside one process, turns first queue on a local
    :class:`InMemoryTurnLocks`, which keeps FIFO order there and lets only one waiter per
    session poll Redis.

    Waiting polls Redis with a backoff capped at 50 ms rather than subscribing to release
    notifications: polling also notices leases that expire after a crash, which publish
    nothing.

    Args:
        url: Redis URL, e.g. ``redis://host:6379/0``.
        prefix: Prepended to every key so several deployments can share one Redis.
        lease_seconds: How long a lock outlives its holder's last renewal.
    """

    def __init__(
        self, url: str, *, prefix: str = "oracle:turn:", lease_seconds: float = 30
    ) -> None:
        lease_ms = int(lease_seconds * 1000)
        if lease_ms < 30:
            raise ValueError(
                f"turnlock.bad_lease: lease_seconds must be at least 0.03, got {lease_seconds}"
            )
        self._prefix = prefix
        self._lease_ms = lease_ms
        self._redis = Redis.from_url(url)
        self._release_script = self._redis.register_script(_RELEASE_LUA)
        self._renew_script = self._redis.register_script(_RENEW_LUA)
        self._local = InMemoryTurnLocks()
        self._renewals: set[asyncio.Task[None]] = set()

    def hold(
        self, session_id: str, *, wait: bool, timeout: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn, across replicas, for the duration of an ``async with`` block.

        Args:
            session_id: The session whose turn to take.
            wait: ``True`` queues behind the running turn (FIFO within this process);
                ``False`` fails at once when the turn is taken here or on another replica.
            timeout: Seconds to wait for the turn, local queueing included; ``None`` waits for
                ever.

        Returns:
            An async context manager holding the turn inside its block.

        Raises:
            TurnBusy: On entry, when ``wait`` is ``False`` and the turn is taken.
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out.
            redis.exceptions.RedisError: On entry, when Redis is unreachable.
        """
        return self._held(session_id, wait=wait, patience=timeout)

    @contextlib.asynccontextmanager
    async def _held(
        self, session_id: str, *, wait: bool, patience: float | None
    ) -> AsyncIterator[None]:
        key = self._prefix + session_id
        token = secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        deadline = None if patience is None else loop.time() + patience
        async with self._local.hold(session_id, wait=wait, timeout=patience):
            await self._acquire(key, token, session_id, wait=wait, deadline=deadline)
            renewal = asyncio.create_task(self._keep_renewed(key, token))
            self._renewals.add(renewal)
            renewal.add_done_callback(self._renewals.discard)
            try:
                yield
            finally:
                # No need to await the cancelled renewal: a renewal racing the release finds
                # the key gone and does nothing.
                renewal.cancel()
                # Shielded so a second cancellation cannot leave the lock to linger a lease.
                await asyncio.shield(self._release(key, token))

    async def _acquire(
        self, key: str, token: str, session_id: str, *, wait: bool, deadline: float | None
    ) -> None:
        # The deadline is checked explicitly rather than with asyncio.timeout around the loop,
        # because a cancellation landing inside a Redis call can be lost (see
        # oracle_server._replicas.cancellation).
        loop = asyncio.get_running_loop()
        delay = _POLL_FIRST_SECONDS
        try:
            while True:
                acquired = await honour_cancellation(
                    self._redis.set(key, token, nx=True, px=self._lease_ms)
                )
                if acquired:
                    return
                if not wait:
                    raise TurnBusy(session_id)
                pause = random.uniform(delay / 2, delay)
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise TimeoutError(
                            f"turn.wait_timeout: session {session_id} stayed busy for the "
                            "whole timeout"
                        )
                    pause = min(pause, left)
                await asyncio.sleep(pause)
                delay = min(delay * 2, _POLL_MAX_SECONDS)
        except asyncio.CancelledError:
            # The SET may have reached Redis (or taken the turn) before the cancellation:
            # drop our token if so.
            await asyncio.shield(self._release(key, token))
            raise

    async def _keep_renewed(self, key: str, token: str) -> None:
        interval = self._lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                # Released while renewing: stop quietly, even if the cancellation was swallowed.
                renewed = await honour_cancellation(
                    self._renew_script(keys=[key], args=[token, self._lease_ms])
                )
            except (RedisError, OSError) as error:
                # The lease leaves two more intervals to get through to Redis.
                logger.warning("turn.renew_failed: could not renew %s: %s", key, error)
                continue
            if not renewed:
                logger.error(
                    "turn.lease_lost: the lease on %s expired before renewal; another turn "
                    "may run concurrently (raise lease_seconds or check Redis latency)",
                    key,
                )
                return

    async def _release(self, key: str, token: str) -> None:
        try:
            await self._release_script(keys=[key], args=[token])
        except (RedisError, OSError) as error:
            logger.warning(
                "turn.release_failed: could not release %s, it frees when its lease expires: %s",
                key,
                error,
            )

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session on any replica."""
        return bool(await self._redis.exists(self._prefix + session_id))

    async def aclose(self) -> None:
        """Stop lease renewals and close the connection pool.

        Call it once turns have finished: locks still held are not deleted and expire after
        their lease, as if this replica had crashed.
        """
        for renewal in list(self._renewals):
            renewal.cancel()
        await asyncio.gather(*self._renewals, return_exceptions=True)
        await self._redis.aclose()


def create_turn_locks(
    redis_url: str | None, *, prefix: str = "oracle:turn:", lease_seconds: float = 30
) -> TurnLocks:
    """Pick the turn locks for the deployment.

    Args:
        redis_url: ``REDIS_URL``; when set the locks live in Redis and hold across replicas,
            otherwise they hold within this process.
        prefix: Key prefix in Redis (ignored in memory).
        lease_seconds: Redis lease length (ignored in memory).

    Returns:
        A :class:`RedisTurnLocks` or an :class:`InMemoryTurnLocks`.
    """
    if redis_url:
        return RedisTurnLocks(redis_url, prefix=prefix, lease_seconds=lease_seconds)
    return InMemoryTurnLocks()
