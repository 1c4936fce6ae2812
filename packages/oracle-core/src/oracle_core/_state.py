"""The graph state of the main agent, its reducers and the read-only view plugins get."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

from langchain.agents import AgentState
from langchain_core.messages import AnyMessage
from langgraph.channels import DeltaChannel

from oracle_core._langgraph_compat import messages_delta_reducer

__all__ = [
    "AgentConfigState",
    "Client",
    "MainAgentState",
    "ReadonlyState",
    "UserContext",
    "merge_dict",
    "union_ordered",
]

Client = Literal["portal", "matrix", "slack"]

USER_CONTEXT_SLOTS: tuple[str, ...] = (
    "identity",
    "work",
    "goals",
    "interests",
    "relationships",
    "recent",
)

TURN_STATE_KEYS: frozenset[str] = frozenset(
    {"user_context", "user_preferences", "current_entity_did", "space_id", "editor_room_id"}
)


class AgentConfigState(TypedDict, total=False):
    """The ``config`` key of the state: who the thread belongs to."""

    did: str
    ws_id: str | None


class UserContext(TypedDict, total=False):
    """What the memory plugin knows about the user, one slot per topic."""

    identity: str | None
    work: str | None
    goals: str | None
    interests: str | None
    relationships: str | None
    recent: str | None


def union_ordered(left: Sequence[str] | None, right: Sequence[str] | None) -> list[str]:
    """Ordered set union: keeps ``left``'s order, appends unseen names; never removes."""
    result = list(dict.fromkeys(left or ()))
    seen = set(result)
    for name in right or ():
        if name not in seen:
            seen.add(name)
            result.append(name)
    return result


def merge_dict(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> dict[str, Any]:
    """Shallow merge; a ``None`` update leaves the value as it was."""
    merged = dict(left or {})
    if right:
        merged.update(right)
    return merged


MESSAGES_SNAPSHOT_FREQUENCY = 100
"""Updates of a thread's messages between two checkpoints that hold the whole list.

LangGraph's default. A turn with one tool call makes four updates (question, tool call,
result, answer), so one checkpoint in about 125 carries the list and a load replays at
most 100 updates' writes on top of it. Lower values spend bytes (a copy of the list more
often) and save little: a load builds every message either way.
"""

ThreadMessages = Annotated[
    list[AnyMessage],
    DeltaChannel(messages_delta_reducer, snapshot_frequency=MESSAGES_SNAPSHOT_FREQUENCY),
]
"""The ``messages`` key of a thread, stored as deltas (LangGraph's ``DeltaChannel``, beta).

With LangChain's ``AgentState`` (``add_messages``), LangGraph stores the whole message
list in every checkpoint, one per superstep: a turn on a 500-message thread wrote the
500 messages five times. Here each step stores only its new messages (as the writes it
stores anyway), plus the whole list every ``MESSAGES_SNAPSHOT_FREQUENCY`` updates, and
loading a thread replays the writes since the last copy. The value is therefore not in a
checkpoint's ``channel_values``: read it with a graph's ``aget_state``
(``read_thread_state`` for main-agent threads).

LangGraph's ``_messages_delta_reducer`` merges like ``add_messages`` (by id;
``RemoveMessage`` and ``REMOVE_ALL_MESSAGES``), without raising on unknown ids; LangGraph
gives messages their ids before storing them. A thread stored with whole lists loads
unchanged: the replay starts from the last list it finds. PostgreSQL's ``keep_latest``
pruning refuses such threads, since older checkpoints are needed to rebuild the newest.
"""


class MainAgentState(AgentState[Any]):
    """State of every main-agent thread (CORE-50). Plugins cannot add keys."""

    messages: Required[ThreadMessages]
    config: NotRequired[Annotated[AgentConfigState, merge_dict]]
    client: NotRequired[Client]
    editor_room_id: NotRequired[str | None]
    space_id: NotRequired[str | None]
    current_entity_did: NotRequired[str | None]
    browser_tools: NotRequired[list[dict[str, Any]] | None]
    ag_actions: NotRequired[list[dict[str, Any]] | None]
    user_context: NotRequired[Annotated[UserContext, merge_dict]]
    user_preferences: NotRequired[dict[str, Any] | None]
    loaded_plugins: NotRequired[Annotated[list[str], union_ordered]]


def state_defaults() -> dict[str, Any]:
    """Fresh default values of every state key (nested values are never shared)."""
    return {
        "config": {"did": "", "ws_id": None},
        "client": "portal",
        "editor_room_id": None,
        "space_id": None,
        "current_entity_did": None,
        "browser_tools": [],
        "ag_actions": [],
        "user_context": dict.fromkeys(USER_CONTEXT_SLOTS),
        "user_preferences": None,
        "loaded_plugins": [],
    }


_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "config": merge_dict,
    "user_context": merge_dict,
    "loaded_plugins": union_ordered,
}


def apply_updates(state: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with ``updates`` applied through the state's reducers, as the graph will.

    Messages are left alone (their reducer needs ids); other keys are last-write.
    """
    merged = dict(state)
    for key, value in updates.items():
        reducer = _REDUCERS.get(key)
        merged[key] = reducer(merged.get(key), value) if reducer is not None else value
    return merged


class ReadonlyState(Mapping[str, Any]):
    """Read-only view over a state snapshot, defaults filled in.

    ``loaded_plugins`` is exposed as a ``frozenset``; messages as a tuple.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        merged = state_defaults()
        merged.update({k: v for k, v in (data or {}).items() if not k.startswith("_")})
        merged.setdefault("messages", [])
        self._data = merged

    def __getitem__(self, key: str) -> Any:
        if key == "loaded_plugins":
            return self.loaded_plugins
        if key == "messages":
            return self.messages
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"ReadonlyState(keys={sorted(self._data)})"

    @property
    def messages(self) -> tuple[AnyMessage, ...]:
        """The thread's messages, oldest first."""
        return tuple(self._data.get("messages") or ())

    @property
    def loaded_plugins(self) -> frozenset[str]:
        """Plugins loaded in this thread through ``load_capability``."""
        return frozenset(self._data.get("loaded_plugins") or ())

    @property
    def user_context(self) -> Mapping[str, str | None]:
        """The memory slots (all keys present, ``None`` when unknown)."""
        slots = dict.fromkeys(USER_CONTEXT_SLOTS)
        slots.update(self._data.get("user_context") or {})
        return slots

    @property
    def user_preferences(self) -> Mapping[str, Any] | None:
        """The user's preferences, if any."""
        prefs = self._data.get("user_preferences")
        return dict(prefs) if prefs else None
