"""Tests of the checkpoint serializer (messages rebuilt without re-validation)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.jsonplus import EXT_PYDANTIC_V2, JsonPlusSerializer
from pydantic import BaseModel

from oracle_core import CheckpointSerializer
from oracle_core._langgraph_compat import DeltaSnapshot, msgpack_ext_hook


class Note(BaseModel):
    """A pydantic value that is not a message."""

    text: str
    at: datetime.date


def messages() -> list[BaseMessage]:
    return [
        SystemMessage("You are an oracle.", id="s1"),
        HumanMessage("What time is it in Lisbon?", id="h1", name="alice"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "clock__now", "args": {"tz": "Europe/Lisbon"}, "id": "c1"}],
            response_metadata={"finish_reason": "tool_calls", "model_name": "m"},
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        ),
        ToolMessage("10:42", tool_call_id="c1", name="clock__now", id="t1", artifact={"x": 1}),
        AIMessage(
            [{"type": "text", "text": "It is 10:42."}],
            id="a2",
            additional_kwargs={"refusal": None},
        ),
        AIMessageChunk(content="par", id="k1"),
        RemoveMessage(id="h0"),
    ]


def test_messages_read_back_equal_to_validated_ones() -> None:
    ours, stock = CheckpointSerializer(), JsonPlusSerializer()
    original = messages()

    stored = ours.dumps_typed(original)
    read = ours.loads_typed(stored)

    assert stored == stock.dumps_typed(original)  # writes are LangGraph's, byte for byte
    validated = stock.loads_typed(stored)
    assert read == validated == original
    for mine, theirs in zip(read, validated, strict=True):
        assert type(mine) is type(theirs)
        assert mine.model_dump() == theirs.model_dump()
        assert mine.model_fields_set == theirs.model_fields_set
        assert mine.__pydantic_extra__ == theirs.__pydantic_extra__ == {}
    assert read[2].tool_calls == [
        {"name": "clock__now", "args": {"tz": "Europe/Lisbon"}, "id": "c1", "type": "tool_call"}
    ]
    assert read[3].artifact == {"x": 1}
    assert read[4].text == "It is 10:42."


def test_read_messages_behave_like_validated_ones() -> None:
    read = CheckpointSerializer().loads_typed(CheckpointSerializer().dumps_typed(messages()))
    ai = read[2]

    changed = ai.model_copy(update={"content": "now"})
    ai.name = "oracle"  # assignment works as on any message
    duplicate = copy.deepcopy(read[3])

    assert changed.content == "now"
    assert changed.tool_calls == ai.tool_calls
    assert ai.name == "oracle"
    assert ai.model_dump()["name"] == "oracle"
    assert duplicate == read[3]
    assert duplicate is not read[3]
    assert AIMessage.model_validate(read[4].model_dump()) == read[4]


def test_delta_snapshots_of_messages_read_back() -> None:
    ours = CheckpointSerializer()

    read = ours.loads_typed(ours.dumps_typed(DeltaSnapshot(messages())))

    assert isinstance(read, DeltaSnapshot)
    assert read.value == messages()


def test_a_message_with_other_fields_is_validated_as_langgraph_would() -> None:
    """A field set that is not the class's own (another version wrote it) is validated."""
    ours = CheckpointSerializer()
    stored = messages()[1].model_dump()
    del stored["name"]
    stored["example"] = False
    data = ("langchain_core.messages.human", "HumanMessage", stored, "model_validate_json")
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_PYDANTIC_V2, ormsgpack.packb(data)))

    read = ours.loads_typed(("msgpack", blob))

    assert isinstance(read, HumanMessage)
    assert read.name is None  # the default filled in
    assert read.__pydantic_extra__ == {"example": False}
    assert read.text == "What time is it in Lisbon?"
    assert read == JsonPlusSerializer().loads_typed(("msgpack", blob))


def test_tool_calls_of_another_version_are_normalised() -> None:
    """Validation runs for them: the tool-call dicts get their ``type``, as stock."""
    stored = messages()[2].model_dump()
    stored["tool_calls"] = [{"name": "clock__now", "args": {}, "id": "c1"}]
    del stored["invalid_tool_calls"]
    data = ("langchain_core.messages.ai", "AIMessage", stored, "model_validate_json")
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_PYDANTIC_V2, ormsgpack.packb(data)))

    read = CheckpointSerializer().loads_typed(("msgpack", blob))

    assert read.tool_calls == [{"name": "clock__now", "args": {}, "id": "c1", "type": "tool_call"}]
    assert read.invalid_tool_calls == []


def test_other_values_keep_langgraphs_decoding() -> None:
    ours, stock = CheckpointSerializer(), JsonPlusSerializer()
    value: dict[str, Any] = {
        "note": Note(text="hi", at=datetime.date(2026, 1, 2)),
        "when": datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC),
        "ids": {"a", "b"},
        "nested": [{"message": HumanMessage("x", id="h")}],
    }

    read = ours.loads_typed(ours.dumps_typed(value))

    assert read == stock.loads_typed(stock.dumps_typed(value)) == value
    assert isinstance(read["note"], Note)


def test_an_allowlisted_copy_still_rebuilds_messages_itself() -> None:
    strict = CheckpointSerializer(allowed_msgpack_modules=None)
    widened = strict.with_msgpack_allowlist([Note])
    value = {"note": Note(text="hi", at=datetime.date(2026, 1, 2)), "m": messages()[2]}

    read = widened.loads_typed(widened.dumps_typed(value))

    assert widened is not strict
    assert isinstance(widened, CheckpointSerializer)
    assert read == value
    # The clone's hook is the message-building one, wrapped around LangGraph's new one.
    assert msgpack_ext_hook(widened).__qualname__.startswith("_constructing_messages")
    assert msgpack_ext_hook(widened) is not msgpack_ext_hook(strict)


@pytest.mark.parametrize("serializer", [CheckpointSerializer(), JsonPlusSerializer()])
def test_each_serializer_reads_what_the_other_wrote(serializer: JsonPlusSerializer) -> None:
    other = JsonPlusSerializer() if isinstance(serializer, CheckpointSerializer) else None
    writer = other or CheckpointSerializer()

    assert serializer.loads_typed(writer.dumps_typed(messages())) == messages()
