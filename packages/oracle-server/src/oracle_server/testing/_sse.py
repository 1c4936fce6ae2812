"""Python ports of the JavaScript client SDK's SSE parsers, for protocol tests (SRV-70 b).

Two generations of the SDK read the oracle's SSE body, and the server must satisfy both:

- **1.4.0** (`PersistentSseParser`) keeps its line buffer and its frame fields (``event``,
  ``data``, ``id``) across network reads, so a frame may arrive in any number of pieces.
- **1.1.x** (`PerReadSseParser`) carries only the unfinished last *line* over to the next
  read; the frame fields start empty on every read. A frame whose lines arrive in two reads
  is silently lost, which is why the server writes every frame as one body chunk (SRV-30).

Both are line based: each line is trimmed (so ``\\r\\n`` works), a frame is dispatched on a
blank line **or a comment line**, and only when it has both an ``event:`` and a ``data:``
line. Only one ``data:`` line counts (a later one replaces an earlier one), the data must be
JSON, and unknown event names are dropped. Malformed frames are dropped without an error,
as the SDK only logs a console warning for them.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ACCEPTED_EVENTS",
    "PER_READ_ACCEPTED_EVENTS",
    "PerReadSseParser",
    "PersistentSseParser",
    "SseEvent",
    "frame_boundaries",
    "parse_stream",
    "split_everywhere",
]

ACCEPTED_EVENTS: tuple[str, ...] = (
    "message",
    "tool_call",
    "action_call",
    "error",
    "done",
    "run",
    "router.update",
    "render_component",
    "browser_tool_call",
    "message_cache_invalidation",
    "reasoning",
)
"""Event names SDK 1.4.0 delivers (SRV-31); frames with any other name are dropped."""

PER_READ_ACCEPTED_EVENTS: tuple[str, ...] = tuple(e for e in ACCEPTED_EVENTS if e != "run")
"""Event names SDK 1.1.x delivers: it predates runs, so it drops ``run`` frames."""


@dataclass(frozen=True)
class SseEvent:
    """One event as the SDK hands it to the chat code.

    Attributes:
        event: The event name, one of the parser's accepted names.
        data: The frame's JSON data, decoded.
        id: The frame's numeric ``id:``, or ``None`` when it had none (SDK 1.1.x ignores ids,
            so its events always have ``None``).
    """

    event: str
    data: Any
    id: int | None = None


def _reject_constant(name: str) -> Any:
    # JSON.parse rejects NaN and Infinity; Python's json accepts them unless told not to.
    raise ValueError(f"{name} is not JSON")


def _decode(data: str) -> tuple[bool, Any]:
    """``(True, value)`` if ``data`` is JSON as ``JSON.parse`` reads it, else ``(False, None)``."""
    try:
        return True, json.loads(data, parse_constant=_reject_constant)
    except ValueError:
        return False, None


def _numeric_id(value: str) -> int | None:
    return int(value) if value.isascii() and value.isdigit() else None


class PersistentSseParser:
    """The SSE parser of client SDK 1.4.0: state survives between reads.

    Feed it the body's reads in order, then call `end` once; each call returns the events
    completed by it. A frame missing ``event:`` or ``data:`` at a blank or comment line is
    not dispatched and its fields stay until they are replaced, like the SDK's.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._event = ""
        self._data = ""
        self._id: int | None = None

    def feed(self, chunk: str) -> list[SseEvent]:
        """Parse one network read.

        Args:
            chunk: The decoded text of the read.

        Returns:
            The events whose frames were completed by this read.
        """
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        events: list[SseEvent] = []
        for line in lines:
            event = self._line(line.strip())
            if event is not None:
                events.append(event)
        return events

    def end(self) -> list[SseEvent]:
        """Finish the stream: a last frame without a trailing blank line is still parsed.

        Returns:
            The last event, if the unterminated tail made one.
        """
        rest, self._buffer = self._buffer.strip(), ""
        if rest and not rest.startswith(":"):
            self._field(rest)
        event = self._dispatch()
        return [] if event is None else [event]

    def _line(self, line: str) -> SseEvent | None:
        if line == "" or line.startswith(":"):
            return self._dispatch()
        self._field(line)
        return None

    def _field(self, line: str) -> None:
        if line.startswith("event:"):
            self._event = line[6:].strip()
        elif line.startswith("data:"):
            self._data = line[5:].strip()
        elif line.startswith("id:"):
            self._id = _numeric_id(line[3:].strip())

    def _dispatch(self) -> SseEvent | None:
        if not (self._event and self._data):
            return None
        name, data, frame_id = self._event, self._data, self._id
        self._event, self._data, self._id = "", "", None
        ok, value = _decode(data)
        if not ok or name not in ACCEPTED_EVENTS:
            return None
        return SseEvent(event=name, data=value, id=frame_id)


