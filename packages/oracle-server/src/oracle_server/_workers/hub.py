"""The hub of one machine's workers: what they share, held once, in the supervisor.

``oracle serve --workers N`` runs N worker processes with the embedded defaults (SQLite,
no Redis). What replicas share through Redis, these share through the hub: the run log,
the turn locks and the rate limits live here as the in-memory reference implementations
(the same objects a single process uses), and the workers reach them over their socket
pairs; the socket.io rooms and the replica bus speak on the hub's channels.

What a single process cannot lose but a worker can is handled where the hub sees it: when
a worker's connection ends (it crashed, or was killed), every call it had open is
cancelled, so the turns it held are given back at once — no lease to run out — and its
runs still active are ended as ``interrupted`` with an ``error`` and ``done``, as a
replica's are when its heartbeat stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oracle_server._http.ratelimit.memory import InMemoryRateLimiter
from oracle_server._turns.locks.memory import InMemoryTurnLocks
from oracle_server._turns.runlog.base import (
    ACTIVE,
    RunEvent,
    RunInfo,
    interrupted_events,
    partial_text,
)
from oracle_server._turns.runlog.memory import MemoryRunLog
from oracle_server._workers.wire import encode, read_message

__all__ = ["WorkerHub"]

logger = logging.getLogger("oracle.server.workers")

# What workers may call on each shared object; anything else is refused.
_CALLABLE: dict[str, frozenset[str]] = {
    "runs": frozenset({"create", "append", "set_status", "info", "owner", "active_run", "read"}),
    "locks": frozenset({"is_held"}),
    "limiter": frozenset({"hit"}),
}


@dataclass
class _RunProgress:
    """What the hub needs to end a run whose worker died."""

    last_seq: int = 0
    text: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Peer:
    """One worker's connection."""

    writer: asyncio.StreamWriter
    name: str = "?"
    tasks: dict[int, asyncio.Task[Any]] = field(default_factory=dict)
    runs: dict[str, _RunProgress] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, message: tuple[Any, ...]) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode(message))


