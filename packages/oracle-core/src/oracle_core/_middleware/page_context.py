"""``page-context``: tells the model which editor page is open, and when it changed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import SystemMessage
from langgraph.runtime import Runtime

from oracle_core._middleware._common import state_value

__all__ = ["PageContextMiddleware", "PageContextState"]

_logger = logging.getLogger("oracle.middleware.page_context")

_PREVIOUS_KEY = "_previous_editor_room_id"


class PageContextState(AgentState[Any]):
    """Private state of ``page-context``: the page open at the previous model call."""

    _previous_editor_room_id: NotRequired[Annotated[str | None, PrivateStateAttr]]


def _page_label(room_id: str, title: str | None) -> str:
    return f"'{title}' (room {room_id})" if title else f"room {room_id}"


def page_note(room_id: str, title: str | None, previous_room_id: str | None) -> str:
    """The active-page note appended to the system message.

    Args:
        room_id: The editor page (Matrix room) open now.
        title: Its title, when known.
        previous_room_id: The page open at the previous model call, if any.
    """
    note = f"## Active page\nThe user has the editor page {_page_label(room_id, title)} open."
    if previous_room_id and previous_room_id != room_id:
        note += (
            f"\nThe user switched pages: previously room {previous_room_id} was open. "
            "Anything said earlier in this conversation about the page may describe the "
            "previous page and may be stale. Read the current page again before editing it."
        )
    return note


def _with_note(system_message: SystemMessage | None, note: str) -> SystemMessage:
    if system_message is None:
        return SystemMessage(content=note)
    content = system_message.content
    if isinstance(content, str):
        return SystemMessage(content=f"{content}\n\n{note}" if content else note)
    return SystemMessage(content=[*content, {"type": "text", "text": note}])


class PageContextMiddleware(AgentMiddleware[PageContextState, Any]):
    """Appends an active-page note to each model call while a page is open (CORE-80).

    When ``state.editor_room_id`` is set, the system message of that model call (never
    the stored prompt) gets a note naming the page, titled through ``get_room_title``;
    when the lookup fails or returns ``None`` the note names the room id only. The page
    seen at each model call is kept in the private ``_previous_editor_room_id`` key
    (written in ``after_model``); when the page differs at the next call, the note
    reports the switch, flags earlier page context as possibly stale and asks for the
    page to be re-read before editing.

    The sync ``wrap_model_call`` cannot await ``get_room_title``, so synchronous runs
    name the room id only; the runtime always runs agents asynchronously.

    Args:
        get_room_title: ``async (room_id) -> title | None``.
    """

    state_schema = PageContextState

    def __init__(self, get_room_title: Callable[[str], Awaitable[str | None]]) -> None:
        super().__init__()
        self._get_room_title = get_room_title

    @property
    def name(self) -> str:
        """The reserved name ``page-context``."""
        return "page-context"

    async def _title(self, room_id: str) -> str | None:
        try:
            title = await self._get_room_title(room_id)
        except Exception as exc:  # a missing title must not fail the turn
            _logger.warning("room title lookup failed: %s", type(exc).__name__)
            return None
        return title or None

    @staticmethod
    def _room_ids(request: ModelRequest[Any]) -> tuple[str | None, str | None]:
        state = request.state
        return state_value(state, "editor_room_id"), state_value(state, _PREVIOUS_KEY)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        """Call the model with the page note (room id only: no title lookup in sync)."""
        room_id, previous = self._room_ids(request)
        if not room_id:
            return handler(request)
        note = page_note(room_id, None, previous)
        return handler(request.override(system_message=_with_note(request.system_message, note)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        """Call the model with the page note, titled when the lookup succeeds."""
        room_id, previous = self._room_ids(request)
        if not room_id:
            return await handler(request)
        note = page_note(room_id, await self._title(room_id), previous)
        return await handler(
            request.override(system_message=_with_note(request.system_message, note))
        )

    def _remember_page(self, state: PageContextState) -> dict[str, Any] | None:
        room_id = state_value(state, "editor_room_id")
        # A closed page (None) keeps the last one, so reopening another still counts
        # as a switch.
        if not room_id or room_id == state_value(state, _PREVIOUS_KEY):
            return None
        return {_PREVIOUS_KEY: room_id}

    def after_model(self, state: PageContextState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the page the model just saw."""
        return self._remember_page(state)

    async def aafter_model(
        self, state: PageContextState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async form of ``after_model``."""
        return self._remember_page(state)
