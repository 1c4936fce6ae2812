"""Frontend calls: browser tools and AG-UI actions that the user's client runs.

A plugin asks the client of the turn's session to run something with
``await rt_ctx.frontend.call(kind, name, args, timeout=…)`` and gets the client's
result back, or a :class:`FrontendCallError` with a text fit for the model. The host
issues the call id, sends the call to one client of the session and settles it only
with that client's answer. The server's implementation is its socket.io gateway; the
local one, :class:`LocalFrontendService`, hands calls to responders attached in process
(a terminal client, a test).

Every call is also logged, best effort, to the user's Matrix room when there is one:
an ``ixo.action.log`` event with the call's name, kind and outcome, never its arguments
or result (they are the user's content, and the room log is a diagnostic trail).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from oracle_core._errors import NotConfiguredError, OracleError

if TYPE_CHECKING:
    from oracle_core._context import SessionInfo, UserInfo
    from oracle_core._matrix import MatrixAccessor

__all__ = [
    "ACTION_LOG_EVENT_TYPE",
    "FrontendAccessor",
    "FrontendCall",
    "FrontendCallError",
    "FrontendCallKind",
    "FrontendOutcome",
    "FrontendResponder",
    "FrontendService",
    "LocalFrontendService",
    "frontend_outcome",
    "new_frontend_call_id",
]

FrontendCallKind = Literal["browser_tool", "action"]
"""``browser_tool``: a browser tool (``browser_tool_call`` / ``tool_result`` on the
wire); ``action``: an AG-UI action (``action_call`` / ``action_call_result``)."""

FRONTEND_CALL_KINDS: tuple[FrontendCallKind, ...] = ("browser_tool", "action")
DEFAULT_TIMEOUT_SECONDS = 15.0
ACTION_LOG_EVENT_TYPE = "ixo.action.log"
ACTION_FAILED = "Action failed"
UNKNOWN_OUTCOME = (
    "Outcome unknown: the client may or may not have run it. Do not call it again unless "
    "the user asks; tell the user instead."
)
CALL_LABELS: dict[FrontendCallKind, str] = {
    "browser_tool": "Browser tool",
    "action": "AG-UI action",
}
_REQUEST_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")

logger = logging.getLogger("oracle.frontend")


class FrontendCallError(OracleError):
    """A frontend call failed: its message is what the model reads as the tool error.

    Codes: ``frontend.failed`` (the client answered with an error, or an action with
    ``success: false``), ``frontend.timeout`` (no answer in time; the outcome is
    unknown), ``ws.no_client`` (no client of the session is connected),
    ``ws.client_gone`` (the client left before it answered), ``frontend.shutting_down``.
    """

    code = "frontend.failed"

    @classmethod
    def timed_out(cls, kind: FrontendCallKind, name: str, timeout_ms: int) -> FrontendCallError:
        """No answer in time (``frontend.timeout``): the outcome is unknown."""
        return cls(
            f"{CALL_LABELS[kind]} timeout after {timeout_ms}ms: {name}. {UNKNOWN_OUTCOME}",
            code="frontend.timeout",
        )

    @classmethod
    def no_client(cls, kind: FrontendCallKind, name: str) -> FrontendCallError:
        """No client of the session is connected (``ws.no_client``): it never ran."""
        noun = "browser tool" if kind == "browser_tool" else CALL_LABELS[kind]
        return cls(
            f"ws.no_client: no client of this session is connected, so the {noun} {name!r} "
            "did not run.",
            code="ws.no_client",
        )

    @classmethod
    def client_gone(cls) -> FrontendCallError:
        """The client left before it answered (``ws.client_gone``): outcome unknown."""
        return cls(
            f"ws.client_gone: the client disconnected before it answered. {UNKNOWN_OUTCOME}",
            code="ws.client_gone",
        )


@dataclass(frozen=True)
class FrontendCall:
    """One call on its way to a client.

    Attributes:
        call_id: Issued by the host for this call; the client echoes it as
            ``toolCallId``.
        kind: Which round trip it is.
        name: The browser tool or action.
        args: Its arguments.
        session_id: The session whose client runs it.
        request_id: The turn's request id, when there is one.
    """

    call_id: str
    kind: FrontendCallKind
    name: str
    args: Mapping[str, Any]
    session_id: str
    request_id: str | None = None


@dataclass(frozen=True)
class FrontendOutcome:
    """What a client's answer settles a call with: a value, or an error text."""

    value: Any = None
    error: str | None = None


