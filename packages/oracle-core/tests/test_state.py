"""Tests of the main-agent state, its reducers and the read-only view (CORE-50, 51)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph

from oracle_core import MESSAGES_SNAPSHOT_FREQUENCY, MainAgentState, ReadonlyState
from oracle_core._state import merge_dict, union_ordered

# --- fixtures -------------------------------------------------------------------------


def run_update(initial: dict[str, Any], *updates: dict[str, Any]) -> dict[str, Any]:
    """Apply ``updates`` through a real LangGraph graph over ``MainAgentState``."""
    graph: StateGraph[Any] = StateGraph(MainAgentState)
    previous = START
    for index, update in enumerate(updates):
        name = f"step_{index}"

        def node(state: Any, update: dict[str, Any] = update) -> dict[str, Any]:
            return update

        graph.add_node(name, node)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    result: dict[str, Any] = graph.compile().invoke(initial)
    return result


# --- reducers -------------------------------------------------------------------------


def test_union_ordered_keeps_order_and_appends_unseen_names() -> None:
    assert union_ordered(["a", "b"], ["c", "a", "d", "c"]) == ["a", "b", "c", "d"]


def test_union_ordered_never_removes() -> None:
    assert union_ordered(["a", "b"], []) == ["a", "b"]
    assert union_ordered(["a", "b"], None) == ["a", "b"]
    assert union_ordered(None, ["x"]) == ["x"]
    assert union_ordered(None, None) == []


def test_union_ordered_drops_duplicates_already_on_the_left() -> None:
    assert union_ordered(["a", "a", "b"], ["b"]) == ["a", "b"]


def test_union_ordered_does_not_mutate_its_inputs() -> None:
    left = ["a"]
    right = ["b"]

    union_ordered(left, right)

    assert left == ["a"]
    assert right == ["b"]


def test_merge_dict_is_shallow() -> None:
    left = {"did": "did:key:u", "nested": {"x": 1}}

    merged = merge_dict(left, {"ws_id": "ws-1", "nested": {"y": 2}})

    assert merged == {"did": "did:key:u", "ws_id": "ws-1", "nested": {"y": 2}}
    assert left == {"did": "did:key:u", "nested": {"x": 1}}


def test_merge_dict_with_no_update_keeps_the_left_side() -> None:
    left = {"a": 1}

    assert merge_dict(left, None) == {"a": 1}
    assert merge_dict(left, {}) == {"a": 1}
    assert merge_dict(None, None) == {}
    assert merge_dict(None, {"b": 2}) == {"b": 2}
    assert merge_dict(left, None) is not left


def test_graph_applies_the_state_reducers() -> None:
    result = run_update(
        {
            "messages": [HumanMessage("hi")],
            "loaded_plugins": ["notes"],
            "user_context": {"identity": "Ada"},
            "config": {"did": "did:key:u", "ws_id": None},
            "space_id": "space-1",
        },
        {
            "loaded_plugins": ["weather", "notes"],
            "user_context": {"work": "Engineer"},
            "config": {"ws_id": "ws-1"},
            "space_id": "space-2",
            "messages": [AIMessage("hello")],
        },
        {"loaded_plugins": [], "browser_tools": [{"name": "click"}]},
        {"browser_tools": [{"name": "scroll"}]},
    )

    assert result["loaded_plugins"] == ["notes", "weather"]
    assert result["user_context"] == {"identity": "Ada", "work": "Engineer"}
    assert result["config"] == {"did": "did:key:u", "ws_id": "ws-1"}
    # Last write wins and lists without a reducer are replaced.
    assert result["space_id"] == "space-2"
    assert result["browser_tools"] == [{"name": "scroll"}]
    assert [m.text for m in result["messages"]] == ["hi", "hello"]


def test_thread_messages_are_snapshot_at_the_exported_frequency() -> None:
    channel = StateGraph(MainAgentState).channels["messages"]

    assert isinstance(channel, DeltaChannel)
    assert channel.snapshot_frequency == MESSAGES_SNAPSHOT_FREQUENCY == 100


# --- ReadonlyState (CORE-51) ----------------------------------------------------------


def test_readonly_state_fills_defaults() -> None:
    view = ReadonlyState()

    assert view["client"] == "portal"
    assert view["config"] == {"did": "", "ws_id": None}
    assert view["editor_room_id"] is None
    assert view["space_id"] is None
    assert view["current_entity_did"] is None
    assert view["browser_tools"] == []
    assert view["ag_actions"] == []
    assert view["user_preferences"] is None
    assert view.loaded_plugins == frozenset()
    assert view.messages == ()
    assert view.user_preferences is None
    assert dict(view.user_context) == dict.fromkeys(
        ("identity", "work", "goals", "interests", "relationships", "recent")
    )


def test_readonly_state_exposes_loaded_plugins_as_frozenset_and_messages_as_tuple() -> None:
    messages = [HumanMessage("hi")]
    view = ReadonlyState({"loaded_plugins": ["a", "b", "a"], "messages": messages})

    assert view["loaded_plugins"] == frozenset({"a", "b"})
    assert isinstance(view["loaded_plugins"], frozenset)
    assert view.loaded_plugins == frozenset({"a", "b"})
    assert isinstance(view["messages"], tuple)
    assert view.messages == tuple(messages)


def test_readonly_state_hides_private_keys() -> None:
    view = ReadonlyState({"_previous_editor_room_id": "!room", "space_id": "s"})

    assert "_previous_editor_room_id" not in view
    assert "_previous_editor_room_id" not in list(view)
    with pytest.raises(KeyError):
        view["_previous_editor_room_id"]
    assert view["space_id"] == "s"


def test_readonly_state_user_context_keeps_every_slot() -> None:
    view = ReadonlyState({"user_context": {"goals": "Ship it"}})

    assert view.user_context["goals"] == "Ship it"
    assert view.user_context["identity"] is None
    assert len(view.user_context) == 6


def test_readonly_state_cannot_be_assigned() -> None:
    view = ReadonlyState({"space_id": "s"})

    with pytest.raises(TypeError):
        view["space_id"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        del view["space_id"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        view.space_id = "other"  # type: ignore[attr-defined]
    assert view["space_id"] == "s"


def test_readonly_state_is_not_affected_by_later_changes_to_its_source() -> None:
    source: dict[str, Any] = {"space_id": "s", "loaded_plugins": ["a"]}
    view = ReadonlyState(source)

    source["space_id"] = "changed"
    source["loaded_plugins"].append("b")
    source["new_key"] = 1

    assert view["space_id"] == "s"
    assert "new_key" not in view


def test_readonly_state_preferences_are_a_copy() -> None:
    prefs = {"language": "fr"}
    view = ReadonlyState({"user_preferences": prefs})

    copy = view.user_preferences
    assert copy == {"language": "fr"}
    assert copy is not prefs


def test_default_nested_values_are_not_shared_between_views() -> None:
    """A write through one view's nested default must not reach other views.

    The defaults are module-level; handing them out by reference lets one plugin's
    mistake change the state every later request starts from.
    """
    first = ReadonlyState()
    slots = first["user_context"]
    try:
        with contextlib.suppress(TypeError):
            slots["work"] = "leaked"
        assert ReadonlyState()["user_context"]["work"] is None
    finally:
        if isinstance(slots, dict) and slots.get("work") == "leaked":
            slots["work"] = None  # repair the shared default for the other tests