class WorkerHub:
    """The run log, turn locks, rate limits and channels shared by one machine's workers.

    Attributes:
        runs: The run log every worker writes and reads.
        locks: The turn locks every worker takes.
        limiter: The rate limits every worker counts on.
    """

    def __init__(self) -> None:
        self.runs = MemoryRunLog()
        self.locks = InMemoryTurnLocks()
        self.limiter = InMemoryRateLimiter()
        self._targets: dict[str, Any] = {
            "runs": self.runs,
            "locks": self.locks,
            "limiter": self.limiter,
        }
        self._handlers: dict[str, Callable[..., None]] = {
            "call": self._on_call,
            "hold": self._on_hold,
            "cancel": self._on_cancel,
            "pub": self._on_publish,
            "sub": self._on_subscribe,
            "unsub": self._on_unsubscribe,
            "hello": self._on_hello,
            "ready": self._on_ready,
        }
        self._peers: set[_Peer] = set()
        self._subscribers: dict[str, list[_Peer]] = {}
        self._serving: set[asyncio.Task[None]] = set()
        self._cleanups: set[asyncio.Task[None]] = set()
        self._casts: set[asyncio.Task[None]] = set()

    async def attach(self, sock: socket.socket) -> Callable[[], asyncio.Event]:
        """Serve one worker over ``sock`` (the hub's end of its socket pair).

        Returns:
            A function giving the event set once that worker announced it serves.
        """
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        peer = _Peer(writer)
        self._peers.add(peer)
        task = asyncio.get_running_loop().create_task(self._serve(peer, reader))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)
        return lambda: peer.ready

    @property
    def workers(self) -> int:
        """The number of workers connected."""
        return len(self._peers)

    async def aclose(self) -> None:
        """Drop every worker's connection and release what the hub holds."""
        for task in list(self._serving):
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
        await asyncio.gather(*self._cleanups, return_exceptions=True)
        await asyncio.gather(*self._casts, return_exceptions=True)
        await self.runs.aclose()
        await self.locks.aclose()
        await self.limiter.aclose()

    # -- one worker --------------------------------------------------------------------

    async def _serve(self, peer: _Peer, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                message = await read_message(reader)
                if message is None:
                    break
                self._dispatch(peer, message)
        except (ConnectionError, OSError, TypeError, ValueError) as exc:
            # A frame that does not decode or fit its kind ends that worker's connection.
            logger.warning("workers.peer_failed: worker %s: %r", peer.name, exc)
        finally:
            cleanup = asyncio.get_running_loop().create_task(self._gone(peer))
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)

    def _dispatch(self, peer: _Peer, message: tuple[Any, ...]) -> None:
        handler = self._handlers.get(message[0])
        if handler is None:
            logger.warning("workers.bad_message: %r from worker %s", message[0], peer.name)
            return
        handler(peer, *message[1:])

    def _on_call(
        self, peer: _Peer, call_id: int, target: str, method: str, args: Any, kwargs: Any
    ) -> None:
        work = self._call(peer, call_id, target, method, args, kwargs)
        if call_id:
            self._spawn(peer, call_id, work)
            return
        # A cast (``HubConnection.cast``): nobody waits for it or cancels it. Tasks start
        # in the order they are made, and the shared objects' writes do not suspend, so
        # casts and calls take effect in the order they came.
        task = asyncio.get_running_loop().create_task(work)
        self._casts.add(task)
        task.add_done_callback(self._casts.discard)

    def _on_hold(
        self, peer: _Peer, call_id: int, session_id: str, wait: bool, patience: float | None
    ) -> None:
        self._spawn(peer, call_id, self._hold(peer, call_id, session_id, wait, patience))

    def _on_cancel(self, peer: _Peer, call_id: int) -> None:
        task = peer.tasks.get(call_id)
        if task is not None:
            task.cancel()

    def _on_publish(self, peer: _Peer, call_id: int, channel: str, body: Any) -> None:
        receivers = self._subscribers.get(channel, [])
        for receiver in receivers:
            receiver.send(("msg", channel, body))
        if call_id:
            peer.send(("ret", call_id, True, len(receivers)))

    def _on_subscribe(self, peer: _Peer, call_id: int, channel: str) -> None:
        receivers = self._subscribers.setdefault(channel, [])
        if peer not in receivers:
            receivers.append(peer)
        peer.send(("ret", call_id, True, None))

    def _on_unsubscribe(self, peer: _Peer, call_id: int, channel: str) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.get(channel, []).remove(peer)
        peer.send(("ret", call_id, True, None))

    def _on_hello(self, peer: _Peer, name: str) -> None:
        peer.name = str(name)

    def _on_ready(self, peer: _Peer) -> None:
        peer.ready.set()

    def _spawn(self, peer: _Peer, call_id: int, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        peer.tasks[call_id] = task
        task.add_done_callback(lambda _: peer.tasks.pop(call_id, None))

    async def _call(
        self,
        peer: _Peer,
        call_id: int,
        target: str,
        method: str,
        args: tuple[Any, ...],
        kwargs: Any,
    ) -> None:
        if method not in _CALLABLE.get(target, ()):
            error = LookupError(f"workers.hub_unknown_call: {target}.{method}")
            self._answer(peer, call_id, target, method, False, error)
            return
        if (target, method) == ("runs", "create"):
            kwargs = {**kwargs, "replica": peer.name}
        try:
            result = await getattr(self._targets[target], method)(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._answer(peer, call_id, target, method, False, exc)
            return
        if target == "runs":
            self._track(peer, method, args)
        self._answer(peer, call_id, target, method, True, result)

    @staticmethod
    def _answer(peer: _Peer, call_id: int, target: str, method: str, ok: bool, value: Any) -> None:
        if call_id:
            peer.send(("ret", call_id, ok, value))
        elif not ok:
            logger.warning(
                "workers.cast_failed: %s.%s from worker %s: %s",
                target,
                method,
                peer.name,
                type(value).__name__,
            )

    def _track(self, peer: _Peer, method: str, args: tuple[Any, ...]) -> None:
        if method == "create":
            info: RunInfo = args[0]
            peer.runs[info.run_id] = _RunProgress()
        elif method == "append":
            progress = peer.runs.get(args[0])
            events: list[RunEvent] = args[1]
            if progress is not None and events:
                progress.last_seq = max(progress.last_seq, events[-1].seq)
                progress.text.append(partial_text(events))
        elif method == "set_status" and args[1] not in ACTIVE:
            peer.runs.pop(args[0], None)

    async def _hold(
        self, peer: _Peer, call_id: int, session_id: str, wait: bool, patience: float | None
    ) -> None:
        try:
            async with self.locks.hold(session_id, wait=wait, timeout=patience):
                peer.send(("ret", call_id, True, None))
                # Held until the worker gives it back (a cancel) or its connection ends.
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            peer.send(("ret", call_id, False, exc))

    async def _gone(self, peer: _Peer) -> None:
        self._peers.discard(peer)
        for receivers in self._subscribers.values():
            with contextlib.suppress(ValueError):
                receivers.remove(peer)
        tasks = list(peer.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        peer.writer.close()
        ended = 0
        for run_id, progress in list(peer.runs.items()):
            info = await self.runs.info(run_id)
            if info is None or info.status not in ACTIVE:
                continue
            await self.runs.append(
                run_id, interrupted_events(progress.last_seq + 1, "".join(progress.text))
            )
            await self.runs.set_status(run_id, "interrupted")
            ended += 1
        peer.runs.clear()
        if ended:
            logger.warning(
                "runs.interrupted: worker %s stopped; %d of its runs were ended", peer.name, ended
            )
