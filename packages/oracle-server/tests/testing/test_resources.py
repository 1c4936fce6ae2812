"""`unclosed_resources` finds what would warn at interpreter exit, and who holds it."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys

from oracle_server.testing import UnclosedResource, unclosed_resources


class Holder:
    """Stands for a long-lived cache that keeps a resource open."""

    def __init__(self, resource: object) -> None:
        self.resource = resource


def entry_for(resource: object) -> UnclosedResource | None:
    found = [leak for leak in unclosed_resources() if leak.description == repr(resource)]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_an_open_socket_is_found_with_what_holds_it() -> None:
    holder = Holder(socket.socket())
    try:
        leak = entry_for(holder.resource)
        assert leak is not None
        assert leak.kind == "socket"
        assert leak.held_by[0] == f"{__name__}.Holder"
        assert str(leak).startswith(f"socket {holder.resource!r} held by {__name__}.Holder")
    finally:
        holder.resource.close()  # type: ignore[attr-defined]
    assert entry_for(holder.resource) is None


def test_an_open_transport_is_found_once_and_its_loop_with_it() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    try:
        _reader, writer = loop.run_until_complete(
            asyncio.open_connection(*listener.getsockname()[:2])
        )
        transport = writer.transport
        leak = entry_for(transport)
        assert leak is not None
        assert leak.kind == "transport"
        assert leak.held_by[0].startswith("asyncio.streams.Stream")  # the reader or writer
        # Its socket is the transport's, not listed again.
        own_fd = transport.get_extra_info("socket").fileno()
        assert not [x for x in unclosed_resources() if f"fd={own_fd}," in x.description]
        loop_entry = entry_for(loop)
        assert loop_entry is not None
        assert loop_entry.kind == "event loop"

        writer.close()
        loop.run_until_complete(writer.wait_closed())
        assert entry_for(transport) is None
    finally:
        loop.close()
        listener.close()
    assert entry_for(loop) is None


def test_a_child_process_still_running_is_found_until_it_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leak = entry_for(child)
        assert leak is not None
        assert leak.kind == "process"
    finally:
        child.kill()
        child.wait()
    assert entry_for(child) is None


def test_an_open_sqlite_connection_is_found_until_it_is_closed() -> None:
    holder = Holder(sqlite3.connect(":memory:"))
    connection = holder.resource
    assert isinstance(connection, sqlite3.Connection)
    try:
        leak = entry_for(connection)
        assert leak is not None
        assert leak.kind == "sqlite connection"
        assert leak.held_by[0] == f"{__name__}.Holder"
    finally:
        connection.close()
    assert entry_for(connection) is None
