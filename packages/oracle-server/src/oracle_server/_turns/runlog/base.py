"""What a run log is: runs, their numbered events, and the protocol every backend follows."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from oracle_server._http.sse import frame
from oracle_server._timestamps import timestamp

__all__ = [
    "ACTIVE",
    "MAX_BYTES",
    "MAX_EVENTS",
    "REPLICA_TIMEOUT_SECONDS",
    "RUN_RETENTION_SECONDS",
    "RUN_TOMBSTONE_SECONDS",
    "RunEvent",
    "RunGone",
    "RunInfo",
    "RunLog",
    "RunStatus",
    "interrupted_events",
    "partial_text",
]

RunStatus = Literal[
    "queued", "running", "recovering", "finished", "interrupted", "aborted", "failed"
]
ACTIVE: frozenset[str] = frozenset({"queued", "running", "recovering"})
RUN_RETENTION_SECONDS = 600.0
RUN_TOMBSTONE_SECONDS = 86_400.0
MAX_TOMBSTONES = 100_000
MAX_EVENTS = 20_000
MAX_BYTES = 8 * 1024 * 1024
REPLICA_TIMEOUT_SECONDS = 15.0


class RunGone(LookupError):
    """The run is unknown, expired, or no longer holds the events asked for."""


@dataclass(frozen=True)
class RunEvent:
    """One numbered event of a run.

    A log may keep only the encoded frame (``encoded``), with ``data`` left empty: the
    in-memory log does, which holds a run in about the size of its SSE text.
    """

    seq: int
    event: str
    data: dict[str, Any]
    encoded: bytes | None = None

    def payload(self) -> dict[str, Any]:
        """``data``, decoded from the frame when the log kept only the frame."""
        if self.data or self.encoded is None:
            return self.data
        for line in self.encoded.decode().splitlines():
            if line.startswith("data: "):
                decoded = json.loads(line[len("data: ") :])
                return decoded if isinstance(decoded, dict) else {}
        return {}

    def to_sse(self) -> bytes:
        """The SSE frame, with its number as ``id``."""
        if self.encoded is not None:
            return self.encoded
        return frame(self.event, self.data, event_id=self.seq)


@dataclass(frozen=True)
class RunInfo:
    """What is known of a run besides its events."""

    run_id: str
    session_id: str
    user_did: str
    request_id: str
    status: RunStatus = "queued"
    replica: str = ""
    created_at: float = field(default_factory=time.time)

    def to_wire(self) -> dict[str, str]:
        """``{runId, status}`` for ``GET /sessions/{id}/run``."""
        return {"runId": self.run_id, "status": self.status}


class RunLog(Protocol):
    """Where runs and their events are kept."""

    replica: str

    async def create(self, info: RunInfo) -> None:
        """Register a run (it becomes the session's active run)."""
        ...

    async def append(self, run_id: str, events: list[RunEvent]) -> None:
        """Add events (numbered by the writer, in order)."""
        ...

    async def set_status(self, run_id: str, status: RunStatus) -> None:
        """Record the run's status; a final one starts the retention clock."""
        ...

    async def info(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` when unknown or expired."""
        ...

    async def owner(self, run_id: str) -> str | None:
        """The DID of the user whose run this was, while the log remembers it ran.

        That outlasts the run itself: a run's events are kept ``RUN_RETENTION_SECONDS``
        after it ended, its owner ``RUN_TOMBSTONE_SECONDS`` (a day) after it started, so
        a rejoin can tell a run that expired (410) from one that never was (404).
        """
        ...

    async def active_run(self, session_id: str) -> RunInfo | None:
        """The session's queued, running or recovering run, if any."""
        ...

    async def read(self, run_id: str, after: int, *, wait: float) -> list[RunEvent]:
        """Events after ``after``, waiting up to ``wait`` seconds when there are none.

        Raises:
            RunGone: unknown run, or events after ``after`` were dropped.
        """
        ...

    async def aclose(self) -> None:
        """Stop background work and close connections."""
        ...


def partial_text(events: list[RunEvent]) -> str:
    """The reply text streamed by ``message`` events."""
    return "".join(str(e.data.get("content", "")) for e in events if e.event == "message")


def interrupted_events(first_seq: int, text: str) -> list[RunEvent]:
    """What ends a run whose replica died: an error, then ``done`` interrupted."""
    done: dict[str, Any] = {"status": "interrupted", "interrupted": True, "timestamp": timestamp()}
    if text:
        done["partialText"] = text
    return [
        RunEvent(
            first_seq,
            "error",
            {
                "error": "The server running this turn stopped",
                "retryable": True,
                "timestamp": timestamp(),
            },
        ),
        RunEvent(first_seq + 1, "done", done),
    ]
