"""What turn locks are: one running turn per session, and the errors of taking one."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

__all__ = ["TurnBusy", "TurnLocks", "wait_timeout"]


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

    def __reduce__(self) -> tuple[type[TurnBusy], tuple[str]]:
        # Pickled by the session id it was made from (workers send it over their hub).
        return (type(self), (self.session_id,))


def wait_timeout(session_id: str) -> TimeoutError:
    """The error of a turn that waited its whole timeout (code ``turn.wait_timeout``)."""
    return TimeoutError(
        f"turn.wait_timeout: session {session_id} stayed busy for the whole timeout; "
        "retry later or raise the timeout"
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
            TimeoutError: On entry, when ``wait`` is ``True`` and ``timeout`` ran out
                (``turn.wait_timeout``).
        """
        ...

    async def is_held(self, session_id: str) -> bool:
        """Whether a turn is running for the session (anywhere the locks are shared)."""
        ...

    async def aclose(self) -> None:
        """Release the resources (connections, background tasks) of the locks."""
        ...
