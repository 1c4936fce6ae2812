"""The graph state of the main agent, its reducers and the read-only view plugins get."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from langchain.agents import AgentState
from langchain_core.messages import AnyMessage

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


class MainAgentState(AgentState[Any]):
    """State of every main-agent thread (CORE-50). Plugins cannot add keys."""

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