def _error_text(error: Any) -> str | None:
    """The text of a client ``error`` field; ``None`` when the field carries no error."""
    if error is None or error is False or error == "":
        return None
    if isinstance(error, str):
        return error
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(error, ensure_ascii=False, default=str)


def frontend_outcome(kind: FrontendCallKind, answer: Mapping[str, Any]) -> FrontendOutcome:
    """The outcome of a client's answer, as it arrives on the wire.

    A browser tool's ``{result?, error?}``: ``error`` wins. An action's ``{result,
    error?}``: ``error``, or a ``result`` with ``success: false``, fails the call with
    ``result.error``, else the ``error`` text, else ``Action failed``.
    """
    result = answer.get("result")
    error = _error_text(answer.get("error"))
    if kind == "browser_tool":
        return FrontendOutcome(error=error) if error is not None else FrontendOutcome(result)
    declined = isinstance(result, Mapping) and result.get("success") is False
    if error is None and not declined:
        return FrontendOutcome(value=result)
    detail = _error_text(result.get("error")) if isinstance(result, Mapping) else None
    return FrontendOutcome(error=detail or error or ACTION_FAILED)


def new_frontend_call_id(kind: FrontendCallKind, request_id: str | None) -> str:
    """A fresh call id: ``ag_<requestId>_<8 hex>`` for actions, ``tc_…`` for browser tools.

    The request id is cut to 64 characters of ``[A-Za-z0-9_-]`` (it is the client's
    own string); the random part keeps ids of one turn apart, and the host still matches
    answers by session and socket, never by id alone.
    """
    prefix = "ag" if kind == "action" else "tc"
    request = _REQUEST_ID_CHARS.sub("", request_id or "")[:64] or "noreq"
    return f"{prefix}_{request}_{secrets.token_hex(4)}"