class PerReadSseParser:
    """The SSE parser of client SDK 1.1.x: frame fields reset after every read.

    The unfinished last line of a read is kept and completed by the next read, but the
    ``event`` and ``data`` fields start empty on each read, so a frame whose lines span two
    reads is lost. ``id:`` lines are ignored. Two quirks are ported as they are: a frame
    with an unknown event name keeps its fields until they are replaced, and at the end of
    the stream only the unterminated last *line* is examined, which alone never holds both
    fields.
    """

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, chunk: str) -> list[SseEvent]:
        """Parse one network read on its own (only a partial last line is carried over).

        Args:
            chunk: The decoded text of the read.

        Returns:
            The events of the frames that were complete within this read.
        """
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        event, data = "", ""
        events: list[SseEvent] = []
        for raw in lines:
            line = raw.strip()
            if line == "" or line.startswith(":"):
                if event and data:
                    ok, value = _decode(data)
                    if ok and event not in PER_READ_ACCEPTED_EVENTS:
                        continue  # the SDK's `continue` skips the field reset
                    if ok:
                        events.append(SseEvent(event=event, data=value))
                    event, data = "", ""
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        return events

    def end(self) -> list[SseEvent]:
        """Finish the stream, examining the unterminated last line as the SDK does.

        Returns:
            The event made by that line alone (in practice none).
        """
        rest, self._buffer = self._buffer, ""
        if not rest.strip():
            return []
        event, data = "", ""
        for raw in rest.split("\n"):
            line = raw.strip()
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if not (event and data):
            return []
        ok, value = _decode(data)
        if not ok or event not in PER_READ_ACCEPTED_EVENTS:
            return []
        return [SseEvent(event=event, data=value)]


def parse_stream(
    chunks: Iterable[str], parser: Literal["persistent", "per_read"]
) -> list[SseEvent]:
    """Parse a whole body, given as the reads a client would see, with one SDK parser.

    Args:
        chunks: The body's reads, in order.
        parser: ``"persistent"`` for SDK 1.4.0, ``"per_read"`` for SDK 1.1.x.

    Returns:
        Every event the SDK would deliver, in order.
    """
    impl = PersistentSseParser() if parser == "persistent" else PerReadSseParser()
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(impl.feed(chunk))
    events.extend(impl.end())
    return events


def frame_boundaries(body: str) -> list[int]:
    """Offsets inside ``body`` right after each frame's terminating blank line.

    Args:
        body: An SSE body.

    Returns:
        The sorted offsets strictly between 0 and ``len(body)`` where a frame (or a
        comment block) ends.
    """
    offsets: list[int] = []
    position = 0
    for line in body.split("\n")[:-1]:
        position += len(line) + 1
        if line.strip() == "" and 0 < position < len(body):
            offsets.append(position)
    return offsets


def split_everywhere(body: str, *, random_splits: int = 0, seed: int = 0) -> Iterator[list[str]]:
    """Every way a network could deliver ``body`` when the server writes whole frames.

    Yields the whole body as one read, then every split into two reads at a frame
    boundary, then one read per frame, then ``random_splits`` random groupings of whole
    frames into reads (reproducible from ``seed``), for fuzzing.

    Args:
        body: An SSE body.
        random_splits: How many random groupings to add.
        seed: Seed of the random groupings.

    Yields:
        Lists of reads whose concatenation is ``body``.
    """
    boundaries = frame_boundaries(body)
    yield [body]
    for offset in boundaries:
        yield [body[:offset], body[offset:]]
    if len(boundaries) > 1:
        yield _cut(body, boundaries)
    rng = random.Random(seed)
    for _ in range(random_splits):
        chosen = sorted(rng.sample(boundaries, rng.randint(0, len(boundaries))))
        yield _cut(body, chosen)


def _cut(body: str, offsets: list[int]) -> list[str]:
    edges = [0, *offsets, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges)]
