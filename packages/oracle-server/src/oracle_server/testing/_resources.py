"""Resources still open that nothing will close: what would warn at interpreter exit.

A socket, an asyncio transport, an event loop, a child process or (from Python 3.13) a
SQLite connection left open warns (``ResourceWarning``) when it is collected. When
something long-lived holds it (a module-level cache, a global client), that happens only
at interpreter exit, after a test run has reported its result, where no warning filter
turns it into a failure.
`unclosed_resources` finds them while the run can still fail: the root ``conftest.py``
calls it once every test has finished and fails the run when it finds any.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import sqlite3
import subprocess
import types
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = ["UnclosedResource", "unclosed_resources"]

_CONTAINERS = (dict, list, tuple, set, frozenset)


@dataclass(frozen=True)
class UnclosedResource:
    """One open resource and what keeps it alive.

    Attributes:
        kind: ``transport``, ``socket``, ``event loop``, ``process`` or
            ``sqlite connection``.
        description: Its ``repr``.
        held_by: The objects that reference it, nearest first (type names, a module's
            name): who should have closed it.
    """

    kind: str
    description: str
    held_by: tuple[str, ...]

    def __str__(self) -> str:
        holders = " <- ".join(self.held_by) or "nothing (about to be collected)"
        return f"{self.kind} {self.description} held by {holders}"


def unclosed_resources(*, depth: int = 10) -> list[UnclosedResource]:
    """The sockets, asyncio transports, event loops, child processes and SQLite
    connections still open.

    Collects garbage first, so only what something still references is listed. A
    transport's own socket is listed once, as the transport. The running event loop
    (when called from a coroutine) and what it serves are listed too: call this when
    no event loop should be left, e.g. at the end of a test session.

    Args:
        depth: How many referrers up each resource's ``held_by`` goes.

    Returns:
        The open resources, in no particular order.
    """
    gc.collect()
    kinds: list[str] = []
    found: list[Any] = []
    transport_fds: set[int] = set()
    sockets: list[socket.socket] = []
    for obj in gc.get_objects():
        if type(obj) in weakref.ProxyTypes:  # isinstance would reach a dead referent
            continue
        if isinstance(obj, socket.socket):
            if obj.fileno() != -1:
                sockets.append(obj)
            continue
        kind = _open_kind(obj)
        if kind is None:
            continue
        kinds.append(kind)
        found.append(obj)
        if kind == "transport":
            with contextlib.suppress(Exception):
                transport_fds.add(obj.get_extra_info("socket").fileno())
    for sock in sockets:
        if sock.fileno() not in transport_fds:
            kinds.append("socket")
            found.append(sock)
    scanned = {id(found), id(sockets)}
    leaks: list[UnclosedResource] = []
    for index, kind in enumerate(kinds):
        resource = found[index]
        holders = tuple(_holders(resource, depth, scanned))
        leaks.append(UnclosedResource(kind, repr(resource), holders))
    return leaks


def _open_kind(obj: Any) -> str | None:
    """What open resource ``obj`` is (sockets aside), or ``None``."""
    if isinstance(obj, asyncio.BaseTransport):
        return "transport" if _transport_open(obj) else None
    if isinstance(obj, asyncio.AbstractEventLoop):
        return None if obj.is_closed() else "event loop"
    if isinstance(obj, subprocess.Popen):
        return "process" if obj.poll() is None else None
    if isinstance(obj, sqlite3.Connection):
        return "sqlite connection" if _database_open(obj) else None
    return None


def _database_open(connection: sqlite3.Connection) -> bool:
    try:
        connection.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return False
    return True


def _transport_open(transport: asyncio.BaseTransport) -> bool:
    try:
        return not transport.is_closing()
    except NotImplementedError:  # a transport class that does not say
        return False


def _holders(obj: Any, depth: int, ignored: set[int]) -> list[str]:
    """A chain of owners above ``obj``, preferring objects over plain containers.

    An object that ``obj`` itself references (its own parts, such as a SQLite
    connection's statement cache) is not taken for an owner.
    """
    chain: list[str] = []
    seen = {id(obj)} | ignored
    current = obj
    for _ in range(depth):
        parts = {id(part) for part in gc.get_referents(current)}
        referrers = [
            ref
            for ref in gc.get_referrers(current)
            if id(ref) not in seen and id(ref) not in parts and not isinstance(ref, types.FrameType)
        ]
        seen.add(id(referrers))
        if not referrers:
            break
        ref = next((r for r in referrers if not isinstance(r, _CONTAINERS)), referrers[0])
        seen.add(id(ref))
        if not isinstance(ref, _CONTAINERS):
            chain.append(_name(ref))
        if isinstance(ref, types.ModuleType):
            break
        current = ref
    return chain


def _name(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, types.FunctionType | types.MethodType):
        return f"function {obj.__module__}.{obj.__qualname__}"
    kind = type(obj)
    wrapped = getattr(obj, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType):  # e.g. functools.lru_cache around a function
        return f"{kind.__qualname__} of {wrapped.__module__}.{wrapped.__qualname__}"
    return f"{kind.__module__}.{kind.__qualname__}"
