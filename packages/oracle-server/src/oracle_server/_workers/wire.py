"""How the workers of one machine talk to their hub: pickled tuples, each after its length.

The only peers are the processes ``oracle serve --workers`` started: each end is one half
of a socket pair made by the supervisor and inherited by one worker, so nothing else on
the machine can connect to it. That is what makes pickle (which would run code from an
untrusted peer) the right encoding here: run events, run infos and exceptions cross as
they are, with no schema to keep in step.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

__all__ = ["MAX_MESSAGE_BYTES", "encode", "read_message"]

_LENGTH = struct.Struct("!I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""A message larger than this is a bug on the sending side; the connection is dropped."""


def encode(message: tuple[Any, ...]) -> bytes:
    """``message`` as one frame: its pickled length, then itself."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or ``None`` once the peer closed its end.

    Raises:
        ConnectionError: A frame larger than :data:`MAX_MESSAGE_BYTES`, or a cut one.
    """
    try:
        head = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ConnectionError("workers.hub_frame_cut: the peer closed mid-frame") from exc
    (size,) = _LENGTH.unpack(head)
    if size > MAX_MESSAGE_BYTES:
        raise ConnectionError(f"workers.hub_frame_too_large: {size} bytes")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("workers.hub_frame_cut: the peer closed mid-frame") from exc
    message = pickle.loads(body)
    if not isinstance(message, tuple) or not message:
        raise ConnectionError("workers.hub_bad_message: not a tuple")
    return message
