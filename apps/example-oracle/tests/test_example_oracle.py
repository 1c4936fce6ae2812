"""The example oracle: its plugins pass the conformance suite and the demo runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from example_oracle import NotesPlugin, UnitsPlugin
from example_oracle.demo import run_demo
from example_oracle.units import convert
from oracle_core import UserInfo
from oracle_core.testing import (
    ScriptedChatModel,
    call_tool,
    create_test_runtime,
    reply,
    validate_plugin,
)


async def test_notes_plugin_conforms(tmp_path: Path) -> None:
    report = await validate_plugin(
        NotesPlugin(), config={"NOTES_DATABASE_PATH": str(tmp_path / "notes.sqlite")}
    )
    assert report.ok


async def test_units_plugin_conforms() -> None:
    report = await validate_plugin(UnitsPlugin())
    assert report.ok


@pytest.mark.parametrize(
    ("value", "source", "target", "expected"),
    [
        (26.2, "mi", "km", 42.1648),
        (20, "c", "f", 68.0),
        (-40, "f", "c", -40.0),
        (1, "gal", "l", 3.7854),
    ],
)
def test_conversions(value: float, source: str, target: str, expected: float) -> None:
    assert convert(value, source, target) == pytest.approx(expected, abs=1e-3)


def test_conversion_across_dimensions_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot convert length"):
        convert(1, "km", "kg")


async def test_notes_are_kept_per_user(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        [
            call_tool("save_note", {"text": "buy milk"}),
            reply("Saved."),
            call_tool("list_notes", {}),
            reply("You have one note."),
        ]
    )
    async with await create_test_runtime(
        plugins=[NotesPlugin()],
        model=model,
        config={"NOTES_DATABASE_PATH": str(tmp_path / "notes.sqlite")},
    ) as runtime:
        await runtime.run_turn("Note: buy milk")
        result = await runtime.run_turn("What are my notes?")
        assert result.tool_messages("list_notes")[0].content == '["buy milk"]'
        runtime.user = UserInfo(did="did:key:z6MkSomeoneElse")
        assert await runtime.invoke_tool("list_notes", {}) == "[]"


async def test_demo_conversation_uses_the_meta_tools(tmp_path: Path) -> None:
    lines = await run_demo(tmp_path)
    text = "\n".join(lines)
    assert lines[0] == "Booted: notes, unit-converter"
    assert "tool call > list_capabilities({})" in text
    assert 'tool call > load_capability({"names": ["unit-converter"]})' in text
    assert "result    < 26.2 mi = 42.16 km" in text
    # Before the load the converter is hidden; after it, it is visible, and in the
    # second turn it is visible from the first call because loaded_plugins persisted.
    see = [line for line in lines if "could see" in line]
    assert "convert_units" not in see[0].split("->")[0]
    assert "convert_units" in see[0].split("->")[1]
    assert "convert_units" in see[1]
    assert "result    < Saved." in text
