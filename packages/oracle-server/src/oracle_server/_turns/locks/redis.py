"""Turn locks shared by replicas: redis-py's :class:`redis.asyncio.lock.Lock` per turn.

redis-py's lock does the Redis side: ``SET NX PX`` to take the turn, its token-checked Lua
scripts to release and to renew the lease (so a holder whose lease ran out can neither
delete nor extend the lock another replica took since), and a fixed-interval poll while
another replica holds the turn. Polling rather than a release notification also notices
leases that expire after a crash, which publish nothing.

Still hand-written here, because ``Lock`` does not do it:

- FIFO order within a process and one poller per session: turns first queue on a local
  :class:`~oracle_server._turns.locks.memory.InMemoryTurnLocks`;
- renewal while the turn runs: a background task calls ``Lock.reacquire`` every third of
  the lease, so a replica that dies loses its lock within one lease;
- a cancellation never leaves the lock held: the token is chosen here, so a cancellation
  landing after the ``SET`` reached Redis can still release it;
- every Redis call of the lock honours a cancellation that redis-py swallowed on Python
  3.11 (:mod:`oracle_server._replicas.cancellation`), so a timed-out waiter stops polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Literal

from redis.asyncio.lock import Lock
from redis.exceptions import LockError, LockNotOwnedError, RedisError

from oracle_server._redis import redis_client
from oracle_server._replicas.cancellation import honour_cancellation
from oracle_server._turns.locks.base import TurnBusy, wait_timeout
from oracle_server._turns.locks.memory import InMemoryTurnLocks

__all__ = ["RedisTurnLocks"]

logger = logging.getLogger(__name__)

# How often a waiter asks Redis whether another replica's turn is over. Only one coroutine
# per session and process polls (the others queue on the local lock).
POLL_SECONDS = 0.05


class _Lease(Lock):
    """redis-py's lock whose every Redis call honours a swallowed cancellation."""

    async def do_acquire(self, token: str | bytes) -> bool:
        return await honour_cancellation(super().do_acquire(token))

    async def do_release(self, expected_token: bytes) -> None:
        await honour_cancellation(super().do_release(expected_token))

    async def do_reacquire(self) -> Literal[True]:
        return await honour_cancellation(super().do_reacquire())


class RedisTurnLocks:
    """Per-session locks shared by replicas through Redis leases.

    Args:
        url: Redis URL, e.g. ``redis://host:6379/0``.
        prefix: Prepended to every key so several deployments can share one Redis.
        lease_seconds: How long a lock outlives its holder's last renewal.

    Raises:
        ValueError: ``turnlock.bad_lease`` when the lease is under 30 ms.
    """

    def __init__(
        self, url: str, *, prefix: str = "oracle:turn:", lease_seconds: float = 30
    ) -> None:
        if int(lease_seconds * 1000) < 30:
            raise ValueError(
                f"turnlock.bad_lease: lease_seconds must be at least 0.03, got {lease_seconds}"
            )
        self._prefix = prefix
        self._lease_seconds = lease_seconds
        self._redis = redis_client(url)
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
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out
                (``turn.wait_timeout``).
            redis.exceptions.RedisError: On entry, when Redis is unreachable.
        """
        return self._held(session_id, wait=wait, patience=timeout)

    @contextlib.asynccontextmanager
    async def _held(
        self, session_id: str, *, wait: bool, patience: float | None
    ) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        deadline = None if patience is None else loop.time() + patience
        async with self._local.hold(session_id, wait=wait, timeout=patience):
            lease = _Lease(
                self._redis,
                self._prefix + session_id,
                timeout=self._lease_seconds,
                sleep=POLL_SECONDS,
                # One Lock per turn, used by the one task holding it and its renewal task.
                thread_local=False,
            )
            await self._acquire(lease, session_id, wait=wait, deadline=deadline)
            renewal = loop.create_task(self._keep_renewed(lease))
            self._renewals.add(renewal)
            renewal.add_done_callback(self._renewals.discard)
            try:
                yield
            finally:
                # No need to await the cancelled renewal: a renewal racing the release finds
                # the token gone and stops.
                renewal.cancel()
                # Shielded so a second cancellation cannot leave the lock to linger a lease.
                await asyncio.shield(self._release(lease))

    async def _acquire(
        self, lease: _Lease, session_id: str, *, wait: bool, deadline: float | None
    ) -> None:
        token = secrets.token_hex(16)
        try:
            async with asyncio.timeout_at(deadline if wait else None):
                acquired = await lease.acquire(blocking=wait, token=token)
        except TimeoutError:
            await asyncio.shield(self._release(lease, token))
            raise wait_timeout(session_id) from None
        except asyncio.CancelledError:
            await asyncio.shield(self._release(lease, token))
            raise
        if not acquired:
            raise TurnBusy(session_id)

    async def _keep_renewed(self, lease: _Lease) -> None:
        interval = self._lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await lease.reacquire()
            except LockNotOwnedError:
                logger.error(
                    "turn.lease_lost: the lease on %s expired before renewal; another turn "
                    "may run concurrently (raise lease_seconds or check Redis latency)",
                    lease.name,
                )
                return
            except LockError:
                return  # released meanwhile
            except (RedisError, OSError) as error:
                # The lease leaves two more intervals to get through to Redis.
                logger.warning("turn.renew_failed: could not renew %s: %s", lease.name, error)

    async def _release(self, lease: _Lease, token: str | None = None) -> None:
        """Delete the lock if it still holds this turn's token.

        Args:
            lease: The turn's lock.
            token: The token of an acquisition that was interrupted: the ``SET`` may have
                reached Redis before the interruption, so the lock does not know it holds it.
        """
        if token is not None:
            lease.local.token = token.encode()
        try:
            await lease.release()
        except LockError:
            return  # the lease ran out (or was never taken): nothing of ours to delete
        except (RedisError, OSError) as error:
            logger.warning(
                "turn.release_failed: could not release %s, it frees when its lease expires: %s",
                lease.name,
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