class FrontendAccessor(Protocol):
    """Frontend calls for one session, as a request sees them (``rt_ctx.frontend``)."""

    async def call(
        self,
        kind: FrontendCallKind,
        name: str,
        args: Mapping[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait for the client, passed on
    ) -> Any:
        """Run ``name`` in the session's client and return its result.

        Args:
            kind: ``browser_tool`` or ``action``.
            name: The tool or action the client declared.
            args: Its arguments (JSON-serialisable).
            timeout: Seconds to wait for the answer; the host's default (15 s) when
                ``None``.

        Raises:
            FrontendCallError: The client failed it, no client answered in time, none
                is connected, or it left before answering. The message is for the model.
        """
        ...


class FrontendService(Protocol):
    """Gives each request the frontend calls of its session."""

    def for_session(self, user: UserInfo, session: SessionInfo) -> FrontendAccessor:
        """The accessor for ``session`` of ``user``."""
        ...


FrontendResponder = Callable[[FrontendCall], Awaitable[Mapping[str, Any]]]
"""Answers a call as a client would on the wire: ``{"result": …}`` or ``{"error": …}``."""


@dataclass
class LocalFrontendService:
    """Frontend calls in process: responders attached per session answer them.

    The newest responder attached to a session is the one client every call of that
    session goes to; with none attached a call fails at once with ``ws.no_client``.

    Args:
        timeout_seconds: The default wait for an answer.
    """

    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    _responders: dict[str, list[FrontendResponder]] = field(default_factory=dict, repr=False)

    def attach(self, session_id: str, responder: FrontendResponder) -> Callable[[], None]:
        """Make ``responder`` the client of ``session_id``; returns the detach function."""
        stack = self._responders.setdefault(session_id, [])
        stack.append(responder)

        def detach() -> None:
            if responder in stack:
                stack.remove(responder)
            if not stack:
                self._responders.pop(session_id, None)

        return detach

    def for_session(self, user: UserInfo, session: SessionInfo) -> FrontendAccessor:
        return _LocalFrontend(self, session.id, session.request_id)

    async def run(self, call: FrontendCall, wait: float | None) -> Any:
        stack = self._responders.get(call.session_id)
        if not stack:
            raise FrontendCallError.no_client(call.kind, call.name)
        responder = stack[-1]
        limit = self.timeout_seconds if wait is None else wait
        try:
            answer = await asyncio.wait_for(responder(call), limit)
        except TimeoutError:
            raise FrontendCallError.timed_out(call.kind, call.name, round(limit * 1000)) from None
        outcome = frontend_outcome(call.kind, answer if isinstance(answer, Mapping) else {})
        if outcome.error is not None:
            raise FrontendCallError(outcome.error)
        return outcome.value


@dataclass
class _LocalFrontend:
    service: LocalFrontendService
    session_id: str
    request_id: str | None

    async def call(
        self,
        kind: FrontendCallKind,
        name: str,
        args: Mapping[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait for the client, passed on
    ) -> Any:
        check_kind(kind)
        call = FrontendCall(
            call_id=new_frontend_call_id(kind, self.request_id),
            kind=kind,
            name=name,
            args=dict(args),
            session_id=self.session_id,
            request_id=self.request_id,
        )
        return await self.service.run(call, timeout)


def check_kind(kind: str) -> None:
    """Raise ``ValueError`` for a kind that is not a frontend call kind."""
    if kind not in FRONTEND_CALL_KINDS:
        raise ValueError(f"frontend call kind must be one of {FRONTEND_CALL_KINDS}, not {kind!r}")


_background: set[asyncio.Task[None]] = set()


@dataclass
class LoggedFrontend:
    """``rt_ctx.frontend``: the host's accessor, each call logged to the user's room.

    The log is an ``ixo.action.log`` event ``{action: {name, kind, success, outcome},
    threadId}`` in the session's room, else the user's room with the oracle; nothing is
    posted when there is neither or Matrix is off. Posting runs in the background and
    never fails the call.
    """

    inner: FrontendAccessor
    matrix: MatrixAccessor | None
    session: SessionInfo

    async def call(
        self,
        kind: FrontendCallKind,
        name: str,
        args: Mapping[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait for the client, passed on
    ) -> Any:
        check_kind(kind)
        try:
            result = await self.inner.call(kind, name, args, timeout=timeout)
        except FrontendCallError as exc:
            self._log(kind, name, exc.code)
            raise
        self._log(kind, name, "ok")
        return result

    def _log(self, kind: FrontendCallKind, name: str, outcome: str) -> None:
        if self.matrix is None:
            return
        task = asyncio.get_running_loop().create_task(self._post(kind, name, outcome))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _post(self, kind: FrontendCallKind, name: str, outcome: str) -> None:
        matrix = self.matrix
        assert matrix is not None
        content = {
            "action": {"name": name, "kind": kind, "success": outcome == "ok", "outcome": outcome},
            "threadId": self.session.id,
        }
        try:
            room_id = self.session.room_id or await matrix.user_room_id()
            if room_id:
                await matrix.send_event(room_id, ACTION_LOG_EVENT_TYPE, content)
        except NotConfiguredError:
            return
        except Exception as exc:
            # The code only: the error text may quote the room or the user.
            logger.warning(
                "frontend.action_log_failed: %s", getattr(exc, "code", type(exc).__name__)
            )
